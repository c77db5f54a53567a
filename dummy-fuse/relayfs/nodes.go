package relayfs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/atomicfile"
)

// nodes maps the kernel's node IDs to backend paths. IDs are handed out in order and never reused within a
// table's life (a successor starts after the highest ID its predecessor recorded), and every new ID is
// appended to the journal before the kernel hears of it, so a successor that loads the journal understands
// every ID the kernel holds.
type nodes struct {
	mu     sync.Mutex
	byID   map[uint64]*node
	byPath map[string]uint64
	next   uint64
	// journal is the table file opened for appending, nil without one.
	journal *os.File
	// backend is the kind of backend the table's first relay served (zero: not recorded yet): a successor
	// started while the real server is down must not take the bare directory under its dead mount for it.
	backend backendKind
}

// backendKind is what a backend's root must be: a filesystem type and, when the first was one, a mount root.
type backendKind struct {
	fsType    int64
	mountRoot bool
}

type node struct {
	path string // relative to the backend's root; "." for the root
	// lookups is the kernel's lookup count (LOOKUP and READDIRPLUS entries minus FORGET). A node loaded from a
	// predecessor's journal has an unknown count (restored) and stays for the table's life: dropping it on the
	// first FORGET could lose a node a concurrent LOOKUP had just handed out.
	lookups  uint64
	restored bool
}

// Journal records, one a line: "backend TYPE MOUNT" (the first backend's filesystem type in hex, and 1 when
// it was a mount root), "+ID PATH" (PATH as a Go quoted string) when a node is handed out or a rename
// moved it, "-ID" when
// the kernel forgot it, "next ID" for the first ID a successor may hand out. A write(2) of one line to a
// file survives the death of the process that made it (it is in the page cache), which is the crash the
// journal is for; a machine crash ends the FUSE connection too.

// openNodes loads the table at path (empty: no journal, the relay cannot be taken over), rewrites it with the
// live nodes only (atomically) and keeps it open for appending.
func openNodes(path string) (*nodes, error) {
	n := &nodes{byID: map[uint64]*node{}, byPath: map[string]uint64{}, next: fuse.FUSE_ROOT_ID + 1}
	n.add(fuse.FUSE_ROOT_ID, ".", false)
	if path == "" {
		return n, nil
	}
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("node table: %w", err)
	}
	if err := n.load(b); err != nil {
		return nil, fmt.Errorf("node table %s: %w", path, err)
	}
	if err := atomicfile.Write(path, n.compacted(), 0o600); err != nil {
		return nil, fmt.Errorf("node table: %w", err)
	}
	if n.journal, err = os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0); err != nil {
		return nil, fmt.Errorf("node table: %w", err)
	}
	return n, nil
}

