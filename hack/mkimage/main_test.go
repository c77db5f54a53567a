package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

func TestRun(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "tool")
	if err := os.WriteFile(bin, []byte("bin"), 0o750); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "img.tar")
	var stdout bytes.Buffer
	err := run([]string{"--tag", "example/tool:v1", "--output", out, "--file", bin + ":/usr/local/bin/tool",
		"--dir", "/tmp:1777", "--entrypoint", "/usr/local/bin/tool", "--label", "a=b", "--created", "86400"}, &stdout)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout.String(), "example/tool:v1, image ID sha256:") {
		t.Errorf("stdout = %q", stdout.String())
	}
	tag, err := name.NewTag("example/tool:v1")
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(out, &tag)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Config.Labels["a"] != "b" || cfg.Created.Unix() != 86400 || len(cfg.Config.Entrypoint) != 1 {
		t.Errorf("config = %+v, created %v", cfg.Config, cfg.Created)
	}
}

func TestRunRejects(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "img.tar")
	for name, args := range map[string][]string{
		"no tag":       {"--output", out},
		"no output":    {"--tag", "a:v1"},
		"file no dst":  {"--tag", "a:v1", "--output", out, "--file", "/etc/hostname"},
		"missing file": {"--tag", "a:v1", "--output", out, "--file", filepath.Join(dir, "nope") + ":/x"},
		"file is dir":  {"--tag", "a:v1", "--output", out, "--file", dir + ":/x"},
		"bad dir mode": {"--tag", "a:v1", "--output", out, "--dir", "/tmp:rwx"},
		"bad label":    {"--tag", "a:v1", "--output", out, "--label", "novalue"},
		"bad created":  {"--tag", "a:v1", "--output", out, "--created", "yesterday"},
		"latest":       {"--tag", "a:latest", "--output", out},
	} {
		if err := run(args, &bytes.Buffer{}); err == nil {
			t.Errorf("%s: run(%q) succeeded", name, args)
		}
	}
	if _, err := os.Stat(out); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a rejected run left %s behind (stat err %v)", out, err)
	}
}

// TestServedTree: --served-tree puts the file every FUSE server serves, with its content, below the given dir
// (where the image's fake GCS server finds its bucket).
func TestServedTree(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "img.tar")
	if err := run([]string{"--tag", "example/tree:v1", "--output", out, "--served-tree", "/srv/gcs/bucket"}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	files := imageFiles(t, out, "example/tree:v1")
	want := "srv/gcs/bucket/" + fuseserver.ServedFile
	if got, ok := files[strings.TrimPrefix(want, "/")]; !ok || got != fuseserver.Content {
		t.Errorf("image files %v: want %s holding %q", files, want, fuseserver.Content)
	}
	if err := run([]string{"--tag", "example/tree:v1", "--output", out, "--served-tree", "relative/dir"}, &bytes.Buffer{}); err == nil {
		t.Error("a relative --served-tree was accepted")
	}
}

// TestSquashfsTree: --squashfs-tree puts a squashfs image of the served tree at the given path (what the
// image's squashfuse serves).
func TestSquashfsTree(t *testing.T) {
	testenv.RealServer(t, "mksquashfs")
	dir := t.TempDir()
	out := filepath.Join(dir, "img.tar")
	const at = "/usr/local/share/tree.squashfs"
	if err := run([]string{"--tag", "example/sq:v1", "--output", out, "--squashfs-tree", at}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	sq, ok := imageFiles(t, out, "example/sq:v1")[strings.TrimPrefix(at, "/")]
	if !ok {
		t.Fatalf("no %s in the image", at)
	}
	local := filepath.Join(dir, "tree.squashfs")
	if err := os.WriteFile(local, []byte(sq), 0o644); err != nil {
		t.Fatal(err)
	}
	// unsquashfs (squashfs-tools, beside mksquashfs) lists the image's files.
	list, err := exec.Command("unsquashfs", "-l", local).CombinedOutput()
	if err != nil || !strings.Contains(string(list), "/"+fuseserver.ServedFile) {
		t.Errorf("unsquashfs -l: %v, want %s listed:\n%s", err, fuseserver.ServedFile, list)
	}
	cat, err := exec.Command("unsquashfs", "-cat", local, fuseserver.ServedFile).Output()
	if err != nil || string(cat) != fuseserver.Content {
		t.Errorf("unsquashfs -cat %s: %q, %v; want %q", fuseserver.ServedFile, cat, err, fuseserver.Content)
	}
}

// imageFiles reads the regular files of the image tarball out (tag) by their path.
func imageFiles(t *testing.T, out, tagName string) map[string]string {
	t.Helper()
	tag, err := name.NewTag(tagName)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(out, &tag)
	if err != nil {
		t.Fatal(err)
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	files := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = string(b)
		}
	}
	return files
}
