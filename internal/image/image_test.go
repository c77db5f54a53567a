package image

import (
	"archive/tar"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

var created = time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)

func testSpec(t *testing.T) Spec {
	t.Helper()
	src := filepath.Join(t.TempDir(), "tool")
	if err := os.WriteFile(src, []byte("#!binary\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return Spec{
		Files: []File{
			{Path: "/usr/local/bin/tool", Mode: 0o755, Source: src},
			{Path: "/etc/motd", Mode: 0o644, Content: []byte("hello\n")},
		},
		Dirs:       []Dir{{Path: "/tmp", Mode: 0o777 | os.ModeSticky}},
		Entrypoint: []string{"/usr/local/bin/tool"},
		Cmd:        []string{"--help"},
		Env:        []string{"PATH=/usr/local/bin"},
		Labels:     map[string]string{"org.opencontainers.image.version": "v1.2.3"},
		Created:    created,
	}
}

type tarEntry struct {
	Name    string
	Type    byte
	Mode    int64
	UID     int
	GID     int
	ModTime time.Time
	Content string
}

// TestRoundTrip writes an image and loads it back as `docker load`/`ctr import` would see it.
func TestRoundTrip(t *testing.T) {
	img, err := Build(testSpec(t))
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "sub", "img.tar")
	const tag = "dummy-fuse-csi:v1.2.3"
	if err := WriteTarball(out, tag, img); err != nil {
		t.Fatal(err)
	}

	// docker-save format: manifest.json names the tag exactly as given (no registry prefix), one layer.
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(out) })
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 1 || !reflect.DeepEqual(m[0].RepoTags, []string{tag}) || len(m[0].Layers) != 1 {
		t.Fatalf("manifest.json = %+v, want one image tagged %s with one layer", m, tag)
	}

	ref, err := name.NewTag(tag)
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := tarball.ImageFromPath(out, &ref)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := img.Digest()
	got, err := loaded.Digest()
	if err != nil || got != want {
		t.Fatalf("loaded digest = %v (err %v), built %v", got, err, want)
	}

	cfg, err := loaded.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OS != "linux" || cfg.Architecture != runtime.GOARCH {
		t.Errorf("platform = %s/%s, want linux/%s", cfg.OS, cfg.Architecture, runtime.GOARCH)
	}
	if !cfg.Created.Time.Equal(created) {
		t.Errorf("created = %v, want %v", cfg.Created.Time, created)
	}
	if !reflect.DeepEqual(cfg.Config.Entrypoint, []string{"/usr/local/bin/tool"}) ||
		!reflect.DeepEqual(cfg.Config.Cmd, []string{"--help"}) ||
		!reflect.DeepEqual(cfg.Config.Env, []string{"PATH=/usr/local/bin"}) ||
		cfg.Config.Labels["org.opencontainers.image.version"] != "v1.2.3" {
		t.Errorf("config = %+v", cfg.Config)
	}
	if len(cfg.RootFS.DiffIDs) != 1 || len(cfg.History) != 1 {
		t.Errorf("rootfs = %+v, history = %+v: want one layer", cfg.RootFS, cfg.History)
	}

	layers, err := loaded.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers = %d, err %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var entries []tarEntry
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, tarEntry{hdr.Name, hdr.Typeflag, hdr.Mode, hdr.Uid, hdr.Gid, hdr.ModTime.UTC(), string(b)})
	}
	wantEntries := []tarEntry{
		{"etc/", tar.TypeDir, 0o755, 0, 0, created, ""},
		{"etc/motd", tar.TypeReg, 0o644, 0, 0, created, "hello\n"},
		{"tmp/", tar.TypeDir, 0o1777, 0, 0, created, ""},
		{"usr/", tar.TypeDir, 0o755, 0, 0, created, ""},
		{"usr/local/", tar.TypeDir, 0o755, 0, 0, created, ""},
		{"usr/local/bin/", tar.TypeDir, 0o755, 0, 0, created, ""},
		{"usr/local/bin/tool", tar.TypeReg, 0o755, 0, 0, created, "#!binary\n"},
	}
	if !reflect.DeepEqual(entries, wantEntries) {
		t.Errorf("layer entries:\n got %+v\nwant %+v", entries, wantEntries)
	}
}

func TestReproducible(t *testing.T) {
	s := testSpec(t)
	a, err := Build(s)
	if err != nil {
		t.Fatal(err)
	}
	// Same content in another order and from another directory: same image.
	s.Files[0], s.Files[1] = s.Files[1], s.Files[0]
	b, err := Build(s)
	if err != nil {
		t.Fatal(err)
	}
	da, err := a.Digest()
	if err != nil {
		t.Fatal(err)
	}
	db, err := b.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if da != db {
		t.Errorf("digests differ: %v vs %v", da, db)
	}
}

func TestBuildErrors(t *testing.T) {
	cases := map[string]struct {
		spec Spec
		is   error
	}{
		"relative path":  {Spec{Files: []File{{Path: "usr/bin/x", Mode: 0o755}}}, errNotAbs},
		"missing source": {Spec{Files: []File{{Path: "/x", Mode: 0o755, Source: filepath.Join(t.TempDir(), "nope")}}}, fs.ErrNotExist},
		"duplicate":      {Spec{Files: []File{{Path: "/x", Mode: 0o755}, {Path: "/./x", Mode: 0o755}}}, nil},
		"file and dir":   {Spec{Files: []File{{Path: "/tmp", Mode: 0o644}}, Dirs: []Dir{{Path: "/tmp", Mode: 0o755}}}, nil},
		"parent is file": {Spec{Files: []File{{Path: "/a", Mode: 0o644}, {Path: "/a/b", Mode: 0o644}}}, nil},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Build(c.spec)
			if err == nil {
				t.Fatal("Build succeeded, want an error")
			}
			if c.is != nil && !errors.Is(err, c.is) {
				t.Errorf("err = %v, want errors.Is %v", err, c.is)
			}
		})
	}
}

func TestWriteTarballBadTag(t *testing.T) {
	img, err := Build(testSpec(t))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "img.tar")
	for _, tag := range []string{"Not A Tag!", "dummy-fuse-csi", "dummy-fuse-csi:latest"} {
		if err := WriteTarball(out, tag, img); err == nil {
			t.Errorf("WriteTarball accepted tag %q", tag)
		}
	}
	if err := WriteTarball(out, "dummy-fuse-csi", img); !errors.Is(err, errNeedTag) {
		t.Errorf("untagged name: err = %v, want %v", err, errNeedTag)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("files left behind after a failed write: %v", left)
	}
}
