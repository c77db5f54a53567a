// Package relayfs is a read-only relay on go-fuse's raw API: it serves a kernel FUSE connection by forwarding
// every request to a backend directory, the mount of a real FUSE server (gcsfuse, squashfuse), so that the
// connection the workload uses is held by a process that can be taken over (dummyfs.Takeover) while the real
// server behind it can die and be restarted.
//
// IDs the kernel holds must mean the same to a successor relay. Node IDs come from a table, node ID → path
// relative to the backend's root, handed out in order and journaled to a file (Options.NodeTable) before
// the kernel hears of them; a successor loads it. A hash of the path would need the same table anyway: the
// kernel sends only the ID, and nothing turns a hash back into its path short of walking the whole backend.
// File handles need no table: READ carries the node ID and the open flags, so a handle a successor does not
// know is opened again from them (directory handles likewise from the node ID). Attributes report the node
// ID as the inode number, which stays the same across backend restarts, unlike a backend's own numbers
// (gcsfuse hands them out as it goes).
//
// When the backend dies (ENOTCONN, or ECONNABORTED for a request that was inside it), an operation waits
// until the root can be opened again at its path and serves, at most Options.BackendWait from when the
// backend was found dead, then runs again on the new root; handles open on the dead one are opened again
// (path + flags) when next used. When the backend does not come back in time the operation fails with the
// backend's errno, and so does every later one until it is back: a dead backend never becomes a hang.
//
// Forwarding is kept cheap: a READ is one pread of the descriptor its OPEN opened, and a released descriptor
// is kept for the next OPEN of the same file (spares), so that open+read+close does not cost the backend an
// OPEN, FLUSH and RELEASE each time.
package relayfs

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/dummy-fuse/dummyfs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Options configure a relay.
type Options struct {
	// Backend is the directory to relay: the root of the real server's mount.
	Backend string
	// Roots, when set, replaces Backend: the root comes as descriptors (relay-keeper mode).
	Roots *Roots
	// BackendWait bounds how long operations wait for a dead backend to serve again (DefaultBackendWait when 0).
	BackendWait time.Duration
	// NodeTable is the file that journals node IDs for a successor; empty: none (the relay cannot be taken over).
	NodeTable string
	// DirectIO makes Open reply FOPEN_DIRECT_IO: every read reaches the relay. Otherwise FOPEN_KEEP_CACHE.
	DirectIO bool
	// AttrTimeout and EntryTimeout are how long the kernel may cache attributes and name lookups.
	AttrTimeout, EntryTimeout time.Duration
	// Writable makes Open return a writable relay (NewWritable).
	Writable bool
	// SpillDir is where a writable relay keeps the data of its journals (NewWritable: os.TempDir() when
	// empty), JournalBound how much one handle's journal holds before the relay makes the file durable itself
	// (DefaultJournalBound when 0).
	SpillDir     string
	JournalBound int64
	// Log receives a line when the backend dies, comes back or does not (nil: discarded).
	Log io.Writer
}

// DefaultBackendWait is how long a relay waits for a dead backend unless told otherwise.
const DefaultBackendWait = 30 * time.Second

// maxRetries bounds how often one operation runs again on a new root: a backend that keeps dying right after
// it came back fails the operation instead of holding it forever.
const maxRetries = 10

// FS relays requests to the backend. Requests that would change anything fail with EROFS.
type FS struct {
	// Everything that would change the backend fails with EROFS (the relay is mounted read-only, so the kernel
	// normally refuses first).
	dummyfs.ReadOnly
	opts    Options
	backend *backend
	nodes   *nodes
	handles *handles
	spares  *spares

	closeOnce sync.Once
	closeErr  error
}

var _ fuse.RawFileSystem = (*FS)(nil)

// Relay is a relay's filesystem, read-only (*FS) or writable (*Writable).
type Relay interface {
	fuse.RawFileSystem
	Close() error
}

// Open opens a relay, writable when opts.Writable says so.
func Open(opts Options) (Relay, error) {
	if opts.Writable {
		return NewWritable(opts)
	}
	return New(opts)
}

