package relayfs

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Writable is the relay that also forwards what changes the backend: create, write, truncate and the other
// attributes, mkdir, unlink, rmdir, rename, symlink, flush, fsync and release. Its promise, per operation
// (dummy-fuse/README.md says it to users):
//
//   - WRITE is acknowledged once the backend took it and the relay's journal of the handle holds it; after a
//     backend death the journal is replayed into the file on the next backend before anything else goes
//     there, so an acknowledged write is not lost with a server that had only staged it.
//   - FLUSH (every close(2)) and FSYNC (followed by a FLUSH, see Fsync) are forwarded and answered only once
//     the backend answered them; a backend that died inside one gets the journal replayed and the same
//     request again. Their success ends the journal: the backend said the file is durable.
//   - Operations on names run again on the next backend when the backend died inside them, and what the
//     first try may already have done is decided from what the next backend shows: a CREATE finds the
//     file there and opens it (the kernel sends CREATE only for a name its lookup did not find), MKDIR
//     finds a directory, UNLINK and RMDIR find nothing, RENAME finds the source gone and the target there,
//     SYMLINK finds the same link.
//
// A journal is a file in Options.SpillDir named after its file handle, which a successor relay (a takeover)
// replays when the kernel next uses that handle: the relay and the real server dying together (a keeper
// holding both) lose nothing either, as long as the spill directory outlives them (see journal).
type Writable struct {
	*FS
}

// NewWritable opens a writable relay (see New). Its mount should be read-write with default_permissions: the
// relay acts as its own user (root for a node plugin), so the kernel must check the workload's permissions.
func NewWritable(opts Options) (*Writable, error) {
	if opts.SpillDir == "" {
		opts.SpillDir = os.TempDir()
	}
	if opts.JournalBound <= 0 {
		opts.JournalBound = DefaultJournalBound
	}
	if err := os.MkdirAll(opts.SpillDir, 0o700); err != nil {
		return nil, fmt.Errorf("spill directory: %w", err)
	}
	fs, err := New(opts)
	if err != nil {
		return nil, err
	}
	return &Writable{FS: fs}, nil
}

// LargeRequests implements dummyfs.LargeRequests: WRITEs carry their data.
func (fs *Writable) LargeRequests() bool { return true }

// DefaultJournalBound is how much a handle may write before the relay makes its file durable itself (a
// FLUSH, which uploads it on gcsfuse): the journal's spill file never holds more.
const DefaultJournalBound = 64 << 20

// writer is what a file handle opened for writing adds.
type writer struct {
	// mu orders the handle's reads, writes, truncations, flushes and fsyncs: a replay after a backend death
	// must find every write before it in the journal, and none after.
	mu    sync.Mutex
	j     *journal
	bound int64
	logf  func(format string, a ...any)
}

// createMode is the mode a reopen creates the file with.
func (w *writer) createMode() uint32 {
	if w == nil {
		return 0
	}
	return w.j.header.Mode
}

// writeFlags are the kernel's open flags the backend file is opened with: O_APPEND is dropped (the kernel
// sends every WRITE with its offset, and pwrite(2) on an O_APPEND file would append whatever the offset).
const writeFlags = unix.O_ACCMODE | unix.O_TRUNC | unix.O_EXCL | unix.O_DIRECT | unix.O_SYNC | unix.O_DSYNC

// newWriteHandle describes a file opened for writing (created by this handle when created), whose journal is
// named after file handle fh. A reopen never truncates or insists on creating (the journal holds the
// truncation); it creates the file again when this handle created it: a server that stages a new file until
// its upload loses the file itself.
func (fs *Writable) newWriteHandle(fh, node uint64, path string, kernelFlags uint32, mode uint32, created bool) *handle {
	flags := int(kernelFlags) & writeFlags
	hdr := journalHeader{Node: node, Reopen: flags &^ (unix.O_TRUNC | unix.O_EXCL)}
	if created {
		hdr.Reopen |= unix.O_CREAT
		hdr.Mode = mode & 0o7777
	}
	return &handle{node: node, path: path, flags: flags, w: fs.newWriter(&journal{dir: fs.opts.SpillDir, name: journalName(fh), header: hdr})}
}

func (fs *Writable) newWriter(j *journal) *writer {
	return &writer{j: j, bound: fs.opts.JournalBound, logf: fs.logf}
}

