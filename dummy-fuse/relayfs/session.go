package relayfs

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Sessions relays every connection of a keeper's session server (dummyfs.ServeSessionWith) to its own volume's
// backend: the root arrives as a descriptor (dummyfs.SessionFS.Backend), the node table is a file per volume in
// a directory of the keeper's that outlives the server and the keeper, so that a successor loads it.
type Sessions struct {
	dir  string
	base Options

	mu    sync.Mutex
	roots map[string]*Roots // by volume
}

// NewSessions relays with base's settings, journaling node tables in dir.
func NewSessions(dir string, base Options) (*Sessions, error) {
	if dir == "" || !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("the node table directory must be an absolute path, got %q", dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("node table directory: %w", err)
	}
	return &Sessions{dir: dir, base: base, roots: map[string]*Roots{}}, nil
}

// rootsOf returns volume's Roots, made on first use.
func (s *Sessions) rootsOf(volume string) *Roots {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.roots[volume]
	if r == nil {
		r = NewRoots()
		s.roots[volume] = r
	}
	return r
}

// Backend implements dummyfs.SessionFS: f becomes volume's newest root.
func (s *Sessions) Backend(volume string, f *os.File) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	f.Close()
	if err != nil {
		return
	}
	s.rootsOf(volume).Set(fd)
}

// NodeTable is the node table file of volume in dir: a hash of its ID, which may hold any character.
func NodeTable(dir, volume string) string {
	sum := sha256.Sum256([]byte(volume))
	return filepath.Join(dir, hex.EncodeToString(sum[:12])+".nodes")
}

// FS implements dummyfs.SessionFS. A fresh connection starts a new node table: a predecessor's would give IDs
// this connection's kernel never handed out.
func (s *Sessions) FS(volume string, fresh bool) (fuse.RawFileSystem, func(), error) {
	table := NodeTable(s.dir, volume)
	o := s.base
	o.Backend, o.Roots, o.NodeTable = "", s.rootsOf(volume), table
	if o.Writable {
		o.SpillDir = filepath.Join(o.SpillDir, strings.TrimSuffix(filepath.Base(table), ".nodes"))
	}
	if fresh {
		if err := os.Remove(table); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, nil, err
		}
		if o.Writable { // a predecessor's journals belong to handles of another connection
			if err := os.RemoveAll(o.SpillDir); err != nil {
				return nil, nil, err
			}
		}
	}
	fs, err := Open(o)
	if err != nil {
		return nil, nil, fmt.Errorf("relay of volume %s: %w", volume, err)
	}
	return fs, func() { _ = fs.Close() }, nil
}
