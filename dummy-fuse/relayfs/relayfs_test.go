package relayfs

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// tree makes a backend directory: a file, a directory with a file, a symlink, and a symlink to a directory
// outside the tree.
func tree(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	outside := t.TempDir()
	for path, content := range map[string]string{"file": "Hello world!\n", "sub/deep": "deep\n"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, path)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, path), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("sub/deep", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "out")); err != nil {
		t.Fatal(err)
	}
	return dir
}

func newFS(t *testing.T, opts Options) *FS {
	t.Helper()
	fs, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Close() })
	return fs
}

func lookup(t *testing.T, fs *FS, parent uint64, name string) (fuse.EntryOut, fuse.Status) {
	t.Helper()
	var out fuse.EntryOut
	st := fs.Lookup(nil, &fuse.InHeader{NodeId: parent}, name, &out)
	return out, st
}

func mustLookup(t *testing.T, fs *FS, parent uint64, name string) uint64 {
	t.Helper()
	out, st := lookup(t, fs, parent, name)
	if st != fuse.OK {
		t.Fatalf("lookup %q in node %d: %v", name, parent, st)
	}
	return out.NodeId
}

func read(t *testing.T, fs *FS, node, fh uint64) string {
	t.Helper()
	buf := make([]byte, 4096)
	res, st := fs.Read(nil, &fuse.ReadIn{InHeader: fuse.InHeader{NodeId: node}, Fh: fh, Size: uint32(len(buf))}, buf)
	if st != fuse.OK {
		t.Fatalf("read node %d handle %#x: %v", node, fh, st)
	}
	b, _ := res.Bytes(buf)
	return string(b)
}

// TestRelaysTheTree: what the relay answers for each kind of node, from a plain directory as backend.
func TestRelaysTheTree(t *testing.T) {
	fs := newFS(t, Options{Backend: tree(t)})
	file := mustLookup(t, fs, fuse.FUSE_ROOT_ID, "file")
	sub := mustLookup(t, fs, fuse.FUSE_ROOT_ID, "sub")
	deep := mustLookup(t, fs, sub, "deep")
	if ids := map[uint64]bool{fuse.FUSE_ROOT_ID: true, file: true, sub: true, deep: true}; len(ids) != 4 {
		t.Fatalf("node IDs not distinct: root, file %d, sub %d, deep %d", file, sub, deep)
	}
	if again := mustLookup(t, fs, fuse.FUSE_ROOT_ID, "file"); again != file {
		t.Errorf("a second lookup of file gave node %d, the first %d", again, file)
	}

	var attr fuse.AttrOut
	if st := fs.GetAttr(nil, &fuse.GetAttrIn{InHeader: fuse.InHeader{NodeId: file}}, &attr); st != fuse.OK {
		t.Fatal(st)
	}
	if attr.Size != 13 || attr.Mode&syscall.S_IFMT != syscall.S_IFREG || attr.Ino != file {
		t.Errorf("attributes of file: size %d mode %o ino %d; want 13, a regular file, ino %d", attr.Size, attr.Mode, attr.Ino, file)
	}

	var open fuse.OpenOut
	if st := fs.Open(nil, &fuse.OpenIn{InHeader: fuse.InHeader{NodeId: deep}, Flags: syscall.O_RDONLY}, &open); st != fuse.OK {
		t.Fatal(st)
	}
	if got := read(t, fs, deep, open.Fh); got != "deep\n" {
		t.Errorf("read %q", got)
	}
	fs.Release(nil, &fuse.ReleaseIn{InHeader: fuse.InHeader{NodeId: deep}, Fh: open.Fh})
	for _, flags := range []uint32{syscall.O_WRONLY, syscall.O_RDWR, syscall.O_RDONLY | syscall.O_TRUNC} {
		if st := fs.Open(nil, &fuse.OpenIn{InHeader: fuse.InHeader{NodeId: file}, Flags: flags}, &open); st != fuse.EROFS {
			t.Errorf("open with flags %#o: %v, want EROFS", flags, st)
		}
	}

	link := mustLookup(t, fs, fuse.FUSE_ROOT_ID, "link")
	if target, st := fs.Readlink(nil, &fuse.InHeader{NodeId: link}); st != fuse.OK || string(target) != "sub/deep" {
		t.Errorf("readlink: %q, %v", target, st)
	}
	// A symlink is never followed by the relay (the kernel resolves it): a path through one is refused, so a
	// backend's link cannot lead the relay out of the backend.
	out := mustLookup(t, fs, fuse.FUSE_ROOT_ID, "out")
	if _, st := lookup(t, fs, out, "secret"); st != fuse.Status(syscall.ELOOP) {
		t.Errorf("lookup through a symlink: %v, want ELOOP", st)
	}
	for _, name := range []string{"..", ".", "a/b", "missing"} {
		if _, st := lookup(t, fs, fuse.FUSE_ROOT_ID, name); st != fuse.ENOENT {
			t.Errorf("lookup %q: %v, want ENOENT", name, st)
		}
	}
	if _, st := lookup(t, fs, 999, "file"); st != fuse.Status(syscall.ESTALE) {
		t.Errorf("lookup in an unknown node: %v, want ESTALE", st)
	}

	var sfs fuse.StatfsOut
	if st := fs.StatFs(nil, &fuse.InHeader{NodeId: fuse.FUSE_ROOT_ID}, &sfs); st != fuse.OK || sfs.Bsize == 0 {
		t.Errorf("statfs: %v, %+v", st, sfs)
	}
	if st := fs.Mkdir(nil, &fuse.MkdirIn{InHeader: fuse.InHeader{NodeId: fuse.FUSE_ROOT_ID}}, "x", &fuse.EntryOut{}); st != fuse.EROFS {
		t.Errorf("mkdir: %v, want EROFS", st)
	}
}

