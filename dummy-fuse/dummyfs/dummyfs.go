// Package dummyfs is a read-only hello-world filesystem on go-fuse's raw API.
//
// The tree is fixed: the root directory (node 1, mode 0555) holds one file, dummy-file.txt (node 2, mode 0444,
// "Hello world!\n"). Node IDs, file handles and attributes are deterministic and the filesystem keeps no
// per-request state (Forget and Release are no-ops), so a successor process that serves the same /dev/fuse
// connection with the same RawFileSystem (fuse.NewProtocolServer) understands every ID the kernel already holds.
package dummyfs

import (
	"os"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

const (
	// RootID is the node ID of the root directory (fixed by the FUSE protocol).
	RootID = fuse.FUSE_ROOT_ID
	// FileID is the node ID of dummy-file.txt.
	FileID = 2

	// FileName is the name of the only file.
	FileName = "dummy-file.txt"
	// Content is what dummy-file.txt holds.
	Content = "Hello world!\n"

	// RootHandle and FileHandle are the fixed handles OpenDir and Open return. Handles carry no state, so a
	// handle issued by a previous server process stays valid.
	RootHandle = 1
	FileHandle = 2

	rootMode = syscall.S_IFDIR | 0o555
	fileMode = syscall.S_IFREG | 0o444

	blockSize = 4096
)

// modTime is the fixed mtime/ctime/atime of both nodes. A constant (instead of the start time) keeps the
// attributes identical across a server handover; with FUSE_AUTO_INVAL_DATA a changed mtime would make the
// kernel drop the page cache.
var modTime = time.Date(2021, 1, 1, 0, 0, 0, 0, time.UTC)

// Options configure the filesystem and its mount.
type Options struct {
	// DirectIO makes Open reply FOPEN_DIRECT_IO: every read reaches the server (and fails at once when the
	// server is gone). Otherwise Open replies FOPEN_KEEP_CACHE and reads are served from the page cache.
	DirectIO bool
	// AttrTimeout and EntryTimeout are how long the kernel may cache attributes and name lookups.
	AttrTimeout  time.Duration
	EntryTimeout time.Duration
	// Debug logs every FUSE request and reply (go-fuse's debug output on stderr).
	Debug bool
	// FsName is the mount source shown in the mount table (default "dummy-fuse").
	FsName string
	// AllowOther lets users other than the mounting one access the mount (containers running as non-root).
	AllowOther bool
	// UID and GID own both nodes.
	UID, GID uint32
	// ReadLatency delays every READ, like a remote backend would.
	ReadLatency time.Duration
	// Workers bounds how many requests are handled at once (DefaultWorkers when 0).
	Workers int
	// Writable mounts a new connection read-write with default_permissions, for an FS that changes files
	// (the writable relay); otherwise it is mounted read-only.
	Writable bool
	// FS, when set, is served instead of the hello-world filesystem (the relay, package relayfs); the
	// options above that describe the tree (DirectIO, timeouts, UID, GID, ReadLatency) are then its own.
	FS fuse.RawFileSystem
}

// DefaultOptions returns the options the dummy-fuse command uses without flags.
func DefaultOptions() Options {
	return Options{
		AttrTimeout:  time.Second,
		EntryTimeout: time.Second,
		FsName:       "dummy-fuse",
		AllowOther:   true,
		UID:          uint32(os.Getuid()),
		GID:          uint32(os.Getgid()),
	}
}

// FS implements fuse.RawFileSystem. Operations it does not implement fall back to go-fuse's defaults (ENOSYS).
type FS struct {
	ReadOnly
	opts    Options
	content []byte
}

// New returns the filesystem. It can serve a fresh mount (Mount) or, unchanged, an inherited connection
// through fuse.NewProtocolServer.
func New(opts Options) *FS {
	return &FS{
		ReadOnly: NewReadOnly(),
		opts:     opts,
		content:  []byte(Content),
	}
}

var _ fuse.RawFileSystem = (*FS)(nil)

// String names the filesystem (go-fuse uses it for debug output).
func (fs *FS) String() string { return "dummy-fuse" }

// fillAttr describes node id in a; it reports false for an unknown node.
func (fs *FS) fillAttr(id uint64, a *fuse.Attr) bool {
	*a = fuse.Attr{Ino: id, Blksize: blockSize}
	switch id {
	case RootID:
		a.Mode = rootMode
		a.Nlink = 2
	case FileID:
		a.Mode = fileMode
		a.Nlink = 1
		a.Size = uint64(len(fs.content))
		a.Blocks = (a.Size + 511) / 512
	default:
		return false
	}
	a.Owner = fuse.Owner{Uid: fs.opts.UID, Gid: fs.opts.GID}
	a.SetTimes(&modTime, &modTime, &modTime)
	return true
}

func (fs *FS) fillEntry(id uint64, out *fuse.EntryOut) {
	out.NodeId = id
	out.Generation = 1
	out.SetEntryTimeout(fs.opts.EntryTimeout)
	out.SetAttrTimeout(fs.opts.AttrTimeout)
	fs.fillAttr(id, &out.Attr)
}

// Lookup resolves dummy-file.txt in the root; everything else does not exist.
func (fs *FS) Lookup(_ <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	switch {
	case h.NodeId == FileID:
		return fuse.Status(syscall.ENOTDIR)
	case h.NodeId != RootID:
		return fuse.ENOENT
	case name != FileName:
		return fuse.ENOENT
	}
	fs.fillEntry(FileID, out)
	return fuse.OK
}

// Forget is a no-op: node IDs are fixed, there is no lookup count to keep.
func (fs *FS) Forget(nodeID, nlookup uint64) {}

// GetAttr returns the fixed attributes of a node.
func (fs *FS) GetAttr(_ <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	if !fs.fillAttr(in.NodeId, &out.Attr) {
		return fuse.ENOENT
	}
	out.SetTimeout(fs.opts.AttrTimeout)
	return fuse.OK
}

// Access allows reading and searching; asking for write access fails as on any read-only filesystem.
func (fs *FS) Access(_ <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	if in.NodeId != RootID && in.NodeId != FileID {
		return fuse.ENOENT
	}
	if in.Mask&unixWOK != 0 {
		return fuse.EROFS
	}
	return fuse.OK
}

const unixWOK = 2 // W_OK

// Open opens dummy-file.txt for reading. Write access is refused with EACCES (the file is 0444; on the
// read-only mount the kernel already answers EROFS before asking us).
func (fs *FS) Open(_ <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	switch in.NodeId {
	case FileID:
	case RootID:
		return fuse.Status(syscall.EISDIR)
	default:
		return fuse.ENOENT
	}
	if in.Flags&syscall.O_ACCMODE != syscall.O_RDONLY {
		return fuse.EACCES
	}
	if in.Flags&syscall.O_TRUNC != 0 {
		return fuse.EROFS
	}
	out.Fh = FileHandle
	if fs.opts.DirectIO {
		out.OpenFlags = fuse.FOPEN_DIRECT_IO
	} else {
		out.OpenFlags = fuse.FOPEN_KEEP_CACHE
	}
	return fuse.OK
}

// Flush succeeds: nothing is ever written. It is answered (as go-fuse's default does) rather than refused
// with ENOSYS, which would make the kernel stop sending FLUSH and close(2) on a dead mount succeed instead of
// reporting ENOTCONN.
func (fs *FS) Flush(<-chan struct{}, *fuse.FlushIn) fuse.Status { return fuse.OK }

// Release is a no-op: file handles carry no state.
func (fs *FS) Release(<-chan struct{}, *fuse.ReleaseIn) {}

// Read returns the requested range of the content, clamped to its length, after Options.ReadLatency.
func (fs *FS) Read(_ <-chan struct{}, in *fuse.ReadIn, _ []byte) (fuse.ReadResult, fuse.Status) {
	if in.NodeId != FileID {
		return nil, fuse.Status(syscall.EISDIR)
	}
	// The delay ignores INTERRUPT (cancel), as libfuse filesystems do unless mounted with -o intr: Go
	// programs get a signal (SIGURG, for preemption) every few milliseconds, and a read that honoured it
	// would fail with EINTR, which their read calls do not retry. It blocks the worker's thread in
	// nanosleep(2), like a backend call would; Go's timers overshoot a 10 ms sleep by about 0.5 ms on a
	// busy machine.
	if d := fs.opts.ReadLatency; d > 0 {
		ts := unix.NsecToTimespec(d.Nanoseconds())
		for unix.Nanosleep(&ts, &ts) == unix.EINTR {
		}
	}
	return fuse.ReadResultData(fs.readData(in.Offset, in.Size)), fuse.OK
}

// readData returns the range a READ asks for, clamped to the content.
func (fs *FS) readData(offset uint64, size uint32) []byte {
	off := min(offset, uint64(len(fs.content)))
	end := min(off+uint64(size), uint64(len(fs.content)))
	return fs.content[off:end]
}

// OpenDir opens the root directory.
func (fs *FS) OpenDir(_ <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	switch in.NodeId {
	case RootID:
	case FileID:
		return fuse.Status(syscall.ENOTDIR)
	default:
		return fuse.ENOENT
	}
	out.Fh = RootHandle
	return fuse.OK
}

// dirEntries are the root's entries; their index+1 is the directory offset after them.
var dirEntries = [...]fuse.DirEntry{
	{Name: ".", Ino: RootID, Mode: rootMode, Off: 1},
	{Name: "..", Ino: RootID, Mode: rootMode, Off: 2},
	{Name: FileName, Ino: FileID, Mode: fileMode, Off: 3},
}

// ReadDir lists the root from the requested offset.
func (fs *FS) ReadDir(_ <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	if in.NodeId != RootID {
		return fuse.Status(syscall.ENOTDIR)
	}
	for _, e := range dirEntries[min(in.Offset, uint64(len(dirEntries))):] {
		if !out.AddDirEntry(e) {
			break
		}
	}
	return fuse.OK
}

// ReadDirPlus lists the root with attributes, saving the kernel a LOOKUP per entry.
func (fs *FS) ReadDirPlus(_ <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	if in.NodeId != RootID {
		return fuse.Status(syscall.ENOTDIR)
	}
	for _, e := range dirEntries[min(in.Offset, uint64(len(dirEntries))):] {
		entry := out.AddDirLookupEntry(e)
		if entry == nil {
			break
		}
		// The kernel ignores the entry for "." and ".."; only the file gets a node ID (and a lookup count,
		// which Forget may drop at will).
		if e.Ino == FileID {
			fs.fillEntry(FileID, entry)
		}
	}
	return fuse.OK
}

// ReleaseDir is a no-op: directory handles carry no state.
func (fs *FS) ReleaseDir(*fuse.ReleaseIn) {}

// StatFs reports a tiny, full, read-only filesystem.
func (fs *FS) StatFs(_ <-chan struct{}, _ *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	*out = fuse.StatfsOut{
		Blocks:  1,
		Files:   2,
		Bsize:   blockSize,
		Frsize:  blockSize,
		NameLen: 255,
	}
	return fuse.OK
}

// GetXAttr: no node has extended attributes.
func (fs *FS) GetXAttr(_ <-chan struct{}, _ *fuse.InHeader, _ string, _ []byte) (uint32, fuse.Status) {
	return 0, fuse.ENOATTR
}

// ListXAttr: no node has extended attributes.
func (fs *FS) ListXAttr(_ <-chan struct{}, _ *fuse.InHeader, _ []byte) (uint32, fuse.Status) {
	return 0, fuse.OK
}