// inherited is a handle for a predecessor's journal of file handle fh, nil when there is none; it opens
// the file with the journal's flags (and replays it) when first used.
func (fs *Writable) inherited(fh uint64) *handle {
	j, err := loadJournal(fs.opts.SpillDir, fh)
	if err != nil {
		fs.logf("handle %#x: %v", fh, err)
		return nil
	}
	if j == nil {
		return nil
	}
	path, ok := fs.nodes.path(j.header.Node)
	if !ok {
		fs.logf("handle %#x: the journal's node %d is not in the node table; its %s cannot be replayed", fh, j.header.Node, j)
		j.remove()
		return nil
	}
	return &handle{node: j.header.Node, path: path, flags: j.header.Reopen, w: fs.newWriter(j)}
}

func writing(flags uint32) bool {
	return flags&syscall.O_ACCMODE != syscall.O_RDONLY || flags&syscall.O_TRUNC != 0
}

// Open opens a file; for writing, the handle keeps a journal.
func (fs *Writable) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	if !writing(in.Flags) {
		return fs.FS.Open(cancel, in, out)
	}
	path, ok := fs.nodes.path(in.NodeId)
	if !ok {
		return fuse.Status(syscall.ESTALE)
	}
	fh := fs.handles.reserve()
	h := fs.newWriteHandle(fh, in.NodeId, path, in.Flags, 0, false)
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	var err error
	if h.flags&unix.O_TRUNC != 0 {
		err = h.w.j.truncate(0) // the truncation is the server's to make durable, like a write
	}
	if err == nil {
		err = fs.do(func(r *rootFD) error { return h.open(r) })
	}
	if err != nil {
		h.w.j.remove()
		fs.handles.remove(fh)
		return status(err)
	}
	fs.handles.set(fh, h)
	out.Fh = fh
	out.OpenFlags = fs.openFlags()
	return fuse.OK
}

func (fs *Writable) openFlags() uint32 {
	if fs.opts.DirectIO {
		return fuse.FOPEN_DIRECT_IO
	}
	return fuse.FOPEN_KEEP_CACHE
}

// Create makes and opens a file. When the backend died inside the first try, or the kernel resent the
// request after a relay died with it, this try opens the file the earlier one may have made rather than fail
// with EEXIST.
func (fs *Writable) Create(_ <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	path, st := fs.child(in.NodeId, name)
	if st != fuse.OK {
		return st
	}
	fh := fs.handles.reserve()
	h := fs.newWriteHandle(fh, 0, path, in.Flags, in.Mode, true)
	var attr unix.Stat_t
	tries := 0
	err := fs.do(func(r *rootFD) error {
		flags := h.flags | unix.O_CREAT
		if tries++; tries > 1 || resent(&in.InHeader) {
			flags &^= unix.O_EXCL
		}
		fd, err := openAtMode(r, path, flags, h.w.j.header.Mode)
		if err != nil {
			return err
		}
		fs.giveToCaller(fd, "", &in.InHeader)
		if err := unix.Fstat(fd, &attr); err != nil {
			unix.Close(fd)
			return err
		}
		h.use(newBackendFile(fd, r.gen))
		return nil
	})
	if err != nil {
		fs.handles.remove(fh)
		return status(err)
	}
	id, err := fs.nodes.lookup(path)
	if err != nil {
		fs.logf("create %s: %v", path, err)
		fs.handles.remove(fh)
		h.close().release()
		return fuse.EIO
	}
	h.node, h.w.j.header.Node = id, id
	fs.handles.set(fh, h)
	fs.fillEntry(id, &attr, &out.EntryOut)
	out.OpenOut.Fh = fh
	out.OpenOut.OpenFlags = fs.openFlags()
	return fuse.OK
}

// giveToCaller makes the caller the owner of what the relay just made (fd, or name in it when name is not
// empty), as a local filesystem would; the relay itself acts as root. A server with fixed owners (gcsfuse,
// s3fs) refuses: what it made stays as the server shows every file.
func (fs *Writable) giveToCaller(fd int, name string, h *fuse.InHeader) {
	if int(h.Uid) == os.Geteuid() && int(h.Gid) == os.Getegid() {
		return
	}
	if name == "" {
		_ = unix.Fchown(fd, int(h.Uid), int(h.Gid))
		return
	}
	_ = unix.Fchownat(fd, name, int(h.Uid), int(h.Gid), unix.AT_SYMLINK_NOFOLLOW)
}

