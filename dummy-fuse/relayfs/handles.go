package relayfs

import (
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// handles are the open files and directory listings, by the handle the kernel got for them. A handle is
// this process's epoch (random, in the high 32 bits) and a counter, so that the handles a successor hands
// out do not clash with its predecessor's, which it adopts when the kernel uses them (Read, ReadDir).
type handles struct {
	mu    sync.Mutex
	byFh  map[uint64]*handle
	epoch uint64
	next  uint32
}

func newHandles() *handles {
	return &handles{byFh: map[uint64]*handle{}, epoch: uint64(rand.Uint32()|1) << 32}
}

// add registers h and returns its new handle.
func (hs *handles) add(h *handle) uint64 {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	for {
		hs.next++
		fh := hs.epoch | uint64(hs.next)
		if hs.byFh[fh] == nil {
			hs.byFh[fh] = h
			return fh
		}
	}
}

// reserve hands out a new handle with nothing behind it yet (set gives it one; remove gives it up), for a
// handle whose number must be known before it is opened: a writable handle's journal is named after it.
func (hs *handles) reserve() uint64 { return hs.add(&handle{}) }

// set puts h behind handle fh.
func (hs *handles) set(fh uint64, h *handle) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	hs.byFh[fh] = h
}

// renamed moves the handles of the file or directory at from, and of those beneath it, to to: a handle
// opened again (after a backend death) opens the file where it is now.
func (hs *handles) renamed(from, to string) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	for _, h := range hs.byFh {
		h.mu.Lock()
		if h.path == from || strings.HasPrefix(h.path, from+"/") {
			h.path = to + h.path[len(from):]
		}
		h.mu.Unlock()
	}
}

// removed orphans the handles of the file at path, which was unlinked or replaced by a rename: one that must
// be opened again (after a backend death) fails with ESTALE rather than open, or create anew, another file
// of that name.
func (hs *handles) removed(path string) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	for _, h := range hs.byFh {
		h.mu.Lock()
		if h.path == path {
			h.path = ""
		}
		h.mu.Unlock()
	}
}

func (hs *handles) get(fh uint64) *handle {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	return hs.byFh[fh]
}

// adopt registers h under a predecessor's handle fh, unless another request adopted it first.
func (hs *handles) adopt(fh uint64, h *handle) *handle {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if old := hs.byFh[fh]; old != nil {
		if f := h.close(); f != nil {
			f.release()
		}
		return old
	}
	hs.byFh[fh] = h
	return h
}

// remove drops handle fh and returns it (nil if unknown).
func (hs *handles) remove(fh uint64) *handle {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	h := hs.byFh[fh]
	delete(hs.byFh, fh)
	return h
}

func (hs *handles) closeAll() {
	hs.mu.Lock()
	all := hs.byFh
	hs.byFh = map[uint64]*handle{}
	hs.mu.Unlock()
	for _, h := range all {
		if f := h.close(); f != nil {
			f.release()
		}
	}
}

// handle is an open file (path + flags, the backend file open on some root) or a directory listing.
type handle struct {
	node  uint64
	path  string
	flags int
	dir   []dirent // the listing of a directory handle (nil for a file)
	w     *writer  // what a file opened for writing adds (nil otherwise)

	mu     sync.Mutex
	f      *backendFile // the backend file, nil until opened
	closed bool
}

// backendFile is a descriptor of a backend file opened on root generation gen. It is closed when its handle
// and every read running on it have let go of it, so that its number is never reused under a read still
// running.
type backendFile struct {
	fd   int
	gen  uint64
	refs atomic.Int32 // the handle's (or the spares') reference + one per read in flight
}

func newBackendFile(fd int, gen uint64) *backendFile {
	f := &backendFile{fd: fd, gen: gen}
	f.refs.Store(1)
	return f
}

// release drops a reference; the last one closes the descriptor.
func (f *backendFile) release() {
	if f.refs.Add(-1) == 0 {
		unix.Close(f.fd)
	}
}

// dirent is a directory entry: its name and its file type (S_IFMT bits).
type dirent struct {
	name string
	typ  uint32
}

