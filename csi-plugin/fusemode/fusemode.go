// Package fusemode decides where the FUSE server of a staged volume lives. NodeStageVolume asks a Mode to
// Start a server on the staging path and NodeUnstageVolume asks the returned Server to Stop; nothing else in the
// plugin knows whether the server is a child process, a process that outlives the plugin, a sidecar that got a
// /dev/fuse descriptor, or a descriptor kept across a server restart. A mode that mounts publish targets itself
// (the sidecar mode) is a TargetMounter.
package fusemode

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// ServedFile is the file every dummy-fuse mount serves (dummyfs.FileName). A mount "answers" when a stat of it
// succeeds through a statfs that reached the server.
const ServedFile = "dummy-file.txt"

// dummyFuse is the filesystem's name (dummyfs.Name): the mount table shows fuse.dummy-fuse. The plugin does
// not link the filesystem itself.
const dummyFuse = "dummy-fuse"

// Request describes one FUSE server to start.
type Request struct {
	VolumeID string
	// Mountpoint is the staging path: an existing directory with nothing (alive) mounted on it.
	Mountpoint string
}

// Mode places FUSE servers.
type Mode interface {
	// Name is the --fuse-mode value; it is written into mount records.
	Name() string
	// Start mounts the filesystem at req.Mountpoint and serves it. It returns only once the mount answers, or
	// an error after undoing what it did; ctx bounds the wait.
	Start(ctx context.Context, req Request) (Server, error)
	// Close releases what the mode holds for itself. Servers already started keep their own lifetime rules.
	Close() error
}

// Server is one running FUSE server.
type Server interface {
	// PID is the process serving the mount, 0 if none of its own (for logs and records).
	PID() int
	// Stop ends serving; ctx bounds a graceful stop before it is forced. Afterwards the mount is gone or dead:
	// the caller unmounts what is left.
	Stop(ctx context.Context) error
	// Done is closed once the server has ended, for whatever reason.
	Done() <-chan struct{}
}

// Options configure every mode.
type Options struct {
	// DummyFusePath is the dummy-fuse executable.
	DummyFusePath string
	// DirectIO passes --direct-io to dummy-fuse: reads bypass the page cache and fail at once when the server is
	// gone.
	DirectIO bool
	// StartTimeout bounds how long Start waits for a new mount to answer (default 10s).
	StartTimeout time.Duration
	// SendTimeout bounds the sending of a descriptor to a sidecar that connected (sidecar mode, default 10s).
	SendTimeout time.Duration
	// SidecarKeepFD (sidecar mode) keeps the plugin's copy of each target's connection and serves it on the
	// pod's socket to every sidecar that connects, so that a restarted sidecar takes the live connection over
	// instead of finding nothing (GCS hands its only copy over and closes its own).
	SidecarKeepFD bool
	// KeeperSocket is where the keeper mode waits for keepers; KeeperUID is the only user ID a keeper may
	// connect as and KeeperGID, when not -1, the only group ID (SO_PEERCRED). A keeper must also know the
	// per-node secret the plugin writes beside the socket (KeeperSecretName), readable by that user only.
	KeeperSocket string
	KeeperUID    int
	KeeperGID    int
}

// constructors lists the modes; adding one is adding a line here.
var constructors = map[string]func(Options) (Mode, error){
	ChildName:   func(o Options) (Mode, error) { return NewChild(o) },
	SidecarName: func(o Options) (Mode, error) { return NewSidecar(o) },
	KeeperName:  func(o Options) (Mode, error) { return NewKeeper(o) },
}

// Names lists the known modes, sorted.
func Names() []string {
	var names []string
	for n := range constructors {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// CheckName returns an error unless name is a known mode.
func CheckName(name string) error {
	if _, ok := constructors[name]; !ok {
		return fmt.Errorf("unknown FUSE mode %q (known: %s)", name, strings.Join(Names(), ", "))
	}
	return nil
}

// New returns the mode called name.
func New(name string, opts Options) (Mode, error) {
	if err := CheckName(name); err != nil {
		return nil, err
	}
	return constructors[name](opts)
}

// FindDummyFuse returns the dummy-fuse executable to use when none is configured: the one beside the running
// executable (how the plugin image ships them), else the first in $PATH, else "".
func FindDummyFuse() string {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), dummyFuse)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return p
		}
	}
	if p, err := exec.LookPath(dummyFuse); err == nil {
		return p
	}
	return ""
}
