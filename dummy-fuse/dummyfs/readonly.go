package dummyfs

import "github.com/hanwen/go-fuse/v2/fuse"

// ReadOnly is a RawFileSystem that answers every request that would change the filesystem with EROFS and
// everything else as go-fuse's default (ENOSYS); a read-only filesystem (this one, the relay) embeds it and
// implements the reads.
type ReadOnly struct{ fuse.RawFileSystem }

// NewReadOnly returns a ReadOnly over go-fuse's default RawFileSystem.
func NewReadOnly() ReadOnly { return ReadOnly{RawFileSystem: fuse.NewDefaultRawFileSystem()} }

func (ReadOnly) SetAttr(<-chan struct{}, *fuse.SetAttrIn, *fuse.AttrOut) fuse.Status {
	return fuse.EROFS
}
func (ReadOnly) Mknod(<-chan struct{}, *fuse.MknodIn, string, *fuse.EntryOut) fuse.Status {
	return fuse.EROFS
}
func (ReadOnly) Mkdir(<-chan struct{}, *fuse.MkdirIn, string, *fuse.EntryOut) fuse.Status {
	return fuse.EROFS
}
func (ReadOnly) Unlink(<-chan struct{}, *fuse.InHeader, string) fuse.Status { return fuse.EROFS }
func (ReadOnly) Rmdir(<-chan struct{}, *fuse.InHeader, string) fuse.Status  { return fuse.EROFS }
func (ReadOnly) Rename(<-chan struct{}, *fuse.RenameIn, string, string) fuse.Status {
	return fuse.EROFS
}
func (ReadOnly) Link(<-chan struct{}, *fuse.LinkIn, string, *fuse.EntryOut) fuse.Status {
	return fuse.EROFS
}
func (ReadOnly) Symlink(<-chan struct{}, *fuse.InHeader, string, string, *fuse.EntryOut) fuse.Status {
	return fuse.EROFS
}
func (ReadOnly) SetXAttr(<-chan struct{}, *fuse.SetXAttrIn, string, []byte) fuse.Status {
	return fuse.EROFS
}
func (ReadOnly) RemoveXAttr(<-chan struct{}, *fuse.InHeader, string) fuse.Status { return fuse.EROFS }
func (ReadOnly) Create(<-chan struct{}, *fuse.CreateIn, string, *fuse.CreateOut) fuse.Status {
	return fuse.EROFS
}
func (ReadOnly) Tmpfile(<-chan struct{}, *fuse.CreateIn, *fuse.CreateOut) fuse.Status {
	return fuse.EROFS
}
func (ReadOnly) Write(<-chan struct{}, *fuse.WriteIn, []byte) (uint32, fuse.Status) {
	return 0, fuse.EROFS
}
func (ReadOnly) Writev(<-chan struct{}, *fuse.WriteIn, [][]byte) (uint32, fuse.Status) {
	return 0, fuse.EROFS
}
func (ReadOnly) CopyFileRange(<-chan struct{}, *fuse.CopyFileRangeIn) (uint32, fuse.Status) {
	return 0, fuse.EROFS
}
func (ReadOnly) Fallocate(<-chan struct{}, *fuse.FallocateIn) fuse.Status { return fuse.EROFS }