// newFileHandle describes a file opened with the kernel's open flags: read-only, and O_DIRECT passed on so
// that a workload's direct reads reach the real server too.
func newFileHandle(node uint64, path string, kernelFlags uint32) *handle {
	return &handle{node: node, path: path, flags: unix.O_RDONLY | int(kernelFlags)&unix.O_DIRECT}
}

// open opens the file on root r unless it is open on r or a newer root.
func (h *handle) open(r *rootFD) error {
	f, err := h.file(r)
	if err == nil {
		f.release()
	}
	return err
}

// use makes f (a spare, open on root r) the handle's backend file.
func (h *handle) use(f *backendFile) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.f = f
}

// file returns the backend file as open on r or a newer root, opening it on r if need be, with a reference
// that the caller releases.
func (h *handle) file(r *rootFD) (*backendFile, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.closed:
		return nil, os.ErrClosed
	case h.f != nil && h.f.gen >= r.gen:
		h.f.refs.Add(1) // the handle's own reference keeps it open meanwhile
		return h.f, nil
	}
	if h.path == "" {
		return nil, unix.ESTALE // its file was removed (handles.removed)
	}
	flags := h.flags
	if h.w != nil && h.f != nil {
		flags = h.w.j.header.Reopen
	}
	fd, err := openAtMode(r, h.path, flags, h.w.createMode())
	if err != nil {
		return nil, err
	}
	// A reopen, or a predecessor's journal: what the backend may not have is replayed before anything else.
	if h.w != nil && !h.w.j.empty() && (h.f != nil || h.flags&unix.O_TRUNC == 0) {
		if err := h.w.j.replay(fd); err != nil {
			unix.Close(fd)
			return nil, err
		}
		h.w.logf("%s: replayed %d writes and truncations (%d bytes) the backend had not made durable", h.path, len(h.w.j.ops), h.w.j.bytes)
	}
	if h.f != nil {
		h.f.release() // open on a dead backend: the kernel fails its FLUSH at once
	}
	h.f = newBackendFile(fd, r.gen)
	h.f.refs.Add(1)
	return h.f, nil
}

// readAt reads from the file as opened on r (or on a newer root): one pread, whose short count is the end of
// the file (the kernel asks for no more than it wants).
func (h *handle) readAt(r *rootFD, buf []byte, off int64) (int, error) {
	if h.w != nil {
		h.w.mu.Lock() // a reopen replays the journal, which only changes under this lock
		defer h.w.mu.Unlock()
	}
	f, err := h.file(r)
	if err != nil {
		return 0, err
	}
	defer f.release()
	for {
		n, err := unix.Pread(f.fd, buf, off)
		if err != unix.EINTR {
			return max(n, 0), err
		}
	}
}

// close marks the handle closed and returns its backend file (nil if none), whose reference the caller now
// holds.
func (h *handle) close() *backendFile {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	f := h.f
	h.f = nil
	return f
}

// readDir lists the directory at path beneath r.
func readDir(r *rootFD, path string) ([]dirent, error) {
	fd, err := openAt(r, path, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	ents, err := f.ReadDir(-1)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, err
	}
	// Sorted: a successor that lists the directory anew for its predecessor's handle pages through it by
	// the same offsets, whatever order the backend lists it in.
	slices.SortFunc(ents, func(a, b os.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	out := make([]dirent, len(ents))
	for i, e := range ents {
		out[i] = dirent{name: e.Name(), typ: fileType(e.Type())}
	}
	return out, nil
}

// fileType turns Go's type bits into the S_IFMT bits of a dirent.
func fileType(m fs.FileMode) uint32 {
	switch {
	case m&fs.ModeDir != 0:
		return syscall.S_IFDIR
	case m&fs.ModeSymlink != 0:
		return syscall.S_IFLNK
	case m&fs.ModeNamedPipe != 0:
		return syscall.S_IFIFO
	case m&fs.ModeSocket != 0:
		return syscall.S_IFSOCK
	case m&fs.ModeCharDevice != 0:
		return syscall.S_IFCHR
	case m&fs.ModeDevice != 0:
		return syscall.S_IFBLK
	}
	return syscall.S_IFREG
}