// writeHandle is the handle fh of a WRITE, FSYNC or truncation: a predecessor's is adopted, with its journal
// when it left one, else opened again for writing with the flags the kernel sends; nil when it is no file
// opened for writing.
func (fs *Writable) writeHandle(fh, node uint64, flags uint32) *handle {
	h := fs.handles.get(fh)
	if h == nil {
		if h = fs.inherited(fh); h == nil && writing(flags) {
			if path, ok := fs.nodes.path(node); ok {
				h = fs.newWriteHandle(fh, node, path, flags&^syscall.O_TRUNC, 0, false)
			}
		}
		if h != nil {
			h = fs.handles.adopt(fh, h)
		}
	}
	if h == nil || h.w == nil {
		return nil
	}
	return h
}

// Writev leaves WRITE to Write.
func (fs *Writable) Writev(<-chan struct{}, *fuse.WriteIn, [][]byte) (uint32, fuse.Status) {
	return 0, fuse.ENOSYS
}

// Write journals data and writes it to the backend file.
func (fs *Writable) Write(_ <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	h := fs.writeHandle(in.Fh, in.NodeId, in.Flags)
	if h == nil {
		return 0, fuse.Status(syscall.EBADF)
	}
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	if h.w.j.bytes+int64(len(data)) > h.w.bound {
		if err := fs.durable(h, flushFD); err != nil {
			return 0, status(err)
		}
	}
	// Journaled first: a backend that dies inside the write gets it with the replay, and not once more: a server
	// streaming a new file into an upload takes only writes that follow each other (gcsfuse turns any other into
	// a rewrite through a temporary file, which fails where its /tmp is read-only).
	if err := h.w.j.write(data, int64(in.Offset)); err != nil {
		fs.logf("write %s: %v", h.path, err)
		return 0, fuse.EIO
	}
	seq := h.w.j.seq
	err := fs.do(func(r *rootFD) error {
		f, err := h.file(r)
		if err != nil {
			return err
		}
		defer f.release()
		if h.w.j.replayed >= seq {
			return nil // the replay into this backend's file wrote it
		}
		return pwriteAll(f.fd, data, int64(in.Offset))
	})
	if err != nil {
		h.w.j.unrecord() // not written: nothing to replay
		return 0, status(err)
	}
	return uint32(len(data)), fuse.OK
}

// durable runs sync (fsync, fdatasync or flush) on the backend file, again on the next backend with the
// journal replayed when the backend died inside it, and ends the journal when it succeeds. h.w.mu is held.
func (fs *Writable) durable(h *handle, sync func(fd int) error) error {
	err := fs.do(func(r *rootFD) error {
		f, err := h.file(r)
		if err != nil {
			return err
		}
		defer f.release()
		return sync(f.fd)
	})
	if err == nil {
		h.w.j.clear()
	}
	return err
}

// flushFD sends the backend a FLUSH for fd, as every close(2) of a FUSE file does, and returns its answer.
func flushFD(fd int) error {
	d, err := unix.Dup(fd)
	if err != nil {
		return err
	}
	return unix.Close(d)
}

// Flush forwards a close(2) of a file opened for writing. Other handles have nothing to flush, nor has a
// predecessor's that left no journal (its death closed its descriptors: a FLUSH each).
func (fs *Writable) Flush(_ <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	h := fs.handles.get(in.Fh)
	if h == nil {
		if h = fs.inherited(in.Fh); h != nil {
			h = fs.handles.adopt(in.Fh, h)
		}
	}
	if h == nil || h.w == nil {
		return fuse.OK
	}
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	return status(fs.durable(h, flushFD))
}