// New opens the backend's root and the node table (loading a predecessor's).
func New(opts Options) (*FS, error) {
	if opts.BackendWait <= 0 {
		opts.BackendWait = DefaultBackendWait
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	fs := &FS{ReadOnly: dummyfs.NewReadOnly(), opts: opts, handles: newHandles(), spares: newSpares(opts.AttrTimeout)}
	n, err := openNodes(opts.NodeTable)
	if err != nil {
		return nil, err
	}
	b, err := openBackend(opts.Backend, opts.Roots, opts.BackendWait, n.backend, fs.logf)
	if err != nil {
		n.close()
		return nil, err
	}
	if err := n.recordBackend(b.kind()); err != nil {
		b.close()
		n.close()
		return nil, err
	}
	fs.backend, fs.nodes = b, n
	return fs, nil
}

// Close closes the backend's root, the open handles and the node table; later calls do nothing.
func (fs *FS) Close() error {
	fs.closeOnce.Do(func() {
		fs.handles.closeAll()
		fs.spares.closeAll()
		fs.backend.close()
		fs.closeErr = fs.nodes.close()
	})
	return fs.closeErr
}

func (fs *FS) String() string { return "dummy-fuse-relay" }

func (fs *FS) logf(format string, a ...any) {
	fmt.Fprintf(fs.opts.Log, "%s dummy-fuse relay: %s\n", time.Now().UTC().Format(time.RFC3339Nano), fmt.Sprintf(format, a...))
}

// do runs op on the backend's current root and, when the backend died under it, again on the next one.
func (fs *FS) do(op func(r *rootFD) error) error {
	for try := 0; ; try++ {
		r := fs.backend.acquire()
		err := error(unix.ENOTCONN) // no root handed over yet: as good as a dead one
		if r.fd >= 0 {
			err = op(r)
		}
		r.release()
		if !dead(err) || try == maxRetries {
			return err
		}
		if rerr := fs.backend.recover(r.gen, err); rerr != nil {
			return rerr
		}
	}
}

// status turns an error into the errno for the kernel.
func status(err error) fuse.Status {
	var errno syscall.Errno
	switch {
	case err == nil:
		return fuse.OK
	case errors.As(err, &errno):
		return fuse.Status(errno)
	}
	return fuse.EIO
}

// openHow resolves a path beneath the root without following symbolic links anywhere in it: the kernel
// resolves the relay's symlinks itself (READLINK), so every path the relay is asked about is free of them,
// and one that turned up on the way could only lead out of the backend.
func openHow(flags int) *unix.OpenHow {
	return &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
}

// openAt opens path beneath root r.
func openAt(r *rootFD, path string, flags int) (int, error) { return openAtMode(r, path, flags, 0) }

// openAtMode opens path beneath root r, creating it with mode when flags say O_CREAT.
func openAtMode(r *rootFD, path string, flags int, mode uint32) (int, error) {
	how := openHow(flags)
	if flags&unix.O_CREAT != 0 {
		how.Mode = uint64(mode)
	}
	for {
		fd, err := unix.Openat2(r.fd, path, how)
		if err != unix.EINTR && err != unix.EAGAIN { // EAGAIN: a rename raced RESOLVE_BENEATH's check
			return fd, err
		}
	}
}

// lstat describes path beneath r without following a final symbolic link.
func lstat(r *rootFD, path string, st *unix.Stat_t) error {
	if path == "." {
		return unix.Fstat(r.fd, st)
	}
	fd, err := openAt(r, path, unix.O_PATH|unix.O_NOFOLLOW)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Fstat(fd, st)
}

// join is the backend path of name in the directory at dir.
func join(dir, name string) string {
	if dir == "." {
		return name
	}
	return dir + "/" + name
}

// fillAttr describes st as node id.
func fillAttr(id uint64, st *unix.Stat_t, a *fuse.Attr) {
	*a = fuse.Attr{
		Ino:       id,
		Size:      uint64(st.Size),
		Blocks:    uint64(st.Blocks),
		Atime:     uint64(st.Atim.Sec),
		Atimensec: uint32(st.Atim.Nsec),
		Mtime:     uint64(st.Mtim.Sec),
		Mtimensec: uint32(st.Mtim.Nsec),
		Ctime:     uint64(st.Ctim.Sec),
		Ctimensec: uint32(st.Ctim.Nsec),
		Mode:      st.Mode,
		Nlink:     uint32(st.Nlink),
		Owner:     fuse.Owner{Uid: st.Uid, Gid: st.Gid},
		Rdev:      uint32(st.Rdev),
		Blksize:   uint32(st.Blksize),
	}
}

func (fs *FS) fillEntry(id uint64, st *unix.Stat_t, out *fuse.EntryOut) {
	out.NodeId = id
	out.Generation = 1
	out.SetEntryTimeout(fs.opts.EntryTimeout)
	out.SetAttrTimeout(fs.opts.AttrTimeout)
	fillAttr(id, st, &out.Attr)
}

// Lookup finds name in the directory node and counts a kernel reference to it.
func (fs *FS) Lookup(_ <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	dir, ok := fs.nodes.path(h.NodeId)
	if !ok {
		return fuse.Status(syscall.ESTALE)
	}
	if name == "" || name == "." || name == ".." || strings.Contains(name, "/") {
		return fuse.ENOENT
	}
	path := join(dir, name)
	var st unix.Stat_t
	if err := fs.do(func(r *rootFD) error { return lstat(r, path, &st) }); err != nil {
		return status(err)
	}
	id, err := fs.nodes.lookup(path)
	if err != nil {
		fs.logf("lookup %s: %v", path, err)
		return fuse.EIO
	}
	fs.fillEntry(id, &st, out)
	return fuse.OK
}

// Forget drops kernel references to a node.
func (fs *FS) Forget(nodeID, nlookup uint64) { fs.nodes.forget(nodeID, nlookup) }

// GetAttr describes a node.
func (fs *FS) GetAttr(_ <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	path, ok := fs.nodes.path(in.NodeId)
	if !ok {
		return fuse.Status(syscall.ESTALE)
	}
	var st unix.Stat_t
	if err := fs.do(func(r *rootFD) error { return lstat(r, path, &st) }); err != nil {
		return status(err)
	}
	fillAttr(in.NodeId, &st, &out.Attr)
	out.SetTimeout(fs.opts.AttrTimeout)
	return fuse.OK
}

// Readlink returns a symbolic link's target as the backend has it; the kernel resolves it.
func (fs *FS) Readlink(_ <-chan struct{}, h *fuse.InHeader) ([]byte, fuse.Status) {
	path, ok := fs.nodes.path(h.NodeId)
	if !ok {
		return nil, fuse.Status(syscall.ESTALE)
	}
	var target []byte
	err := fs.do(func(r *rootFD) (err error) { target, err = readlink(r, path); return err })
	return target, status(err)
}

// readlink returns the target of the symbolic link at path beneath r.
func readlink(r *rootFD, path string) ([]byte, error) {
	fd, err := openAt(r, path, unix.O_PATH|unix.O_NOFOLLOW)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(fd, "", buf)
	return buf[:max(n, 0)], err
}

// StatFs reports the backend's figures.
func (fs *FS) StatFs(_ <-chan struct{}, _ *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	var st unix.Statfs_t
	if err := fs.do(func(r *rootFD) error { return unix.Fstatfs(r.fd, &st) }); err != nil {
		return status(err)
	}
	*out = fuse.StatfsOut{
		Blocks:  st.Blocks,
		Bfree:   st.Bfree,
		Bavail:  st.Bavail,
		Files:   st.Files,
		Ffree:   st.Ffree,
		Bsize:   uint32(st.Bsize),
		NameLen: uint32(st.Namelen),
		Frsize:  uint32(st.Frsize),
	}
	return fuse.OK
}

// Open opens a file for reading, or takes a spare descriptor of it (see spares). Opening for writing fails
// with EROFS.
func (fs *FS) Open(_ <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	if in.Flags&syscall.O_ACCMODE != syscall.O_RDONLY || in.Flags&syscall.O_TRUNC != 0 {
		return fuse.EROFS
	}
	path, ok := fs.nodes.path(in.NodeId)
	if !ok {
		return fuse.Status(syscall.ESTALE)
	}
	h := newFileHandle(in.NodeId, path, in.Flags)
	err := fs.do(func(r *rootFD) error {
		if f := fs.spares.take(h.path, h.flags, r.gen); f != nil {
			h.use(f)
			return nil
		}
		return h.open(r)
	})
	if err != nil {
		return status(err)
	}
	out.Fh = fs.handles.add(h)
	if fs.opts.DirectIO {
		out.OpenFlags = fuse.FOPEN_DIRECT_IO
	} else {
		out.OpenFlags = fuse.FOPEN_KEEP_CACHE
	}
	return fuse.OK
}

// Read reads from the backend file; a handle this process does not know (its predecessor's) is opened again
// from the node and the flags the kernel sends with every READ.
func (fs *FS) Read(_ <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	h := fs.handles.get(in.Fh)
	if h == nil {
		path, ok := fs.nodes.path(in.NodeId)
		if !ok {
			return nil, fuse.Status(syscall.EBADF)
		}
		h = fs.handles.adopt(in.Fh, newFileHandle(in.NodeId, path, in.Flags))
	} else if h.dir != nil {
		return nil, fuse.Status(syscall.EISDIR)
	}
	buf = buf[:min(uint32(len(buf)), in.Size)]
	var n int
	err := fs.do(func(r *rootFD) error {
		var err error
		n, err = h.readAt(r, buf, int64(in.Offset))
		return err
	})
	if err != nil {
		return nil, status(err)
	}
	return fuse.ReadResultData(buf[:n]), fuse.OK
}

// Release closes a file handle, keeping its backend descriptor as a spare.
func (fs *FS) Release(_ <-chan struct{}, in *fuse.ReleaseIn) { fs.spares.put(fs.handles.remove(in.Fh)) }

// OpenDir reads the directory's entries once: later READDIRs page through them by offset.
func (fs *FS) OpenDir(_ <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	h, st := fs.dirHandle(in.NodeId)
	if st != fuse.OK {
		return st
	}
	out.Fh = fs.handles.add(h)
	return fuse.OK
}

// dirHandle lists the directory node.
func (fs *FS) dirHandle(id uint64) (*handle, fuse.Status) {
	path, ok := fs.nodes.path(id)
	if !ok {
		return nil, fuse.Status(syscall.ESTALE)
	}
	var ents []dirent
	err := fs.do(func(r *rootFD) error {
		var err error
		ents, err = readDir(r, path)
		return err
	})
	if err != nil {
		return nil, status(err)
	}
	return &handle{node: id, path: path, dir: ents}, fuse.OK
}

// dirHandleOf returns the listing of handle fh, listing the directory anew for a predecessor's handle.
func (fs *FS) dirHandleOf(in *fuse.ReadIn) (*handle, fuse.Status) {
	if h := fs.handles.get(in.Fh); h != nil && h.dir != nil {
		return h, fuse.OK
	}
	h, st := fs.dirHandle(in.NodeId)
	if st != fuse.OK {
		return nil, st
	}
	return fs.handles.adopt(in.Fh, h), fuse.OK
}

// The listing starts with "." and "..", then the backend's entries; an entry's offset is its index + 1.
const dotEntries = 2

func (fs *FS) dirEntry(h *handle, i int) fuse.DirEntry {
	if i < dotEntries {
		return fuse.DirEntry{Name: [...]string{".", ".."}[i], Mode: syscall.S_IFDIR, Ino: fuse.FUSE_ROOT_ID, Off: uint64(i + 1)}
	}
	e := h.dir[i-dotEntries]
	// The kernel passes a READDIR entry's inode number on as d_ino only: the node ID when the kernel knows
	// the node (it is the inode number stat reports), else a placeholder (handing out a node here would
	// journal one per entry that nobody may ever look up).
	ino := uint64(fuse.FUSE_UNKNOWN_INO)
	if id, ok := fs.nodes.known(join(h.path, e.name)); ok {
		ino = id
	}
	return fuse.DirEntry{Name: e.name, Mode: e.typ, Ino: ino, Off: uint64(i + 1)}
}

// ReadDir lists a directory from the requested offset.
func (fs *FS) ReadDir(_ <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	h, st := fs.dirHandleOf(in)
	if st != fuse.OK {
		return st
	}
	for i := int(min(in.Offset, uint64(len(h.dir)+dotEntries))); i < len(h.dir)+dotEntries; i++ {
		if !out.AddDirEntry(fs.dirEntry(h, i)) {
			break
		}
	}
	return fuse.OK
}

// ReadDirPlus lists a directory with each entry's attributes; each entry it describes counts as a lookup.
func (fs *FS) ReadDirPlus(_ <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	h, st := fs.dirHandleOf(in)
	if st != fuse.OK {
		return st
	}
	for i := int(min(in.Offset, uint64(len(h.dir)+dotEntries))); i < len(h.dir)+dotEntries; i++ {
		e := fs.dirEntry(h, i)
		var attr unix.Stat_t
		var err error
		path := ""
		if i >= dotEntries {
			path = join(h.path, e.Name)
			err = fs.do(func(r *rootFD) error { return lstat(r, path, &attr) })
			if dead(err) {
				return status(err) // the backend did not come back
			}
		}
		entry := out.AddDirLookupEntry(e)
		if entry == nil {
			break
		}
		// The kernel ignores the entry of "." and ".."; one that vanished meanwhile gets no node (ID 0).
		if path == "" || err != nil {
			continue
		}
		id, err := fs.nodes.lookup(path)
		if err != nil {
			fs.logf("readdirplus %s: %v", path, err)
			continue
		}
		fs.fillEntry(id, &attr, entry)
	}
	return fuse.OK
}

// ReleaseDir drops a directory listing.
func (fs *FS) ReleaseDir(in *fuse.ReleaseIn) { fs.handles.remove(in.Fh) }
