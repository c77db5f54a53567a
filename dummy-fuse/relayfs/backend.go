package relayfs

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// backend is the real server's mount, reached through a descriptor of its root directory: every path
// operation is relative to it (openat2), which also works from another mount namespace than the one the
// backend is mounted in. When the server dies the descriptor turns dead (ENOTCONN); recover opens the root
// again at its path, where the server's restarter mounts it anew.
type backend struct {
	path string
	// open opens the root: at path, or the newest of Options.Roots.
	open func() (int, error)
	wait time.Duration
	logf func(format string, a ...any)

	// What the first root looked like: a new one must be the same kind of filesystem and, when the first was
	// a mount point, a mount point too (otherwise the bare directory under a dead, unmounted backend would
	// pass for an empty backend and every lookup would fail with ENOENT).
	fsType    int64
	mountRoot bool

	mu     sync.Mutex
	root   *rootFD
	down   time.Time // when the backend was first found dead, zero while it serves
	gaveUp bool      // the wait for it ran out (logged once per outage)
}

// rootFD is one open root directory. It is closed once the last operation that uses it has finished, so a
// descriptor number is never reused under an operation still running.
type rootFD struct {
	fd   int
	gen  uint64
	refs sync.WaitGroup
}

// openBackend opens the backend's root. want is the kind of backend a predecessor served (zero: none): a
// root of another kind is the bare directory under a dead backend's mount (a successor started while the
// real server is down), and the backend counts as dead until one of that kind serves.
func openBackend(path string, roots *Roots, wait time.Duration, want backendKind, logf func(string, ...any)) (*backend, error) {
	b := &backend{path: path, wait: wait, logf: logf}
	b.open = func() (int, error) { return unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0) }
	if roots != nil {
		b.path, b.open = "(root descriptor)", roots.open
	}
	fd, err := b.open()
	if errors.Is(err, errNoRoot) {
		// The relay-keeper mode's keeper starts the relay of a connection before the plugin has a backend for
		// it (the real server cannot start yet): the backend counts as dead from now, so that requests wait
		// for a root within b.wait and then fail, instead of queueing unanswered. The first root handed over
		// sets the filesystem type a later one must have.
		b.root, b.down, b.fsType = &rootFD{fd: -1}, time.Now(), want.fsType
		logf("backend %s: no root handed over yet; requests wait up to %s for one", b.path, wait)
		return b, nil
	}
	if err != nil {
		return nil, fmt.Errorf("backend %s: %w", b.path, err)
	}
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("backend %s: %w", path, err)
	}
	b.fsType = fs.Type
	if roots == nil {
		b.mountRoot, err = isMountRoot(fd, path)
	}
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("backend %s: %w", path, err)
	}
	if got := b.kind(); want.fsType != 0 && got != want {
		unix.Close(fd)
		b.fsType, b.mountRoot = want.fsType, want.mountRoot
		b.root, b.down = &rootFD{fd: -1}, time.Now()
		logf("backend %s: filesystem type %#x (mount root %t), not the %#x (mount root %t) the node table says: the real server is not back yet; requests wait up to %s for it",
			b.path, got.fsType, got.mountRoot, want.fsType, want.mountRoot, wait)
		return b, nil
	}
	b.root = &rootFD{fd: fd}
	return b, nil
}

// kind is what the first root was (zero before one).
func (b *backend) kind() backendKind { return backendKind{fsType: b.fsType, mountRoot: b.mountRoot} }

// isMountRoot reports whether the directory fd (at path) is the root of a mount: another device than its
// parent's.
func isMountRoot(fd int, path string) (bool, error) {
	var st, parent unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return false, err
	}
	if err := unix.Stat(filepath.Dir(filepath.Clean(path)), &parent); err != nil {
		return false, err
	}
	return st.Dev != parent.Dev, nil
}

// acquire returns the current root; the caller calls release when its operation is done.
func (b *backend) acquire() *rootFD {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.root
	r.refs.Add(1)
	return r
}

func (r *rootFD) release() { r.refs.Done() }

// dead reports whether err says the backend's FUSE connection is gone: ENOTCONN for a connection that
// ended, ECONNABORTED for a request that was in flight when it ended (fs/fuse/dev.c).
func dead(err error) bool {
	return errors.Is(err, unix.ENOTCONN) || errors.Is(err, unix.ECONNABORTED)
}