// Fsync forwards fsync(2) and fdatasync(2), and then a FLUSH: some servers make a file durable at FLUSH only
// (gcsfuse streams a new file into an upload that only a FLUSH finishes; its FSYNC returns success with no
// object in the bucket, TestServerKillLosesWritesWithoutTheRelay shows it), and an fsync(2) that returned 0
// must mean durable.
func (fs *Writable) Fsync(_ <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	h := fs.writeHandle(in.Fh, in.NodeId, syscall.O_WRONLY)
	if h == nil {
		return fuse.OK // nothing written through it
	}
	sync := unix.Fsync
	if in.FsyncFlags&1 != 0 { // FUSE_FSYNC_FDATASYNC
		sync = unix.Fdatasync
	}
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	return status(fs.durable(h, func(fd int) error {
		if err := sync(fd); err != nil {
			return err
		}
		return flushFD(fd)
	}))
}

// Release closes a handle. A file opened for writing whose journal is not empty (written after its last
// FLUSH, through a descriptor the writer had duplicated) is made durable first, off the kernel's thread.
func (fs *Writable) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	h := fs.handles.remove(in.Fh)
	if h == nil {
		h = fs.inherited(in.Fh)
	}
	if h == nil || h.w == nil {
		fs.spares.put(h)
		return
	}
	go func() {
		h.w.mu.Lock()
		defer h.w.mu.Unlock()
		if !h.w.j.empty() {
			if err := fs.durable(h, flushFD); err != nil {
				fs.logf("release %s: %s were not made durable and are lost: %v", h.path, h.w.j, err)
			}
		}
		h.w.j.remove()
		if f := h.close(); f != nil {
			f.release()
		}
	}()
}

// SetAttr changes size, mode, owner and times; a truncation through a handle opened for writing is
// journaled like a write.
func (fs *Writable) SetAttr(_ <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	p, ok := fs.nodes.path(in.NodeId)
	if !ok {
		return fuse.Status(syscall.ESTALE)
	}
	if size, ok := in.GetSize(); ok {
		if err := fs.truncate(in, p, int64(size)); err != nil {
			return status(err)
		}
	}
	err := fs.do(func(r *rootFD) error {
		return atParent(r, p, func(dir int, name string) error {
			if mode, ok := in.GetMode(); ok {
				if err := unix.Fchmodat(dir, name, mode&0o7777, 0); err != nil {
					return err
				}
			}
			uid, okU := in.GetUID()
			gid, okG := in.GetGID()
			if okU || okG {
				u, g := -1, -1
				if okU {
					u = int(uid)
				}
				if okG {
					g = int(gid)
				}
				if err := unix.Fchownat(dir, name, u, g, unix.AT_SYMLINK_NOFOLLOW); err != nil {
					return err
				}
			}
			if in.Valid&(fuse.FATTR_ATIME|fuse.FATTR_MTIME) != 0 {
				ts := []unix.Timespec{timespec(in.Valid, fuse.FATTR_ATIME, fuse.FATTR_ATIME_NOW, in.Atime, in.Atimensec),
					timespec(in.Valid, fuse.FATTR_MTIME, fuse.FATTR_MTIME_NOW, in.Mtime, in.Mtimensec)}
				if err := unix.UtimesNanoAt(dir, name, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
					return err
				}
			}
			return nil
		})
	})
	if err != nil {
		return status(err)
	}
	return fs.GetAttr(nil, &fuse.GetAttrIn{InHeader: in.InHeader}, out)
}

func timespec(valid, set, now uint32, sec uint64, nsec uint32) unix.Timespec {
	switch {
	case valid&set == 0:
		return unix.Timespec{Nsec: unix.UTIME_OMIT}
	case valid&now != 0:
		return unix.Timespec{Nsec: unix.UTIME_NOW}
	}
	return unix.Timespec{Sec: int64(sec), Nsec: int64(nsec)}
}

// truncate sets the size of file p: through the handle the kernel names (journaled) or by opening it.
func (fs *Writable) truncate(in *fuse.SetAttrIn, p string, size int64) error {
	if fh, ok := in.GetFh(); ok {
		if h := fs.writeHandle(fh, in.NodeId, syscall.O_WRONLY); h != nil {
			h.w.mu.Lock()
			defer h.w.mu.Unlock()
			if err := h.w.j.truncate(size); err != nil {
				fs.logf("truncate %s: %v", h.path, err)
				return unix.EIO
			}
			err := fs.do(func(r *rootFD) error {
				f, err := h.file(r)
				if err != nil {
					return err
				}
				defer f.release()
				return unix.Ftruncate(f.fd, size)
			})
			if err != nil {
				h.w.j.unrecord()
			}
			return err
		}
	}
	// No handle: the truncation is one request to the server, durable as it makes it on close.
	return fs.do(func(r *rootFD) error {
		fd, err := openAt(r, p, unix.O_WRONLY)
		if err != nil {
			return err
		}
		err = unix.Ftruncate(fd, size)
		if cerr := unix.Close(fd); err == nil {
			err = cerr
		}
		return err
	})
}

