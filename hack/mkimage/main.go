// Command mkimage writes a FROM-scratch container image of static binaries as a docker-save tarball,
// without a container engine (see internal/image). Used by `make image` through hack/mkimage/image.sh.
//
//	mkimage --tag dummy-fuse-csi:v1 --output img.tar \
//	  --file bin/csi-plugin:/usr/local/bin/csi-plugin --dir /tmp:1777 --cmd /usr/local/bin/csi-plugin
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver/backing"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/image"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

// list is a repeatable string flag.
type list []string

func (l *list) String() string     { return strings.Join(*l, " ") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func run(args []string, stdout io.Writer) error {
	fl := flag.NewFlagSet("mkimage", flag.ContinueOnError)
	var (
		tag                                       = fl.String("tag", "", "image tag, e.g. dummy-fuse-csi:v0.1.0 (required; not latest)")
		output                                    = fl.String("output", "", "tarball to write (required)")
		created                                   = fl.String("created", "", "creation time: RFC 3339 or Unix seconds (default: the Unix epoch)")
		arch                                      = fl.String("arch", "", "image architecture (default: this program's)")
		workdir                                   = fl.String("workdir", "", "working directory of the image config")
		servedTree                                = fl.String("served-tree", "", "absolute image dir to hold the tree every FUSE server serves (internal/fuseserver), e.g. a fake GCS server's bucket")
		squashfsTree                              = fl.String("squashfs-tree", "", "absolute image path of a squashfs image of that tree (made with mksquashfs), what squashfuse serves")
		files, dirs, entrypoint, cmd, env, labels list
	)
	fl.Var(&files, "file", "SRC:DST, copy host file SRC to absolute image path DST keeping its permission bits (repeatable)")
	fl.Var(&dirs, "dir", "DST:MODE, an extra directory with an octal mode such as /tmp:1777 (repeatable)")
	fl.Var(&entrypoint, "entrypoint", "one ENTRYPOINT word (repeatable)")
	fl.Var(&cmd, "cmd", "one CMD word (repeatable)")
	fl.Var(&env, "env", "KEY=VALUE environment entry (repeatable)")
	fl.Var(&labels, "label", "KEY=VALUE image label (repeatable)")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if *tag == "" || *output == "" || fl.NArg() != 0 {
		return fmt.Errorf("usage: mkimage --tag NAME:TAG --output FILE [--file SRC:DST]... (see --help)")
	}

	spec := image.Spec{Entrypoint: entrypoint, Cmd: cmd, Env: env, WorkingDir: *workdir, Architecture: *arch}
	for _, f := range files {
		src, dst, ok := strings.Cut(f, ":")
		if !ok || src == "" || dst == "" {
			return fmt.Errorf("--file %q: want SRC:DST", f)
		}
		st, err := os.Stat(src)
		if err != nil {
			return fmt.Errorf("--file %q: %w", f, err)
		}
		if !st.Mode().IsRegular() {
			return fmt.Errorf("--file %q: %s is not a regular file", f, src)
		}
		spec.Files = append(spec.Files, image.File{Path: dst, Mode: st.Mode().Perm(), Source: src})
	}
	if *servedTree != "" {
		if !path.IsAbs(*servedTree) {
			return fmt.Errorf("--served-tree %q: want an absolute path", *servedTree)
		}
		spec.Files = append(spec.Files, image.File{Path: path.Join(*servedTree, fuseserver.ServedFile), Mode: 0o644, Content: []byte(fuseserver.Content)})
	}
	if *squashfsTree != "" {
		if !path.IsAbs(*squashfsTree) {
			return fmt.Errorf("--squashfs-tree %q: want an absolute path", *squashfsTree)
		}
		tmp, err := os.MkdirTemp("", "mkimage")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		src := filepath.Join(tmp, "tree.squashfs")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := backing.SquashfsImage(ctx, src); err != nil {
			return fmt.Errorf("--squashfs-tree: %w", err)
		}
		spec.Files = append(spec.Files, image.File{Path: *squashfsTree, Mode: 0o644, Source: src})
	}
	for _, d := range dirs {
		p, m, ok := strings.Cut(d, ":")
		mode, err := strconv.ParseUint(m, 8, 32)
		if !ok || err != nil || mode > 0o1777 {
			return fmt.Errorf("--dir %q: want DST:OCTALMODE", d)
		}
		fm := os.FileMode(mode & 0o777)
		if mode&0o1000 != 0 {
			fm |= os.ModeSticky
		}
		spec.Dirs = append(spec.Dirs, image.Dir{Path: p, Mode: fm})
	}
	if len(labels) > 0 {
		spec.Labels = map[string]string{}
		for _, l := range labels {
			k, v, ok := strings.Cut(l, "=")
			if !ok || k == "" {
				return fmt.Errorf("--label %q: want KEY=VALUE", l)
			}
			spec.Labels[k] = v
		}
	}
	if *created != "" {
		t, err := parseTime(*created)
		if err != nil {
			return fmt.Errorf("--created: %w", err)
		}
		spec.Created = t
	}

	img, err := image.Build(spec)
	if err != nil {
		return err
	}
	if err := image.WriteTarball(*output, *tag, img); err != nil {
		return err
	}
	// The image ID (config digest) is what `docker images`, `ctr images ls` and kubelet report; the manifest
	// digest is not: loaders rebuild the manifest from a docker-save tarball.
	id, err := img.ConfigName()
	if err != nil {
		return fmt.Errorf("image ID: %w", err)
	}
	fmt.Fprintf(stdout, "wrote %s: %s, image ID %s\n", *output, *tag, id)
	return nil
}

func parseTime(s string) (time.Time, error) {
	if secs, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.Unix(secs, 0), nil
	}
	return time.Parse(time.RFC3339, s)
}