// TestReadDirPlus lists the root with attributes and node IDs, and in pages by offset.
func TestReadDirPlus(t *testing.T) {
	fs := newFS(t, Options{Backend: tree(t)})
	var open fuse.OpenOut
	if st := fs.OpenDir(nil, &fuse.OpenIn{InHeader: fuse.InHeader{NodeId: fuse.FUSE_ROOT_ID}}, &open); st != fuse.OK {
		t.Fatal(st)
	}
	names := func(plus bool, offset uint64) []string {
		buf := make([]byte, 4096)
		in := &fuse.ReadIn{InHeader: fuse.InHeader{NodeId: fuse.FUSE_ROOT_ID}, Fh: open.Fh, Offset: offset, Size: uint32(len(buf))}
		list := fuse.NewDirEntryList(buf, offset)
		var st fuse.Status
		if plus {
			st = fs.ReadDirPlus(nil, in, list)
		} else {
			st = fs.ReadDir(nil, in, list)
		}
		if st != fuse.OK {
			t.Fatal(st)
		}
		return parseDirents(t, list.Bytes(), plus)
	}
	got := names(true, 0)
	if strings.Join(got, " ") != ". .. file link out sub" {
		t.Errorf("readdirplus: %q", got)
	}
	if got := names(false, 3); strings.Join(got, " ") != "link out sub" {
		t.Errorf("readdir from offset 3: %q", got)
	}
	// Each entry readdirplus described is a node the kernel holds: a lookup gives the same ID.
	id, ok := fs.nodes.known("file")
	if !ok || mustLookup(t, fs, fuse.FUSE_ROOT_ID, "file") != id {
		t.Errorf("readdirplus did not hand out the node a lookup finds (%d, %v)", id, ok)
	}
	fs.ReleaseDir(&fuse.ReleaseIn{Fh: open.Fh})
}