// atParent runs op with the directory of p (beneath r, no symbolic link followed) and p's last name; the
// root is its own directory, named ".".
func atParent(r *rootFD, p string, op func(dir int, name string) error) error {
	dir, name := path.Split(p)
	if dir == "" {
		return op(r.fd, name)
	}
	fd, err := openAt(r, dir, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return op(fd, name)
}

// child is the backend path of name in directory node parent.
func (fs *FS) child(parent uint64, name string) (string, fuse.Status) {
	dir, ok := fs.nodes.path(parent)
	if !ok {
		return "", fuse.Status(syscall.ESTALE)
	}
	if name == "" || name == "." || name == ".." || len(name) > unix.NAME_MAX || strings.Contains(name, "/") {
		return "", fuse.Status(syscall.EINVAL)
	}
	return join(dir, name), fuse.OK
}

// retried runs op like do and, when an earlier try may have done it already (the backend died inside the
// first try, or the request is one the kernel resent after a relay died: its predecessor may have done it),
// lets settled decide whether the error means the earlier try had.
func (fs *FS) retried(h *fuse.InHeader, op func(r *rootFD) error, settled func(error) bool) error {
	tries := 0
	err := fs.do(func(r *rootFD) error { tries++; return op(r) })
	if err != nil && (tries > 1 || resent(h)) && settled(err) {
		return nil
	}
	return err
}

// resent reports whether the kernel sent this request once before, to a relay that died with it
// (FUSE_UNIQUE_RESEND, set by fuse_resend in fs/fuse/dev.c since Linux 6.9).
func resent(h *fuse.InHeader) bool { return h.Unique&(1<<63) != 0 }

// entry describes path, new in the backend, as a node the kernel now holds.
func (fs *FS) entry(p string, out *fuse.EntryOut) fuse.Status {
	var st unix.Stat_t
	if err := fs.do(func(r *rootFD) error { return lstat(r, p, &st) }); err != nil {
		return status(err)
	}
	id, err := fs.nodes.lookup(p)
	if err != nil {
		fs.logf("lookup %s: %v", p, err)
		return fuse.EIO
	}
	fs.fillEntry(id, &st, out)
	return fuse.OK
}

// Mkdir makes a directory; after a backend death, one found there is the first try's.
func (fs *Writable) Mkdir(_ <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	p, st := fs.child(in.NodeId, name)
	if st != fuse.OK {
		return st
	}
	err := fs.retried(&in.InHeader, func(r *rootFD) error {
		return atParent(r, p, func(dir int, name string) error {
			if err := unix.Mkdirat(dir, name, in.Mode&0o7777); err != nil {
				return err
			}
			fs.giveToCaller(dir, name, &in.InHeader)
			return nil
		})
	}, func(err error) bool { return errors.Is(err, unix.EEXIST) && fs.isType(p, unix.S_IFDIR) })
	if err != nil {
		return status(err)
	}
	return fs.entry(p, out)
}

// isType reports whether path is there as a file of type typ (S_IFMT bits).
func (fs *FS) isType(p string, typ uint32) bool {
	var st unix.Stat_t
	err := fs.do(func(r *rootFD) error { return lstat(r, p, &st) })
	return err == nil && st.Mode&unix.S_IFMT == typ
}

// Unlink removes a file; after a backend death, finding it gone means the first try removed it.
func (fs *Writable) Unlink(_ <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	return fs.remove(h, name, 0)
}

// Rmdir removes a directory, as Unlink a file.
func (fs *Writable) Rmdir(_ <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	return fs.remove(h, name, unix.AT_REMOVEDIR)
}

func (fs *Writable) remove(h *fuse.InHeader, name string, flags int) fuse.Status {
	p, st := fs.child(h.NodeId, name)
	if st != fuse.OK {
		return st
	}
	err := fs.retried(h, func(r *rootFD) error {
		return atParent(r, p, func(dir int, name string) error { return unix.Unlinkat(dir, name, flags) })
	}, func(err error) bool { return errors.Is(err, unix.ENOENT) })
	if err != nil {
		return status(err)
	}
	fs.nodes.removed(p)
	fs.handles.removed(p)
	return fuse.OK
}

// Rename moves a name; after a backend death, the source gone and the target there mean the first try
// moved it.
func (fs *Writable) Rename(_ <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	from, st := fs.child(in.NodeId, oldName)
	if st != fuse.OK {
		return st
	}
	to, st := fs.child(in.Newdir, newName)
	if st != fuse.OK {
		return st
	}
	if in.Flags&^unix.RENAME_NOREPLACE != 0 {
		return fuse.Status(syscall.EINVAL) // RENAME_EXCHANGE and RENAME_WHITEOUT: not forwarded
	}
	err := fs.retried(&in.InHeader, func(r *rootFD) error {
		return atParent(r, from, func(fromDir int, fromName string) error {
			return atParent(r, to, func(toDir int, toName string) error {
				return unix.Renameat2(fromDir, fromName, toDir, toName, uint(in.Flags))
			})
		})
	}, func(err error) bool {
		return (errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EEXIST)) && !fs.exists(from) && fs.exists(to)
	})
	if err != nil {
		return status(err)
	}
	if err := fs.nodes.rename(from, to); err != nil {
		fs.logf("rename %s to %s: %v", from, to, err)
		return fuse.EIO
	}
	if from != to {
		fs.handles.removed(to) // what the rename replaced
		fs.handles.renamed(from, to)
	}
	return fuse.OK
}

