// Package image builds FROM-scratch container images of static binaries without a container engine or a
// registry, and writes them as docker-save tarballs, the format that `docker load`, `kind load image-archive`
// and `ctr images import` all accept.
//
// Images are reproducible: one layer whose tar entries are sorted, owned by root and stamped with
// Spec.Created, so the same inputs give the same image digest.
package image

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// File is one regular file of the image.
type File struct {
	// Path is the absolute path inside the image, e.g. /usr/local/bin/csi-plugin.
	Path string
	// Mode holds the permission bits (0o755 for a binary).
	Mode os.FileMode
	// Source is the host file to copy. When empty, Content is used.
	Source  string
	Content []byte
}

// Dir is a directory of the image that no File implies or that needs a mode other than 0755 (e.g. /tmp).
type Dir struct {
	Path string
	Mode os.FileMode // may include os.ModeSticky
}

// Spec describes an image.
type Spec struct {
	Files      []File
	Dirs       []Dir
	Entrypoint []string
	Cmd        []string
	Env        []string
	WorkingDir string
	Labels     map[string]string
	// Created stamps the config, the history and every tar entry; the zero value means the Unix epoch.
	Created time.Time
	// Architecture defaults to the one this program was built for; the OS is always linux.
	Architecture string
}

// Build assembles the image described by s: an empty base, one layer holding the files, and the config.
func Build(s Spec) (v1.Image, error) {
	created := s.Created
	if created.IsZero() {
		created = time.Unix(0, 0)
	}
	created = created.UTC()
	arch := s.Architecture
	if arch == "" {
		arch = runtime.GOARCH
	}

	layerTar, err := layerTar(s.Files, s.Dirs, created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return nil, fmt.Errorf("create layer: %w", err)
	}

	base, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{
		Architecture: arch,
		OS:           "linux",
		Created:      v1.Time{Time: created},
		Config: v1.Config{
			Entrypoint: s.Entrypoint,
			Cmd:        s.Cmd,
			Env:        s.Env,
			WorkingDir: s.WorkingDir,
			Labels:     s.Labels,
		},
		RootFS: v1.RootFS{Type: "layers"},
	})
	if err != nil {
		return nil, fmt.Errorf("set image config: %w", err)
	}
	img, err := mutate.Append(base, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   v1.Time{Time: created},
			CreatedBy: "dummy-fuse-csi hack/mkimage",
			Comment:   fmt.Sprintf("%d files", len(s.Files)),
		},
	})
	if err != nil {
		return nil, fmt.Errorf("append layer: %w", err)
	}
	return img, nil
}

// WriteTarball writes img tagged tag (e.g. "dummy-fuse-csi:v0.1.0") to path in the docker-save format.
// The file appears atomically: a reader never sees a half-written tarball.
func WriteTarball(path, tag string, img v1.Image) error {
	ref, err := name.NewTag(tag)
	if err != nil {
		return fmt.Errorf("image tag %q: %w", tag, err)
	}
	// An implicit or explicit :latest invites imagePullPolicy Always, which breaks images loaded offline.
	if !strings.HasSuffix(tag, ":"+ref.TagStr()) || ref.TagStr() == name.DefaultTag {
		return fmt.Errorf("image tag %q: %w", tag, errNeedTag)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create output dir: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("create temp tarball: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if err := tarball.Write(ref, img, tmp); err != nil {
		tmp.Close()
		return fmt.Errorf("write image %s: %w", tag, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("sync %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp.Name(), err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("chmod %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("rename tarball into place: %w", err)
	}
	return nil
}

// layerTar returns the uncompressed layer: every parent directory, the extra directories and the files,
// sorted by path so the result does not depend on the order of the Spec.
func layerTar(files []File, dirs []Dir, mtime time.Time) ([]byte, error) {
	dirModes := map[string]os.FileMode{}
	addParents := func(p string) {
		for d := path.Dir(p); d != "/" && d != "."; d = path.Dir(d) {
			if _, ok := dirModes[d]; !ok {
				dirModes[d] = 0o755
			}
		}
	}
	for _, d := range dirs {
		p, err := cleanAbs(d.Path)
		if err != nil {
			return nil, err
		}
		dirModes[p] = d.Mode
		addParents(p)
	}
	byPath := map[string]File{}
	for _, f := range files {
		p, err := cleanAbs(f.Path)
		if err != nil {
			return nil, err
		}
		if _, dup := byPath[p]; dup {
			return nil, fmt.Errorf("file %s listed twice", p)
		}
		if _, isDir := dirModes[p]; isDir {
			return nil, fmt.Errorf("%s is both a file and a directory", p)
		}
		f.Path = p
		byPath[p] = f
		addParents(p)
	}
	for p := range byPath {
		if _, isDir := dirModes[p]; isDir {
			return nil, fmt.Errorf("%s is both a file and a directory", p)
		}
	}

	type entry struct {
		path string
		dir  bool
	}
	var entries []entry
	for p := range dirModes {
		entries = append(entries, entry{p, true})
	}
	for p := range byPath {
		entries = append(entries, entry{p, false})
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].path < entries[j].path })

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{
			Name:    strings.TrimPrefix(e.path, "/"),
			ModTime: mtime,
			Format:  tar.FormatPAX,
		}
		if e.dir {
			hdr.Typeflag = tar.TypeDir
			hdr.Name += "/"
			hdr.Mode = tarMode(dirModes[e.path])
			if err := tw.WriteHeader(hdr); err != nil {
				return nil, fmt.Errorf("tar header %s: %w", e.path, err)
			}
			continue
		}
		f := byPath[e.path]
		content := f.Content
		if f.Source != "" {
			b, err := os.ReadFile(f.Source)
			if err != nil {
				return nil, fmt.Errorf("read %s for %s: %w", f.Source, e.path, err)
			}
			content = b
		}
		hdr.Typeflag = tar.TypeReg
		hdr.Mode = tarMode(f.Mode)
		hdr.Size = int64(len(content))
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("tar header %s: %w", e.path, err)
		}
		if _, err := tw.Write(content); err != nil {
			return nil, fmt.Errorf("tar %s: %w", e.path, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("close layer tar: %w", err)
	}
	return buf.Bytes(), nil
}

var (
	errNotAbs  = errors.New("path inside the image must be absolute")
	errNeedTag = errors.New("name a version tag other than latest")
)

func cleanAbs(p string) (string, error) {
	if !path.IsAbs(p) {
		return "", fmt.Errorf("%q: %w", p, errNotAbs)
	}
	c := path.Clean(p)
	if c == "/" {
		return "", fmt.Errorf("%q: the root directory cannot be an entry", p)
	}
	return c, nil
}

// tarMode converts permission bits (and the sticky bit) to the tar header's mode.
func tarMode(m os.FileMode) int64 {
	mode := int64(m.Perm())
	if m&os.ModeSticky != 0 {
		mode |= 0o1000
	}
	return mode
}