// parseDirents returns the names in a READDIR(PLUS) reply (struct fuse_direntplus: a fuse_entry_out of 128
// bytes before each fuse_dirent; fuse_dirent: ino, off, namelen, type, name padded to 8 bytes).
func parseDirents(t *testing.T, b []byte, plus bool) []string {
	t.Helper()
	var names []string
	for len(b) > 0 {
		if plus {
			b = b[128:]
		}
		n := int(uint32(b[16]) | uint32(b[17])<<8 | uint32(b[18])<<16 | uint32(b[19])<<24)
		names = append(names, string(b[24:24+n]))
		b = b[(24+n+7)&^7:]
	}
	return names
}

// TestNodeTableSurvivesTheRelay: a successor that loads the node table its predecessor wrote understands
// every node ID the kernel holds, and a handle it never handed out (the predecessor's) reads by the node
// and the flags of the READ; forgotten nodes are gone, and new IDs follow the old ones.
func TestNodeTableSurvivesTheRelay(t *testing.T) {
	dir := tree(t)
	table := filepath.Join(t.TempDir(), "nodes")
	first := newFS(t, Options{Backend: dir, NodeTable: table})
	sub := mustLookup(t, first, fuse.FUSE_ROOT_ID, "sub")
	deep := mustLookup(t, first, sub, "deep")
	file := mustLookup(t, first, fuse.FUSE_ROOT_ID, "file")
	mustLookup(t, first, fuse.FUSE_ROOT_ID, "file")
	link := mustLookup(t, first, fuse.FUSE_ROOT_ID, "link")
	first.Forget(file, 1) // one of two lookups: file stays
	first.Forget(link, 1) // gone
	var open fuse.OpenOut
	if st := first.Open(nil, &fuse.OpenIn{InHeader: fuse.InHeader{NodeId: deep}, Flags: syscall.O_RDONLY}, &open); st != fuse.OK {
		t.Fatal(st)
	}
	first.Close()

	succ := newFS(t, Options{Backend: dir, NodeTable: table})
	for id, want := range map[uint64]string{sub: "sub", deep: "sub/deep", file: "file"} {
		if got, ok := succ.nodes.path(id); !ok || got != want {
			t.Errorf("successor: node %d is %q (%v), want %q", id, got, ok, want)
		}
	}
	if _, ok := succ.nodes.path(link); ok {
		t.Errorf("successor knows node %d, which the kernel forgot", link)
	}
	if got := read(t, succ, deep, open.Fh); got != "deep\n" {
		t.Errorf("successor read through the predecessor's handle: %q", got)
	}
	if next := mustLookup(t, succ, fuse.FUSE_ROOT_ID, "link"); next <= max(sub, deep, file, link) {
		t.Errorf("successor handed out node %d, not after its predecessor's", next)
	}
	// A restored node's lookup count is unknown: a FORGET must not drop it.
	succ.Forget(file, 1)
	if _, ok := succ.nodes.path(file); !ok {
		t.Error("successor dropped a restored node on FORGET")
	}
}

// TestNodeTableRefusesDamage: a table that is not what the relay wrote is refused (serving with a wrong one
// would answer the kernel about other files), except for a last record cut short by a crash.
func TestNodeTableRefusesDamage(t *testing.T) {
	dir := tree(t)
	for name, tc := range map[string]struct {
		content string
		ok      bool
	}{
		"cut last record": {"next 5\n+2 \"file\"\n+3 \"su", true},
		"garbage":         {"next 5\nhello\n", false},
		"root redefined":  {"+1 \"file\"\n", false},
		"escaping path":   {"+2 \"../etc\"\n", false},
		"absolute path":   {"+2 \"/etc\"\n", false},
		"unquoted path":   {"+2 file\n", false},
		"bad backend":     {"backend zz 1\n", false},
	} {
		table := filepath.Join(t.TempDir(), "nodes")
		if err := os.WriteFile(table, []byte(tc.content), 0o600); err != nil {
			t.Fatal(err)
		}
		fs, err := New(Options{Backend: dir, NodeTable: table})
		switch {
		case tc.ok && err != nil:
			t.Errorf("%s: %v", name, err)
		case !tc.ok && err == nil:
			t.Errorf("%s: accepted", name)
		}
		if fs != nil {
			if p, ok := fs.nodes.path(2); tc.ok && (!ok || p != "file") {
				t.Errorf("%s: node 2 is %q", name, p)
			}
			fs.Close()
		}
		if after, _ := os.ReadFile(table); !tc.ok && string(after) != tc.content {
			t.Errorf("%s: the refused table was changed to %q", name, after)
		}
	}
}

