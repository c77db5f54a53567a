package fuseserver

import (
	"errors"
	"fmt"
	"os"
)

// Squashfuse serves a squashfs image (Debian's squashfuse, on libfuse3): a libfuse server as users run many
// (s3fs, sshfs, rclone and the like share its library and so its behaviour on a lost connection).
const Squashfuse = "squashfuse"

func init() {
	register(Kind{
		Name:     Squashfuse,
		WhyNot:   "a libfuse server that did not see the connection's INIT answers every request with EIO",
		Settings: "image=<squashfs image holding dummy-file.txt> (required)",
		new:      newSquashfuse,
	})
}

func newSquashfuse(s Spec) (Server, error) {
	if err := options(s.Opts, []string{"image"}, "image"); err != nil {
		return nil, err
	}
	if s.DirectIO {
		return nil, errors.New("the testbed has no direct-I/O setting for it")
	}
	if st, err := os.Stat(s.Opts["image"]); err != nil || !st.Mode().IsRegular() {
		return nil, fmt.Errorf("image %s is not a regular file (%v)", s.Opts["image"], err)
	}
	libfuse2, err := linksLibfuse2(s.Path)
	if err != nil {
		return nil, err
	}
	return &squashfuse{spec: s, libfuse2: libfuse2}, nil
}

type squashfuse struct {
	spec     Spec
	libfuse2 bool
}

func (q *squashfuse) Name() string { return Squashfuse }
func (q *squashfuse) Path() string { return q.spec.Path }

// args: -f keeps it in the foreground; allow_other lets a workload of another user in.
func (q *squashfuse) args(dir string) []string {
	return []string{"-f", "-o", "allow_other", q.spec.Opts["image"], dir}
}

func (q *squashfuse) MountArgs(dir string) []string { return q.args(dir) }

func (q *squashfuse) FDArgs() ([]string, error) {
	if q.libfuse2 {
		return nil, errLibfuse2
	}
	return q.args(FDPath), nil
}

func (q *squashfuse) Env() []string { return nil }
