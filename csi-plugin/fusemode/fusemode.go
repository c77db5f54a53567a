// Package fusemode decides where the FUSE connection of a volume is mounted and who serves it. Each mode is one
// Mode, registered by name from its own file; the driver only calls the Mode's methods. Its Placement, fixed when
// the mode is built, says whether the mode serves the staging path (Start; every target is a bind mount of it) or
// mounts every target itself (Publish; staging only records the volume). Nothing else in the plugin knows whether
// a server is a child process, a process that outlives the plugin, or a sidecar that got a /dev/fuse descriptor.
package fusemode

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
)

// ServedFile is the file every server serves (fuseserver.ServedFile). A mount "answers" when a stat of it
// succeeds through a statfs that reached the server.
const ServedFile = fuseserver.ServedFile

// Request describes one FUSE server to start.
type Request struct {
	VolumeID string
	// Mountpoint is the staging path: an existing directory with nothing (alive) mounted on it.
	Mountpoint string
}

// Target describes one publish target to mount (placement OnTargets).
type Target struct {
	VolumeID string
	// Path is the target: an existing empty directory with nothing mounted on it.
	Path     string
	ReadOnly bool
	// VolumeContext is NodePublishVolume's volume_context (kubelet's pod information among it).
	VolumeContext map[string]string
}

// Placement says where a mode mounts a volume's FUSE connection, and so how the driver publishes it.
type Placement int

const (
	// OnStagingPath: Start mounts and serves the staging path; each target is a bind mount of it, which the
	// driver makes and repairs itself.
	OnStagingPath Placement = iota
	// OnTargets: staging only records the volume (Start is never called); Publish mounts each target with a
	// connection of its own, which the plugin cannot repair once it is served.
	OnTargets
)

// Mode places FUSE servers. Every mode has every method: one that does not apply to its placement is never
// called by the driver, and one with nothing to do (Recollect of a mode that keeps nothing) does nothing.
type Mode interface {
	// Name is the --fuse-mode value; it is written into mount records.
	Name() string
	// Placement is fixed when the mode is built.
	Placement() Placement
	// Recollect is called once, before any other call but Name and Placement, with the plugin's records of
	// this mode: a mode that keeps connections alive across a restart of the plugin takes them back (adopting
	// only a connection proven to be the one mounted where the records say) and returns a Server per recorded
	// volume it took charge of. Only a failure to start at all (its socket) is an error.
	Recollect(recs Records) (map[string]Server, error)
	// Start (OnStagingPath) mounts the filesystem at req.Mountpoint and serves it. It returns only once the mount
	// answers, or an error after undoing what it did; ctx bounds the wait.
	Start(ctx context.Context, req Request) (Server, error)
	// Publish (OnTargets) mounts t.Path and has it served; it returns once the target is mounted, or an error
	// after undoing what it did. Until its server answers the kernel's INIT, an access to the mount may block:
	// nobody may touch it unbounded.
	Publish(ctx context.Context, t Target) error
	// Release ends what the mode keeps for target (OnTargets: a descriptor still waiting for its server, which
	// then dies; a socket). It does not unmount anything.
	Release(target string)
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
	// InitRecord is the connection's handover record (the kernel's INIT and the server's reply) that a mode
	// keeping connections alive across server restarts needs back after a restart of the plugin; nil otherwise.
	InitRecord() []byte
}

// Records are what the plugin's records say it mounted in one mode, for Recollect.
type Records struct {
	Stages  []Recorded
	Targets []Target
}

// Recorded is a volume the plugin's records say it staged.
type Recorded struct {
	VolumeID    string
	StagingPath string
	// Init is the connection's handover record as recorded, nil in records without one.
	Init []byte
}

// ErrRetry and ErrInvalid classify a mode's errors for the CO: ErrRetry for what may pass later (a peer that is
// not there yet: Unavailable, the CO retries), ErrInvalid for a request the mode can never serve
// (InvalidArgument). Anything else is an internal error.
var (
	ErrRetry   = errors.New("retry later")
	ErrInvalid = errors.New("invalid request")
)

// classified is an error of a class (ErrRetry, ErrInvalid) whose message is its own.
type classified struct{ err, class error }

func (c *classified) Error() string   { return c.err.Error() }
func (c *classified) Unwrap() []error { return []error{c.err, c.class} }

// Retryable marks err as ErrRetry; Invalid marks it as ErrInvalid.
func Retryable(err error) error { return &classified{err: err, class: ErrRetry} }
func Invalid(err error) error   { return &classified{err: err, class: ErrInvalid} }

// onStagingPath gives a mode of placement OnStagingPath the methods of the other placement.
type onStagingPath struct{}

func (onStagingPath) Placement() Placement { return OnStagingPath }

func (onStagingPath) Publish(context.Context, Target) error {
	return errors.New("this FUSE mode serves staging paths: targets are bind mounts of them")
}

func (onStagingPath) Release(string) {}

// Options configure every mode.
type Options struct {
	// Server is the FUSE server program and its settings (fuseserver): the child mode runs it, the sidecar mode
	// names its mounts after it and the keeper mode refuses one that cannot take over a connection.
	Server fuseserver.Spec
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
	// UnservedLimit (keeper mode, sidecar mode with SidecarKeepFD) is how long requests may wait on a connection
	// the plugin keeps while no server answers it before the plugin aborts the connection (unserved.go); 0 turns
	// it off.
	UnservedLimit time.Duration
	// RelayDir (relay mode) is the plugin's own directory for each volume's backend mount, node table and
	// handover record; RelayPath is the relay's executable (dummy-fuse; empty: beside this executable, else in
	// $PATH); RelayBackendWait bounds how long the relay lets requests wait for a dead backend (its
	// --backend-wait).
	RelayDir         string
	RelayPath        string
	RelayBackendWait time.Duration
	// RelayServerUID is the user (and group) ID the relay mode runs the real server as, without supplementary
	// groups; -1 runs it as the plugin. It serves a descriptor the plugin mounted, so it needs no privilege.
	RelayServerUID int
	// Writable (relay and relay-keeper modes) mounts each volume read-write (with default_permissions) and
	// has its relay forward writes, keeping them through a real server's death (dummy-fuse --relay-writable);
	// the relay-keeper mode's keeper must be run with --relay-writable too. Other modes refuse it.
	Writable bool
}

// constructors are the modes by name: each mode's file registers itself (Register) from an init function, so that
// adding a mode adds a file.
var constructors = map[string]func(Options) (Mode, error){}

// Register makes a mode known to New and CheckName; it panics when name is taken (a programming error).
func Register(name string, newMode func(Options) (Mode, error)) {
	if _, dup := constructors[name]; dup || name == "" {
		panic(fmt.Sprintf("fusemode: mode %q registered twice or without a name", name))
	}
	constructors[name] = newMode
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
