package dummyfs

import (
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// These tests call the RawFileSystem directly, the way a successor process's fuse.NewProtocolServer would;
// they need no mount.

func TestRawLookupAndAttrs(t *testing.T) {
	fs := New(Options{AttrTimeout: 3 * time.Second, EntryTimeout: 2 * time.Second, UID: 7, GID: 8})

	var e fuse.EntryOut
	if st := fs.Lookup(nil, &fuse.InHeader{NodeId: RootID}, FileName, &e); st != fuse.OK {
		t.Fatalf("Lookup(%s) = %v", FileName, st)
	}
	if e.NodeId != FileID || e.Size != 13 || e.Mode != syscall.S_IFREG|0o444 || e.Uid != 7 || e.Gid != 8 {
		t.Errorf("entry %+v, want node 2, 13 bytes, 0444, 7:8", e)
	}
	if e.EntryTimeout() != 2*time.Second || e.AttrTimeout() != 3*time.Second {
		t.Errorf("timeouts entry %s attr %s, want 2s and 3s", e.EntryTimeout(), e.AttrTimeout())
	}

	for _, tc := range []struct {
		parent uint64
		name   string
		want   fuse.Status
	}{
		{RootID, "missing", fuse.ENOENT},
		{FileID, "x", fuse.Status(syscall.ENOTDIR)},
		{99, "x", fuse.ENOENT},
	} {
		if st := fs.Lookup(nil, &fuse.InHeader{NodeId: tc.parent}, tc.name, &fuse.EntryOut{}); st != tc.want {
			t.Errorf("Lookup(%d, %q) = %v, want %v", tc.parent, tc.name, st, tc.want)
		}
	}

	var a fuse.AttrOut
	if st := fs.GetAttr(nil, &fuse.GetAttrIn{InHeader: fuse.InHeader{NodeId: RootID}}, &a); st != fuse.OK {
		t.Fatalf("GetAttr(root) = %v", st)
	}
	if a.Mode != syscall.S_IFDIR|0o555 || a.Ino != RootID || a.Timeout() != 3*time.Second {
		t.Errorf("root attr %+v", a)
	}
	// Attributes are identical for every server process: a successor must not make the kernel see changes.
	var b fuse.AttrOut
	New(Options{AttrTimeout: 3 * time.Second, UID: 7, GID: 8}).GetAttr(nil, &fuse.GetAttrIn{InHeader: fuse.InHeader{NodeId: RootID}}, &b)
	if a != b {
		t.Errorf("attributes differ between two instances:\n%+v\n%+v", a, b)
	}
	if st := fs.GetAttr(nil, &fuse.GetAttrIn{InHeader: fuse.InHeader{NodeId: 3}}, &a); st != fuse.ENOENT {
		t.Errorf("GetAttr(3) = %v, want ENOENT", st)
	}
	fs.Forget(FileID, 1000) // stateless: must not matter
}

func TestRawOpen(t *testing.T) {
	for _, tc := range []struct {
		direct    bool
		node      uint64
		flags     uint32
		want      fuse.Status
		wantFlags uint32
	}{
		{false, FileID, syscall.O_RDONLY, fuse.OK, fuse.FOPEN_KEEP_CACHE},
		{true, FileID, syscall.O_RDONLY, fuse.OK, fuse.FOPEN_DIRECT_IO},
		{false, FileID, syscall.O_WRONLY, fuse.EACCES, 0},
		{false, FileID, syscall.O_RDWR, fuse.EACCES, 0},
		{false, FileID, syscall.O_RDONLY | syscall.O_TRUNC, fuse.EROFS, 0},
		{false, RootID, syscall.O_RDONLY, fuse.Status(syscall.EISDIR), 0},
		{false, 5, syscall.O_RDONLY, fuse.ENOENT, 0},
	} {
		var out fuse.OpenOut
		st := New(Options{DirectIO: tc.direct}).Open(nil, &fuse.OpenIn{InHeader: fuse.InHeader{NodeId: tc.node}, Flags: tc.flags}, &out)
		if st != tc.want {
			t.Errorf("Open(node %d, flags %#o, direct %t) = %v, want %v", tc.node, tc.flags, tc.direct, st, tc.want)
			continue
		}
		if st == fuse.OK && (out.Fh != FileHandle || out.OpenFlags != tc.wantFlags) {
			t.Errorf("Open(direct %t) = fh %d flags %#x, want fh %d flags %#x", tc.direct, out.Fh, out.OpenFlags, FileHandle, tc.wantFlags)
		}
	}
	var out fuse.OpenOut
	if st := New(Options{}).OpenDir(nil, &fuse.OpenIn{InHeader: fuse.InHeader{NodeId: RootID}}, &out); st != fuse.OK || out.Fh != RootHandle {
		t.Errorf("OpenDir(root) = %v fh %d", st, out.Fh)
	}
}

func TestRawReadClamps(t *testing.T) {
	fs := New(Options{})
	for _, tc := range []struct {
		off  uint64
		size uint32
		want string
	}{
		{0, 4096, Content},
		{0, 5, "Hello"},
		{6, 100, "world!\n"},
		{13, 10, ""},
		{1 << 40, 10, ""},
	} {
		res, st := fs.Read(nil, &fuse.ReadIn{InHeader: fuse.InHeader{NodeId: FileID}, Fh: FileHandle, Offset: tc.off, Size: tc.size}, make([]byte, tc.size))
		if st != fuse.OK {
			t.Fatalf("Read(%d, %d) = %v", tc.off, tc.size, st)
		}
		got, _ := res.Bytes(make([]byte, tc.size))
		if string(got) != tc.want {
			t.Errorf("Read(off %d, size %d) = %q, want %q", tc.off, tc.size, got, tc.want)
		}
	}
	// Any handle works, also one issued by an earlier server process.
	if _, st := fs.Read(nil, &fuse.ReadIn{InHeader: fuse.InHeader{NodeId: FileID}, Fh: 12345, Size: 13}, nil); st != fuse.OK {
		t.Errorf("Read with a foreign handle = %v", st)
	}
}

func TestRawReadDir(t *testing.T) {
	fs := New(Options{})
	for _, plus := range []bool{false, true} {
		for off, want := range [][]string{{".", "..", FileName}, {"..", FileName}, {FileName}, nil, nil} {
			buf := make([]byte, 4096)
			l := fuse.NewDirEntryList(buf, uint64(off))
			in := &fuse.ReadIn{InHeader: fuse.InHeader{NodeId: RootID}, Offset: uint64(off), Size: 4096}
			var st fuse.Status
			if plus {
				st = fs.ReadDirPlus(nil, in, l)
			} else {
				st = fs.ReadDir(nil, in, l)
			}
			if st != fuse.OK {
				t.Fatalf("readdir(plus %t, off %d) = %v", plus, off, st)
			}
			var names []string
			var entries []fuse.DirEntry
			var err error
			if plus {
				var eo []fuse.EntryOut
				entries, eo, err = fuse.ParseDirLookupEntries(l.Bytes())
				for i, e := range entries {
					if e.Name == FileName && (eo[i].NodeId != FileID || eo[i].Size != 13) {
						t.Errorf("readdirplus entry for %s: %+v", FileName, eo[i])
					}
				}
			} else {
				entries, err = fuse.ParseDirEntries(l.Bytes())
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				names = append(names, e.Name)
			}
			if len(names) != len(want) || (len(want) > 0 && names[len(names)-1] != want[len(want)-1]) {
				t.Errorf("readdir(plus %t, off %d) = %q, want %q", plus, off, names, want)
			}
		}
	}
	if st := fs.ReadDir(nil, &fuse.ReadIn{InHeader: fuse.InHeader{NodeId: FileID}}, fuse.NewDirEntryList(make([]byte, 100), 0)); st != fuse.Status(syscall.ENOTDIR) {
		t.Errorf("ReadDir(file) = %v, want ENOTDIR", st)
	}
}

func TestRawWritesAreEROFS(t *testing.T) {
	fs := New(Options{})
	h := &fuse.InHeader{NodeId: RootID}
	for name, st := range map[string]fuse.Status{
		"SetAttr":      fs.SetAttr(nil, &fuse.SetAttrIn{}, &fuse.AttrOut{}),
		"Mknod":        fs.Mknod(nil, &fuse.MknodIn{}, "x", &fuse.EntryOut{}),
		"Mkdir":        fs.Mkdir(nil, &fuse.MkdirIn{}, "x", &fuse.EntryOut{}),
		"Unlink":       fs.Unlink(nil, h, FileName),
		"Rmdir":        fs.Rmdir(nil, h, "x"),
		"Rename":       fs.Rename(nil, &fuse.RenameIn{}, FileName, "x"),
		"Link":         fs.Link(nil, &fuse.LinkIn{}, "x", &fuse.EntryOut{}),
		"Symlink":      fs.Symlink(nil, h, "a", "x", &fuse.EntryOut{}),
		"SetXAttr":     fs.SetXAttr(nil, &fuse.SetXAttrIn{}, "user.x", nil),
		"RemoveXAttr":  fs.RemoveXAttr(nil, h, "user.x"),
		"Create":       fs.Create(nil, &fuse.CreateIn{}, "x", &fuse.CreateOut{}),
		"Tmpfile":      fs.Tmpfile(nil, &fuse.CreateIn{}, &fuse.CreateOut{}),
		"Fallocate":    fs.Fallocate(nil, &fuse.FallocateIn{}),
		"Access(W_OK)": fs.Access(nil, &fuse.AccessIn{InHeader: fuse.InHeader{NodeId: FileID}, Mask: 2}),
	} {
		if st != fuse.EROFS {
			t.Errorf("%s = %v, want EROFS", name, st)
		}
	}
	if _, st := fs.Write(nil, &fuse.WriteIn{}, []byte("x")); st != fuse.EROFS {
		t.Errorf("Write = %v, want EROFS", st)
	}
	if _, st := fs.Writev(nil, &fuse.WriteIn{}, [][]byte{[]byte("x")}); st != fuse.EROFS {
		t.Errorf("Writev = %v, want EROFS", st)
	}
	if _, st := fs.CopyFileRange(nil, &fuse.CopyFileRangeIn{}); st != fuse.EROFS {
		t.Errorf("CopyFileRange = %v, want EROFS", st)
	}
	if st := fs.Access(nil, &fuse.AccessIn{InHeader: fuse.InHeader{NodeId: FileID}, Mask: 4}); st != fuse.OK {
		t.Errorf("Access(R_OK) = %v, want OK", st)
	}
}

func TestIsMagicMountpoint(t *testing.T) {
	for mp, want := range map[string]bool{
		"/dev/fd/3": true, "/dev/fd/12": true, "/dev/fd/0": false, "/dev/fd/x": false, "/mnt/3": false, "/dev/fd/": false,
	} {
		if got := IsMagicMountpoint(mp); got != want {
			t.Errorf("IsMagicMountpoint(%q) = %t, want %t", mp, got, want)
		}
	}
}