// exists reports whether path is there.
func (fs *FS) exists(p string) bool {
	var st unix.Stat_t
	return fs.do(func(r *rootFD) error { return lstat(r, p, &st) }) == nil
}

// Symlink makes a symbolic link; after a backend death, the same link found there is the first try's.
func (fs *Writable) Symlink(_ <-chan struct{}, h *fuse.InHeader, target, name string, out *fuse.EntryOut) fuse.Status {
	p, st := fs.child(h.NodeId, name)
	if st != fuse.OK {
		return st
	}
	err := fs.retried(h, func(r *rootFD) error {
		return atParent(r, p, func(dir int, name string) error {
			if err := unix.Symlinkat(target, dir, name); err != nil {
				return err
			}
			fs.giveToCaller(dir, name, h)
			return nil
		})
	}, func(err error) bool {
		var got []byte
		return errors.Is(err, unix.EEXIST) &&
			fs.do(func(r *rootFD) (err error) { got, err = readlink(r, p); return err }) == nil && string(got) == target
	})
	if err != nil {
		return status(err)
	}
	return fs.entry(p, out)
}

// What a relay cannot forward so that it survives a backend death, or real servers do not offer: hard links
// (gcsfuse, s3fs and rclone have none), device nodes, extended attributes, space allocation, and copies the
// kernel would otherwise do by READ and WRITE (ENOSYS makes it fall back to them).

func (fs *Writable) Link(<-chan struct{}, *fuse.LinkIn, string, *fuse.EntryOut) fuse.Status {
	return fuse.ENOTSUP
}
func (fs *Writable) Mknod(<-chan struct{}, *fuse.MknodIn, string, *fuse.EntryOut) fuse.Status {
	return fuse.ENOTSUP
}
func (fs *Writable) SetXAttr(<-chan struct{}, *fuse.SetXAttrIn, string, []byte) fuse.Status {
	return fuse.ENOTSUP
}
func (fs *Writable) RemoveXAttr(<-chan struct{}, *fuse.InHeader, string) fuse.Status {
	return fuse.ENOTSUP
}
func (fs *Writable) Tmpfile(<-chan struct{}, *fuse.CreateIn, *fuse.CreateOut) fuse.Status {
	return fuse.ENOTSUP
}
func (fs *Writable) Fallocate(<-chan struct{}, *fuse.FallocateIn) fuse.Status { return fuse.ENOTSUP }
func (fs *Writable) CopyFileRange(<-chan struct{}, *fuse.CopyFileRangeIn) (uint32, fuse.Status) {
	return 0, fuse.ENOSYS
}
