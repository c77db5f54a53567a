package relayfs

import (
	"sync"
	"time"
)

// spares keeps the backend descriptors of released file handles for a while, for the next OPEN of the same
// path with the same flags. A workload that opens, reads and closes a file again and again then costs the
// backend no OPEN, FLUSH and RELEASE each time, only the first, and the relay's RELEASE never waits for the
// backend's FLUSH (a close(2) of a FUSE file sends one and waits for it: fuse_flush in fs/fuse/file.c).
// A spare is kept for about as long as the kernel may cache the file's attributes (Options.AttrTimeout,
// none when 0): an OPEN within that time sees the file as the kernel already does. Spares open on a root
// that died are never handed out; their close does not wait (the dead connection fails FLUSH at once).
type spares struct {
	keep time.Duration

	mu     sync.Mutex
	idle   map[spareKey][]spare
	n      int
	sweep  *time.Timer // expires spares while there are any
	closed bool
}

type spareKey struct {
	path  string
	flags int
}

type spare struct {
	f     *backendFile
	since time.Time
}

// maxSpares bounds the descriptors kept: a relay serves one volume, whose workloads reopen a few files.
const maxSpares = 64

func newSpares(keep time.Duration) *spares {
	return &spares{keep: keep, idle: map[spareKey][]spare{}}
}

// take returns a spare of path opened with flags on root generation gen, or nil; the caller owns it.
func (s *spares) take(path string, flags int, gen uint64) *backendFile {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := spareKey{path, flags}
	var found *backendFile
	kept := s.idle[k][:0]
	for _, sp := range s.idle[k] {
		switch {
		case sp.f.gen < gen:
			sp.f.release() // opened on a root that died: closing it does not wait
			s.n--
		case sp.f.gen == gen && found == nil:
			found = sp.f
			s.n--
		default: // another one, or opened on a root newer than the caller's (a recovery raced it)
			kept = append(kept, sp)
		}
	}
	s.set(k, kept)
	return found
}

func (s *spares) set(k spareKey, list []spare) {
	if len(list) == 0 {
		delete(s.idle, k)
	} else {
		s.idle[k] = list
	}
}

// put keeps the backend file of released handle h (nil: none) as a spare, or closes it off the caller's
// goroutine: a FUSE worker must not wait for the backend's FLUSH.
func (s *spares) put(h *handle) {
	if h == nil {
		return
	}
	f := h.close()
	if f == nil {
		return
	}
	s.mu.Lock()
	if s.closed || s.keep <= 0 || s.n >= maxSpares {
		s.mu.Unlock()
		go f.release()
		return
	}
	k := spareKey{h.path, h.flags}
	s.idle[k] = append(s.idle[k], spare{f: f, since: time.Now()})
	s.n++
	if s.sweep == nil {
		s.sweep = time.AfterFunc(s.keep, s.expire)
	}
	s.mu.Unlock()
}

// expire closes the spares kept for s.keep or longer and looks again while some are left: a spare lives
// between keep and twice as long.
func (s *spares) expire() {
	now := time.Now()
	var old []*backendFile
	s.mu.Lock()
	for k, list := range s.idle {
		fresh := list[:0]
		for _, sp := range list {
			if now.Sub(sp.since) >= s.keep {
				old = append(old, sp.f)
				s.n--
			} else {
				fresh = append(fresh, sp)
			}
		}
		s.set(k, fresh)
	}
	if s.n > 0 && !s.closed {
		s.sweep.Reset(s.keep)
	} else {
		s.sweep = nil
	}
	s.mu.Unlock()
	for _, f := range old {
		f.release()
	}
}

// closeAll closes every spare and keeps none from now on.
func (s *spares) closeAll() {
	s.mu.Lock()
	all := s.idle
	s.idle, s.n, s.closed = map[spareKey][]spare{}, 0, true
	if s.sweep != nil {
		s.sweep.Stop()
		s.sweep = nil
	}
	s.mu.Unlock()
	for _, list := range all {
		for _, sp := range list {
			sp.f.release()
		}
	}
}
