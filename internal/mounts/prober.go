package mounts

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// Prober runs the system calls that may reach a FUSE server (statfs, stat, lstat, readdir, symlink resolution)
// so that no caller ever waits longer than its timeout, whatever the server does.
//
// A server that is alive but stuck (SIGSTOP, a deadlock, a dead server whose /dev/fuse fd another process still
// holds) makes such a call block in the kernel until it answers; the goroutine that made it keeps its OS thread
// for as long. So the calls run in goroutines of their own, and a Prober bounds how many can pile up:
//   - one call per operation and path at a time: a caller asking what an outstanding call already asks waits for
//     that call's result instead of starting another (so a kubelet polling NodeGetVolumeStats every minute on a
//     stuck mount costs one thread, not one per poll);
//   - once a call to a filesystem has outlived the timeout, at most perMount calls to that filesystem may be
//     outstanding; further ones fail at once with ErrTimeout. A filesystem is counted once however many mount
//     points show it (a volume's staging mount and the bind mounts of its targets share one FUSE connection,
//     and one stuck server blocks them all). A filesystem that answers is never refused.
//
// The zero value is not usable; create one with NewProber. A Prober is safe for concurrent use.
type Prober struct {
	timeout  time.Duration
	perMount int

	points mountPoints // which mount a path lies on

	mu    sync.Mutex
	calls map[callKey]*call
	mnts  map[string]*mountCalls // by filesystem (mountPoints.of)
}

type callKey struct{ op, path string }

type call struct {
	done  chan struct{}
	val   any
	err   error
	mount string // the filesystem's key (mountPoints.of)
	stuck bool   // a waiter timed out on it; guarded by Prober.mu
}

type mountCalls struct{ outstanding, stuck int }

// NewProber returns a Prober whose calls give up after timeout, allowing perMount outstanding calls per mount
// once that mount stopped answering.
func NewProber(timeout time.Duration, perMount int) *Prober {
	if perMount < 1 {
		perMount = 1
	}
	return &Prober{timeout: timeout, perMount: perMount, calls: map[callKey]*call{}, mnts: map[string]*mountCalls{}}
}

// Close closes the descriptor of the mount table that the Prober keeps open once it was used (it opens it again
// if used after). A one-off Prober must be closed: the garbage collector would close it only whenever it runs,
// and a process that makes few allocations keeps one descriptor per one-off check until then.
func (p *Prober) Close() error { return p.points.close() }

// Timeout returns how long a call waits.
func (p *Prober) Timeout() time.Duration { return p.timeout }

// Outstanding returns how many calls have been started and not returned (tests and logs).
func (p *Prober) Outstanding() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.calls)
}

// do runs fn as op on path, or joins the outstanding call of op on path, and waits at most p.timeout for it.
func (p *Prober) do(op, path string, fn func() (any, error)) (any, error) {
	key := callKey{op, path}
	p.mu.Lock()
	c := p.calls[key]
	if c == nil {
		p.mu.Unlock()
		mnt, fsys := p.points.of(path) // the mount table only: never blocks on a server
		p.mu.Lock()
		if c = p.calls[key]; c == nil {
			m := p.mnts[fsys]
			if m == nil {
				m = &mountCalls{}
				p.mnts[fsys] = m
			}
			if m.stuck > 0 && m.outstanding >= p.perMount {
				p.mu.Unlock()
				return nil, &os.PathError{Op: op, Path: path, Err: fmt.Errorf("%w: %d earlier calls to the filesystem mounted at %s have not returned", ErrTimeout, m.outstanding, mnt)}
			}
			m.outstanding++
			c = &call{done: make(chan struct{}), mount: fsys}
			p.calls[key] = c
			go p.run(key, c, fn)
		}
	}
	p.mu.Unlock()

	t := time.NewTimer(p.timeout)
	defer t.Stop()
	select {
	case <-c.done:
		return c.val, c.err
	case <-t.C:
		p.mu.Lock()
		if !c.stuck {
			c.stuck = true
			p.mnts[c.mount].stuck++
		}
		p.mu.Unlock()
		return nil, &os.PathError{Op: op, Path: path, Err: fmt.Errorf("%w after %v", ErrTimeout, p.timeout)}
	}
}

func (p *Prober) run(key callKey, c *call, fn func() (any, error)) {
	c.val, c.err = fn()
	p.mu.Lock()
	delete(p.calls, key)
	m := p.mnts[c.mount]
	m.outstanding--
	if c.stuck {
		m.stuck--
	}
	if m.outstanding == 0 {
		delete(p.mnts, c.mount)
	}
	p.mu.Unlock()
	close(c.done)
}

// mountPoints answers which mount a path lies on from a copy of the mount points of /proc/self/mountinfo,
// read again only when the kernel says the table changed: it marks every mount and unmount with POLLPRI on an
// open mountinfo file (proc(5), /proc/pid/mountinfo; mounts_poll in fs/proc_namespace.c). Reading the whole
// table for every call made a restore of 500 volumes (about 2,000 calls on a table of over 1,000 mounts)
// quadratic: seconds of parsing.
type mountPoints struct {
	mu     sync.Mutex
	f      *os.File
	points map[string]string // mount point → its filesystem's device ("major:minor")
	valid  bool
}

