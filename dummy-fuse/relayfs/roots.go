package relayfs

import (
	"errors"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

// Roots hands a relay its backend's root as directory descriptors instead of a path: in the relay-keeper mode
// the backend is mounted in the plugin's mount namespace, which the relay (in the keeper's) cannot reach by
// path, and a descriptor works from any namespace (openat2 beneath it). The plugin sends a new one after each
// restart of the real server; a dead backend is waited out until a newer root serves.
type Roots struct {
	mu sync.Mutex
	fd int // the newest root, -1 while none
}

// errNoRoot is Roots' answer before the first root is handed over.
var errNoRoot = errors.New("no backend root handed over yet")

// NewRoots returns Roots without a root yet.
func NewRoots() *Roots { return &Roots{fd: -1} }

// Set makes fd (which Roots now owns) the newest root and closes the one it replaces.
func (r *Roots) Set(fd int) {
	r.mu.Lock()
	old := r.fd
	r.fd = fd
	r.mu.Unlock()
	if old >= 0 {
		unix.Close(old)
	}
}

// open returns a copy of the newest root, for the backend to own.
func (r *Roots) open() (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fd < 0 {
		return -1, errNoRoot
	}
	fd, err := unix.FcntlInt(uintptr(r.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("dup of the backend root: %w", err)
	}
	return fd, nil
}

// Close closes the newest root.
func (r *Roots) Close() { r.Set(-1) }