// recover is called by an operation on root generation gen that failed with cause (dead). It returns nil
// once a root newer than gen serves (the operation is then retried), or cause when the backend did not come
// back within b.wait of when it was first found dead: then every operation fails at once, after one more
// try to open the root, until the backend serves again.
func (b *backend) recover(gen uint64, cause error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.root.gen != gen {
		return nil // another operation brought a new root meanwhile
	}
	if b.down.IsZero() {
		b.down, b.gaveUp = time.Now(), false
		b.logf("backend %s is gone (%v); waiting up to %s for it to serve again", b.path, cause, b.wait)
	}
	deadline := b.down.Add(b.wait)
	mounts := watchMounts()
	defer mounts.close()
	var last error
	for try := 1; ; try++ {
		fd, err := b.reopen()
		if err == nil {
			old := b.root
			if old.fd < 0 {
				b.logf("backend %s: the first root was handed over", b.path)
			}
			b.root = &rootFD{fd: fd, gen: old.gen + 1}
			b.logf("backend %s serves again after %s (try %d of this wait; the one before: %v)", b.path, time.Since(b.down).Round(time.Millisecond), try, last)
			b.down = time.Time{}
			go func() { old.refs.Wait(); unix.Close(old.fd) }()
			return nil
		}
		last = err
		if !time.Now().Before(deadline) {
			if !b.gaveUp {
				b.gaveUp = true
				b.logf("backend %s did not serve again within %s (last try: %v); answering %v until it does", b.path, b.wait, err, cause)
			}
			return cause
		}
		// Unlocked while waiting would let other operations pile up tries; they wait here instead, bounded
		// by the same deadline.
		mounts.wait(min(retryEvery, time.Until(deadline)))
	}
}

// retryEvery is how often recover tries to open the backend's root again when no mount wakes it first: a
// server start takes milliseconds (squashfuse) to hundreds of them (gcsfuse), a try costs an open, a stat
// and a STATFS.
const retryEvery = 5 * time.Millisecond

// mountWatch wakes a waiting recover when the mount table of the relay's mount namespace changes, so that a
// new backend mounted there is tried at once: the kernel wakes a poll(2) of /proc/self/mountinfo with
// POLLPRI on every mount and unmount in the namespace (mounts_poll in fs/proc_namespace.c). A backend
// mounted in another namespace wakes nothing; retryEvery bounds the wait then.
type mountWatch struct{ fd int }

// watchMounts starts watching before the first try, so that a mount between a try and the wait counts.
func watchMounts() mountWatch {
	fd, err := unix.Open("/proc/self/mountinfo", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return mountWatch{fd: -1}
	}
	return mountWatch{fd: fd}
}

// wait returns when the mount table changed since the last wait (or the watch began), or after d.
func (m mountWatch) wait(d time.Duration) {
	if d <= 0 {
		return
	}
	if m.fd < 0 {
		time.Sleep(d)
		return
	}
	fds := []unix.PollFd{{Fd: int32(m.fd), Events: unix.POLLPRI}}
	for end := time.Now().Add(d); ; {
		left := time.Until(end)
		if left <= 0 {
			return
		}
		if _, err := unix.Poll(fds, int(left.Milliseconds())+1); err != unix.EINTR {
			return
		}
	}
}

func (m mountWatch) close() {
	if m.fd >= 0 {
		unix.Close(m.fd)
	}
}

// reopen opens the root (b.open) and checks that a server answers there: the same kind of filesystem as at
// the start, a mount point if it was one, and a STATFS answered.
func (b *backend) reopen() (int, error) {
	fd, err := b.open()
	if err != nil {
		return -1, err
	}
	var fs unix.Statfs_t
	err = unix.Fstatfs(fd, &fs)
	switch {
	case err != nil:
	case b.fsType == 0:
		b.fsType = fs.Type // the first root (openBackend had none): b.mu is held
	case fs.Type != b.fsType:
		err = fmt.Errorf("filesystem type %#x, not %#x as at the start: not mounted yet", fs.Type, b.fsType)
	case b.mountRoot:
		var mounted bool
		if mounted, err = isMountRoot(fd, b.path); err == nil && !mounted {
			err = errors.New("not a mount point: not mounted yet")
		}
	}
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

func (b *backend) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.root
	go func() { r.refs.Wait(); unix.Close(r.fd) }()
}