// of returns the mount point that path lies on (the longest mount point that is path or one of its parents) and
// a key of the filesystem mounted there, its device number, the same for every bind mount of it; "/" and "/"
// when the table cannot be read.
func (m *mountPoints) of(path string) (mountPoint, fsys string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.f == nil {
		// Not os.Open: it registers the file with Go's netpoller, whose own polls would take the change events
		// (the kernel reports each change to one poll of the open file). A blocking descriptor of our own
		// stays out of it (os.NewFile).
		fd, err := unix.Open("/proc/self/mountinfo", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return "/", "/"
		}
		m.f = os.NewFile(uintptr(fd), "/proc/self/mountinfo")
	}
	// POLLPRI (reported with POLLERR) since the last poll means: changed. Polling re-arms it.
	fds := []unix.PollFd{{Fd: int32(m.f.Fd()), Events: unix.POLLPRI}}
	if n, err := unix.Poll(fds, 0); err != nil || n > 0 || !m.valid {
		m.valid = m.read() == nil
	}
	for p := filepath.Clean(path); p != "/" && p != "."; p = filepath.Dir(p) {
		if dev, ok := m.points[p]; ok {
			return p, dev
		}
	}
	if dev, ok := m.points["/"]; ok {
		return "/", dev
	}
	return "/", "/"
}

func (m *mountPoints) close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.f == nil {
		return nil
	}
	err := m.f.Close()
	m.f, m.valid = nil, false
	return err
}

func (m *mountPoints) read() error {
	if _, err := m.f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	infos, err := mountinfo.GetMountsFromReader(m.f, nil)
	if err != nil {
		return err
	}
	m.points = make(map[string]string, len(infos))
	for _, in := range infos {
		m.points[in.Mountpoint] = fmt.Sprintf("%d:%d", in.Major, in.Minor) // the last mount on a point is on top
	}
	return nil
}

// Statfs runs statfs(2) on path. The kernel keeps no cache for it: every call is a FUSE_STATFS request
// (fuse_statfs in fs/fuse/inode.c), so a dead server shows as ENOTCONN here and a stuck one as ErrTimeout, even
// while stat(2), an empty-mask statx(2) or mount-utils' IsLikelyNotMountPoint still answer from the caches. The
// one exception is a caller the mount does not let in (no allow_other, another user): the kernel then answers
// f_type alone without asking; the plugin is root and its mounts are its own or allow_other.
func (p *Prober) Statfs(path string) (unix.Statfs_t, error) {
	v, err := p.do("statfs", path, func() (any, error) {
		var st unix.Statfs_t
		if err := unix.Statfs(path, &st); err != nil {
			return st, &os.PathError{Op: "statfs", Path: path, Err: err}
		}
		return st, nil
	})
	st, _ := v.(unix.Statfs_t)
	return st, err
}

// Answers reports whether path is the root of a live FUSE filesystem that serves file (a name inside it): statfs
// reaches the server and says FUSE, and stat of path/file succeeds. It returns nil when all holds; else ErrNotFUSE
// (nothing FUSE is mounted), an error wrapping the errno of the failed call, or ErrTimeout.
func (p *Prober) Answers(path, file string) error {
	_, err := p.do("answers:"+file, path, func() (any, error) {
		var st unix.Statfs_t
		if err := unix.Statfs(path, &st); err != nil {
			return nil, &os.PathError{Op: "statfs", Path: path, Err: err}
		}
		if st.Type != FUSESuperMagic {
			return nil, &os.PathError{Op: "statfs", Path: path, Err: fmt.Errorf("%w (f_type %#x)", ErrNotFUSE, st.Type)}
		}
		if file == "" {
			return nil, nil
		}
		var fst unix.Stat_t
		name := filepath.Join(path, file)
		if err := unix.Stat(name, &fst); err != nil {
			return nil, &os.PathError{Op: "stat", Path: name, Err: err}
		}
		return nil, nil
	})
	return err
}

// Lstat is os.Lstat, bounded.
func (p *Prober) Lstat(path string) (fs.FileInfo, error) {
	v, err := p.do("lstat", path, func() (any, error) { return os.Lstat(path) })
	fi, _ := v.(fs.FileInfo)
	return fi, err
}

// Exists reports whether path exists, treating a dead mount (lstat fails with ENOTCONN...) as existing.
func (p *Prober) Exists(path string) (bool, error) {
	_, err := p.Lstat(path)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case IsDead(err):
		return true, nil
	}
	return false, err
}

// IsEmptyDir reports whether path is a directory without entries (false for anything else, such as a file).
func (p *Prober) IsEmptyDir(path string) (bool, error) {
	v, err := p.do("readdir", path, func() (any, error) {
		f, err := os.OpenFile(path, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
		if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		defer f.Close()
		_, err = f.Readdirnames(1)
		if errors.Is(err, io.EOF) {
			return true, nil
		}
		return false, err
	})
	empty, _ := v.(bool)
	return empty, err
}

// Resolve returns path with the symlinks of its parent directories resolved, as the kernel writes it in
// mountinfo. Parents that do not exist yet are kept as they are (they will be created as directories). The last
// element is not resolved: it may be a dead FUSE mount; callers that must not follow it check it with Lstat.
func (p *Prober) Resolve(path string) (string, error) {
	path = filepath.Clean(path)
	dir, base := filepath.Split(path)
	if base == "" {
		return path, nil
	}
	v, err := p.do("resolve", dir, func() (any, error) {
		// Walk up to the deepest parent that exists, resolve it, and keep the rest as it is.
		rest := ""
		d := filepath.Clean(dir)
		for {
			r, err := filepath.EvalSymlinks(d)
			if err == nil {
				return filepath.Join(r, rest), nil
			}
			if !errors.Is(err, fs.ErrNotExist) || d == "/" {
				return "", err
			}
			rest = filepath.Join(filepath.Base(d), rest)
			d = filepath.Dir(d)
		}
	})
	if err != nil {
		return "", err
	}
	return filepath.Join(v.(string), base), nil
}