// TestSpares: a released file's backend descriptor serves the next open of the same file with the same flags,
// not one with other flags or on a newer root, and is closed once kept for the attribute timeout.
func TestSpares(t *testing.T) {
	const keep = 50 * time.Millisecond
	fs := newFS(t, Options{Backend: tree(t), AttrTimeout: keep})
	file := mustLookup(t, fs, fuse.FUSE_ROOT_ID, "file")
	open := func(flags uint32) (uint64, *backendFile) {
		t.Helper()
		var out fuse.OpenOut
		if st := fs.Open(nil, &fuse.OpenIn{InHeader: fuse.InHeader{NodeId: file}, Flags: flags}, &out); st != fuse.OK {
			t.Fatalf("open: %v", st)
		}
		if got := read(t, fs, file, out.Fh); got != "Hello world!\n" {
			t.Fatalf("read %q", got)
		}
		return out.Fh, fs.handles.get(out.Fh).f
	}
	release := func(fh uint64) { fs.Release(nil, &fuse.ReleaseIn{InHeader: fuse.InHeader{NodeId: file}, Fh: fh}) }

	fh, first := open(syscall.O_RDONLY)
	release(fh)
	fh, again := open(syscall.O_RDONLY)
	if again != first {
		t.Error("the second open did not take the first one's descriptor")
	}
	fh2, other := open(syscall.O_RDONLY) // while the spare is in use: a descriptor of its own
	if other == first {
		t.Error("two open handles share one descriptor")
	}
	release(fh)
	release(fh2)
	if f := fs.spares.take("file", unix.O_RDONLY, first.gen+1); f != nil {
		t.Error("a spare opened on an older root was handed out for a newer one")
	}
	if fs.spares.n != 0 {
		t.Errorf("%d spares left after asking for a newer root: the dead root's ones are closed", fs.spares.n)
	}
	if n := first.refs.Load(); n != 0 {
		t.Errorf("the older root's spare still has %d references: not closed", n)
	}

	// Reads and releases at once, for the race detector; then every spare expires.
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 50 {
				fh, _ := open(syscall.O_RDONLY)
				release(fh)
			}
		})
	}
	wg.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for {
		fs.spares.mu.Lock()
		n := fs.spares.n
		fs.spares.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d spares still kept %s after the last release (attribute timeout %s)", n, 5*time.Second, keep)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSuccessorWaitsForItsKindOfBackend: a relay whose node table says its predecessor served a FUSE mount
// root does not take a plain directory there (the bare directory under a dead server's mount) for the
// backend: it counts the backend as dead, and requests fail with ENOTCONN once the wait is over.
func TestSuccessorWaitsForItsKindOfBackend(t *testing.T) {
	table := filepath.Join(t.TempDir(), "nodes")
	if err := os.WriteFile(table, []byte("backend 65735546 1\nnext 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fs := newFS(t, Options{Backend: tree(t), NodeTable: table, BackendWait: 50 * time.Millisecond})
	if _, st := lookup(t, fs, fuse.FUSE_ROOT_ID, "file"); st != fuse.Status(syscall.ENOTCONN) {
		t.Errorf("lookup on a plain directory where a FUSE mount was: %v, want ENOTCONN", st)
	}
	// A first relay records what it serves.
	table2 := filepath.Join(t.TempDir(), "nodes")
	newFS(t, Options{Backend: tree(t), NodeTable: table2}).Close()
	if b, _ := os.ReadFile(table2); !strings.Contains(string(b), "\nbackend ") {
		t.Errorf("the first relay's table does not record its backend: %q", b)
	}
}