// load replays journal records. A last line without its newline is a write the predecessor did not finish
// (its node never reached the kernel) and is ignored; anything else malformed refuses the whole table:
// serving with a wrong table would answer the kernel with other files than it asked for.
func (n *nodes) load(b []byte) error {
	if i := bytes.LastIndexByte(b, '\n'); i+1 < len(b) {
		b = b[:i+1]
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for line := 1; sc.Scan(); line++ {
		if err := n.replay(sc.Text()); err != nil {
			return fmt.Errorf("line %d: %w", line, err)
		}
	}
	return sc.Err()
}

func (n *nodes) replay(rec string) error {
	switch {
	case strings.HasPrefix(rec, "backend "):
		var k backendKind
		var mount int
		if _, err := fmt.Sscanf(rec, "backend %x %d", &k.fsType, &mount); err != nil || k.fsType == 0 || mount > 1 {
			return fmt.Errorf("bad record %q", rec)
		}
		k.mountRoot = mount == 1
		n.backend = k
	case strings.HasPrefix(rec, "next "):
		id, err := strconv.ParseUint(rec[len("next "):], 10, 64)
		if err != nil {
			return fmt.Errorf("bad record %q", rec)
		}
		n.next = max(n.next, id)
	case strings.HasPrefix(rec, "+"):
		idText, quoted, ok := strings.Cut(rec[1:], " ")
		id, err := strconv.ParseUint(idText, 10, 64)
		if !ok || err != nil || id <= fuse.FUSE_ROOT_ID {
			return fmt.Errorf("bad record %q", rec)
		}
		path, err := strconv.Unquote(quoted)
		if err != nil || !validPath(path) {
			return fmt.Errorf("bad path in record %q", rec)
		}
		if old, ok := n.byPath[path]; ok && old != id {
			delete(n.byID, old)
		}
		if nd := n.byID[id]; nd != nil && nd.path != path && n.byPath[nd.path] == id {
			delete(n.byPath, nd.path) // a rename moved the node
		}
		n.add(id, path, true)
		n.next = max(n.next, id+1)
	case strings.HasPrefix(rec, "-"):
		id, err := strconv.ParseUint(rec[1:], 10, 64)
		if err != nil || id <= fuse.FUSE_ROOT_ID {
			return fmt.Errorf("bad record %q", rec)
		}
		if nd := n.byID[id]; nd != nil {
			n.drop(id, nd)
		}
	default:
		return fmt.Errorf("bad record %q", rec)
	}
	return nil
}

// validPath accepts what lookup builds: "name" or "dir/name", no empty, "." or ".." component.
func validPath(p string) bool {
	if p == "" {
		return false
	}
	for _, c := range strings.Split(p, "/") {
		if c == "" || c == "." || c == ".." {
			return false
		}
	}
	return true
}

// compacted is the journal holding only the live nodes.
func (n *nodes) compacted() []byte {
	var b bytes.Buffer
	if n.backend.fsType != 0 {
		b.WriteString(n.backend.record())
	}
	fmt.Fprintf(&b, "next %d\n", n.next)
	for id, nd := range n.byID {
		if id != fuse.FUSE_ROOT_ID {
			fmt.Fprintf(&b, "+%d %s\n", id, strconv.Quote(nd.path))
		}
	}
	return b.Bytes()
}

func (n *nodes) add(id uint64, path string, restored bool) *node {
	nd := &node{path: path, restored: restored}
	n.byID[id] = nd
	n.byPath[path] = id
	return nd
}

// path returns the backend path of node id.
func (n *nodes) path(id uint64) (string, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	nd := n.byID[id]
	if nd == nil {
		return "", false
	}
	return nd.path, true
}

// known returns the node ID of path if the kernel holds one, without counting a reference.
func (n *nodes) known(path string) (uint64, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	id, ok := n.byPath[path]
	return id, ok
}

// lookup counts one more kernel reference to path and returns its node ID, handing out (and journaling) a
// new one for a path the kernel does not know.
func (n *nodes) lookup(path string) (uint64, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if id, ok := n.byPath[path]; ok {
		n.byID[id].lookups++
		return id, nil
	}
	id := n.next
	if err := n.record(fmt.Sprintf("+%d %s\n", id, strconv.Quote(path))); err != nil {
		return 0, err
	}
	n.next++
	n.add(id, path, false).lookups = 1
	return id, nil
}

// forget drops count kernel references to id; a node the kernel no longer references is removed.
func (n *nodes) forget(id, count uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	nd := n.byID[id]
	if nd == nil || id == fuse.FUSE_ROOT_ID || nd.restored {
		return
	}
	if nd.lookups > count {
		nd.lookups -= count
		return
	}
	// A failed record only leaves a stale entry for a successor: harmless, the kernel holds no such ID.
	_ = n.record(fmt.Sprintf("-%d\n", id))
	n.drop(id, nd)
}

// drop removes node id, and its path unless another node has it now (its file was removed and made anew).
func (n *nodes) drop(id uint64, nd *node) {
	if n.byPath[nd.path] == id {
		delete(n.byPath, nd.path)
	}
	delete(n.byID, id)
}

func (k backendKind) record() string {
	mount := 0
	if k.mountRoot {
		mount = 1
	}
	return fmt.Sprintf("backend %x %d\n", k.fsType, mount)
}

// recordBackend journals the kind of the first backend, unless the table has one.
func (n *nodes) recordBackend(k backendKind) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.backend.fsType != 0 || k.fsType == 0 {
		return nil
	}
	n.backend = k
	return n.record(k.record())
}

// rename moves the node of oldPath, and those beneath it, to newPath (the writable relay's RENAME). A node the
// kernel held for newPath is no longer found by its path: the file it stood for was replaced.
func (n *nodes) rename(oldPath, newPath string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.byPath, newPath)
	var moving []string
	for path := range n.byPath {
		if path == oldPath || strings.HasPrefix(path, oldPath+"/") {
			moving = append(moving, path)
		}
	}
	for _, path := range moving {
		id, moved := n.byPath[path], newPath+path[len(oldPath):]
		if err := n.record(fmt.Sprintf("+%d %s\n", id, strconv.Quote(moved))); err != nil {
			return err
		}
		delete(n.byPath, path)
		n.byPath[moved] = id
		n.byID[id].path = moved
	}
	return nil
}

// removed forgets the path of a node whose file was unlinked: a new file of that name gets a new node, while
// the kernel may still hold the old one (an open file) until it forgets it.
func (n *nodes) removed(path string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.byPath, path)
}

// record appends one journal record; n.mu is held.
func (n *nodes) record(rec string) error {
	if n.journal == nil {
		return nil
	}
	if _, err := io.WriteString(n.journal, rec); err != nil {
		return fmt.Errorf("node table: %w", err)
	}
	return nil
}

func (n *nodes) close() error {
	if n.journal == nil {
		return nil
	}
	return n.journal.Close()
}
