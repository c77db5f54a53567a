package main

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
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
