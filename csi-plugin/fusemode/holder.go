package fusemode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/moby/sys/mountinfo"
	"k8s.io/klog/v2"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fdpass"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseconn"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/handover"
)

// holder keeps the plugin's copies of FUSE connections and hands them, over a session socket (package
// handover), to the processes that connect there to serve them: the keepers of the keeper mode (one holder for
// every volume), or a pod's sidecar in the sidecar mode with KeepFD (a holder per target). It hands every
// initialised connection to every session, a new one to one session only; it re-collects the copies a session
// holds after a restart of the plugin, adopting only those the kernel shows to be the connection mounted where
// the plugin's records put it; and when a session ends it asks the kernel to resend what that session's servers
// had read.
type holder struct {
	socket string // for messages
	// auth decides who may hold a session (nil: anyone who reaches the socket).
	auth *sessionAuth
	// closer closes what sessions send and the sessions themselves, off every request's path.
	closer *fdpass.Closer
	// slots bounds the sessions at once, greeting ones included: the accept loop takes a slot before it
	// accepts, so surplus connections wait in the socket's backlog (bounded by the kernel) and cost nothing.
	slots chan struct{}
	// greeting bounds how long a new session may take to say hello and hand back what it holds.
	greeting time.Duration
	// resend asks the kernel to queue again the requests a session's servers had read (fuseconn.Resend).
	resend func(dev *os.File)
	// backendOf, when set (relay-keeper mode), returns a copy of a volume's backend root (nil: none yet), which
	// a session gets before the connection and again whenever it re-collects it.
	backendOf func(volume string) *os.File
	// exclusive (relay-keeper mode) hands a connection to one session at a time, and to the next one only when
	// that session ends: two relays on one connection would hand out node IDs the other does not know.
	exclusive bool
	// backendEnded and sessionEnded, when set (relay-keeper mode), hear that a session's real server of a
	// volume exited, and that a session ended (with the volumes it held).
	backendEnded func(volume string, s *keeperSession)
	sessionEnded func(s *keeperSession, held []string)
	// ownsAlso, when set (relay-keeper mode), reports whether a FUSE connection the holder does not keep is the
	// plugin's all the same (a volume's backend): see owns.
	ownsAlso func(id uint32) bool

	mu       sync.Mutex
	ln       *handover.Listener
	conns    map[string]*keptConn // by volume
	sessions []*keeperSession     // connected sessions, oldest first
	changed  chan struct{}        // closed and replaced whenever a session or a connection's state changes
	closed   bool
	done     chan struct{} // closed by close
}

// sessionAuth checks a new session: its peer at once (peer), then its hello (hello).
type sessionAuth struct {
	peer  func(*handover.Conn) error
	hello func(handover.Msg) error
}

func newHolder(socket string, auth *sessionAuth, closer *fdpass.Closer, maxSessions int) *holder {
	h := &holder{socket: socket, auth: auth, closer: closer, slots: make(chan struct{}, maxSessions), greeting: helloTimeout,
		resend: func(dev *os.File) { _, _ = fuseconn.Resend(int(dev.Fd())) },
		conns:  map[string]*keptConn{}, changed: make(chan struct{}), done: make(chan struct{})}
	closer.Own(h.owns)
	return h
}

// owns reports whether FUSE connection id is one the plugin mounted for this holder (a connection it keeps,
// or ownsAlso's): the closer of what sessions send ends such a connection before closing one of its files
// (fdpass.Closer), whoever holds it.
func (h *holder) owns(id uint32) bool {
	h.mu.Lock()
	for _, c := range h.conns {
		if c.id == id {
			h.mu.Unlock()
			return true
		}
	}
	also := h.ownsAlso
	h.mu.Unlock()
	return also != nil && also(id)
}

// serve starts taking sessions on ln.
func (h *holder) serve(ln *handover.Listener) {
	ln.CloseVia(h.closer)
	h.mu.Lock()
	h.ln = ln
	h.mu.Unlock()
	go h.accept(ln)
}

// expect records a connection to take back from a session after a restart: its mountpoint and handover record
// as recorded.
func (h *holder) expect(volume, mountpoint string, init []byte) *keptConn {
	c := &keptConn{volume: volume, mountpoint: mountpoint, init: init, done: make(chan struct{})}
	h.mu.Lock()
	h.conns[volume] = c
	h.mu.Unlock()
	return c
}

// add holds dev, a new connection mounted at mountpoint, replacing any earlier connection of volume (which is
// dropped everywhere), and hands it to a session: the newest connected, else the next to connect.
func (h *holder) add(volume, mountpoint string, dev *os.File) *keptConn {
	id, _ := fuseconn.ID(int(dev.Fd())) // 0 on a kernel that does not tell: then it is never aborted
	c := &keptConn{volume: volume, mountpoint: mountpoint, dev: dev, id: id, done: make(chan struct{})}
	h.mu.Lock()
	if old := h.conns[volume]; old != nil {
		h.forgetLocked(old)
	}
	h.conns[volume] = c
	s := h.pickLocked()
	if s != nil {
		s.holds[volume] = true
		s.handed[volume] = true
	}
	h.mu.Unlock()
	if s != nil {
		h.sendBackend(s, volume)
		if err := s.conn.Send(handover.Msg{Kind: handover.Serve, Volume: volume}, dev); err != nil {
			go s.conn.Close() // its receiver removes the session; the next one gets the connection
		}
	}
	return c
}

// pickLocked chooses the session that serves a new connection: the newest of those that serve what they are
// handed, else the newest that has not failed to. A session that never serves (a hung or hostile keeper) is
// then only chosen while no other is there, and never again once a connection handed to it went unserved.
func (h *holder) pickLocked() *keeperSession {
	var fallback *keeperSession
	for i := len(h.sessions) - 1; i >= 0; i-- {
		s := h.sessions[i]
		switch {
		case s.failed:
		case s.proven:
			return s
		case fallback == nil:
			fallback = s
		}
	}
	return fallback
}

// close stops taking sessions and ends every one; the plugin's copies are closed only by forget.
func (h *holder) close() {
	h.mu.Lock()
	if !h.closed {
		close(h.done)
	}
	h.closed = true
	ln, sessions := h.ln, h.sessions
	h.mu.Unlock()
	// Closing sockets a peer could have queued slow descriptors on is the Closer's, which may make one wait:
	// not the caller (a CSI call, the plugin's exit).
	go func() {
		if ln != nil {
			_ = ln.Close()
		}
		for _, s := range sessions {
			_ = s.conn.Close()
		}
	}()
}

// drainWait bounds how long the plugin's exit waits for the closes of what sessions sent (drain): the plugin must
// be gone within seconds of SIGTERM, whatever a peer sent.
const drainWait = 3 * time.Second

// drain, at the plugin's exit, ends the closes of descriptors the sessions sent that wait for a FUSE server of a
// connection the plugin holds (fdpass.Closer.Drain aborts it), and waits for them until ctx ends.
func (h *holder) drain(ctx context.Context) {
	if err := h.closer.Drain(ctx); err != nil {
		klog.ErrorS(err, "Exiting with descriptors a session sent still being closed: the process ends only once those servers answer", "socket", h.socket)
	}
}

// drainAll drains every holder of hs at once, within drainWait.
func drainAll(hs []*holder) {
	ctx, cancel := context.WithTimeout(context.Background(), drainWait)
	defer cancel()
	var wg sync.WaitGroup
	for _, h := range hs {
		wg.Go(func() { h.drain(ctx) })
	}
	wg.Wait()
}

// forget drops the plugin's copy of c and tells every session to drop theirs.
func (h *holder) forget(c *keptConn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.forgetLocked(c)
}

// served reports whether a server answers c, and which (PID in its session's namespace).
func (h *holder) served(c *keptConn) (bool, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return c.init != nil && c.servedBy() != 0, c.servedBy()
}

// initRecord returns c's handover record.
func (h *holder) initRecord(c *keptConn) []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	return c.init
}

// keptConn is one connection the plugin mounted (or re-collects).
type keptConn struct {
	volume, mountpoint string
	dev                *os.File // the plugin's copy; nil until a keeper hands it back after a restart
	id                 uint32   // dev's connection number (fuseconn.ID), 0 while unknown
	init               []byte   // handover record; nil while its INIT is unanswered
	// servers are the PIDs (in each session's namespace) of the servers that answer it, by the session that
	// reported them; version is the last one's version.
	servers map[*keeperSession]int
	version string
	// unservedSince is when it was last left without a server (zero once a server has answered it for
	// stableServe), servedAt when a server last took it; see watchUnserved.
	unservedSince, servedAt time.Time
	done                    chan struct{}
	ended                   bool
}

// servedBy is the PID of a server that answers c (one of them when several do), 0 if none.
func (c *keptConn) servedBy() int {
	pid := 0
	for _, p := range c.servers {
		pid = max(pid, p)
	}
	return pid
}

// setServed records that session s's server pid answers c (pid 0: s has none any more); when that leaves c
// without a server, it is unserved from now on.
func (c *keptConn) setServed(s *keeperSession, pid int, now time.Time) {
	was := len(c.servers) > 0
	if pid == 0 {
		delete(c.servers, s)
	} else {
		if c.servers == nil {
			c.servers = map[*keeperSession]int{}
		}
		c.servers[s] = pid
	}
	switch is := len(c.servers) > 0; {
	case is && !was:
		c.servedAt = now
	case !is && c.unservedSince.IsZero():
		c.unservedSince = now
	}
}

// keeperSession is one connected keeper (or sidecar).
type keeperSession struct {
	conn    *handover.Conn
	role    string // as it said hello: "keeper", "sidecar"
	version string
	pid     int
	holds   map[string]bool // connections it holds (said hold, or was handed)
	handed  map[string]bool // new connections handed to it to answer their INIT
	proven  bool            // it reported a server for a connection handed to it
	failed  bool            // a new connection handed to it went unserved within the start timeout
}

// waitServed waits until a server answers c.
func (h *holder) waitServed(ctx context.Context, c *keptConn) error {
	for {
		h.mu.Lock()
		changed := h.changed
		served := c.init != nil && c.servedBy() != 0
		var s *keeperSession
		for _, x := range h.sessions {
			if x.handed[c.volume] {
				s = x
			}
		}
		h.mu.Unlock()
		if served {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			if s == nil {
				return fmt.Errorf("%w to %s in time: is the keeper running on this node? (%w)", ErrNoKeeper, h.socket, ctx.Err())
			}
			h.mu.Lock()
			s.failed = true // the next new connection goes to another session, if there is one
			h.mu.Unlock()
			return notServedError{fmt.Errorf("the %s (pid %d) did not serve the connection in time: %w", s.role, s.pid, ctx.Err())}
		}
	}
}

// accept takes sessions until the listener is closed, at most cap(h.slots) at once. A failure to accept (no
// descriptor left: EMFILE) is waited out with a growing pause, as net/http's Server does, never the end.
func (h *holder) accept(ln *handover.Listener) {
	var pause time.Duration
	for {
		select {
		case h.slots <- struct{}{}:
		case <-h.done:
			return
		}
		c, err := ln.Accept()
		if err != nil {
			<-h.slots
			select {
			case <-h.done:
				return
			default:
			}
			pause = min(max(2*pause, 5*time.Millisecond), time.Second)
			klog.ErrorS(err, "Accepting a session failed; retrying", "socket", h.socket, "in", pause)
			select {
			case <-time.After(pause):
			case <-h.done:
				return
			}
			continue
		}
		pause = 0
		go func() {
			defer func() { <-h.slots }()
			h.session(c)
		}()
	}
}

// helloTimeout bounds how long a new session may take to say hello and hand back what it holds.
const helloTimeout = 10 * time.Second

// session runs one keeper's session: hello, the connections it holds (re-collected or refused), the ones it
// lacks (handed over), then its reports until it ends.
func (h *holder) session(c *handover.Conn) {
	defer c.Close() // waits while the Closer is full: whoever floods it with slow descriptors waits too
	if h.auth != nil {
		if err := h.auth.peer(c); err != nil {
			klog.ErrorS(err, "Refusing a session", "socket", h.socket)
			return
		}
	}
	c.SetRecvDeadline(time.Now().Add(h.greeting))
	// Only the holds that follow an accepted hello carry descriptors: until then, and after them, whatever a
	// peer attaches is dropped unopened by the kernel (a file it sent, closed here, could wait for a FUSE server).
	c.DropDescriptors(true)
	m, f, err := c.Recv()
	if err != nil || m.Kind != handover.Hello {
		if f != nil {
			c.Discard(f)
		}
		klog.ErrorS(err, "Session without hello", "socket", h.socket, "got", m.Kind)
		return
	}
	if h.auth != nil {
		if err := h.auth.hello(m); err != nil {
			klog.ErrorS(err, "Refusing a session", "socket", h.socket, "role", clip(m.Role), "pid", m.PID)
			return
		}
	}
	s := &keeperSession{conn: c, role: clip(m.Role), version: clip(m.Version), pid: m.PID, holds: map[string]bool{}, handed: map[string]bool{}}
	c.DropDescriptors(false)
	var adopted, refused []string
	for i := 0; i < m.Holds; i++ {
		hm, f, err := c.Recv()
		if err != nil || hm.Kind != handover.Hold {
			if f != nil {
				c.Discard(f)
			}
			klog.ErrorS(err, "Session broke off while handing back its connections", "role", s.role, "pid", s.pid, "got", hm.Kind)
			return
		}
		why := h.takeBack(s, hm, f)
		if why != "" {
			refused = append(refused, hm.Volume)
			klog.InfoS("Refusing a connection held by the other end", "role", s.role, "volumeID", hm.Volume, "pid", s.pid, "reason", why)
			if err := c.Send(handover.Msg{Kind: handover.Drop, Volume: hm.Volume, Reason: why}, nil); err != nil {
				return
			}
		} else {
			adopted = append(adopted, hm.Volume)
		}
	}
	c.SetRecvDeadline(time.Time{})
	// From now on the protocol has the peer send no descriptor: the kernel refuses any.
	if err := c.RefuseDescriptors(); err != nil && !errors.Is(err, fdpass.ErrRightsUnsupported) {
		klog.ErrorS(err, "Making the session refuse descriptors", "role", s.role, "pid", s.pid)
	}
	h.mu.Lock()
	h.sessions = append(h.sessions, s)
	missing := h.missingLocked(s)
	h.notifyLocked()
	h.mu.Unlock()
	klog.InfoS("Session connected", "role", s.role, "pid", s.pid, "version", s.version, "holds", m.Holds, "adopted", len(adopted), "refused", len(refused), "handing", len(missing))
	for _, v := range adopted {
		h.sendBackend(s, v)
	}
	for _, c := range missing {
		h.sendBackend(s, c.volume)
		if err := s.conn.Send(handover.Msg{Kind: handover.Serve, Volume: c.volume, Init: c.init}, c.dev); err != nil {
			klog.ErrorS(err, "Handing a connection over", "role", s.role, "volumeID", c.volume, "pid", s.pid)
			break
		}
	}
	err = h.reports(s)
	h.mu.Lock()
	for i, x := range h.sessions {
		if x == s {
			h.sessions = append(h.sessions[:i], h.sessions[i+1:]...)
			break
		}
	}
	var devs []*os.File
	var held []string
	for _, cn := range h.conns {
		if !s.holds[cn.volume] {
			continue
		}
		held = append(held, cn.volume)
		cn.setServed(s, 0, time.Now()) // its servers are gone with it (in its pod), or no longer report
		if cn.dev != nil {
			devs = append(devs, cn.dev)
		}
	}
	h.notifyLocked()
	h.mu.Unlock()
	// The requests its servers had read and not answered stay stuck until someone asks the kernel to queue
	// them again: another keeper's servers answer them at once, the next keeper's when it takes over. Only
	// the connections it held: no other connection had a request in its servers.
	for _, d := range devs {
		h.resend(d)
	}
	klog.InfoS("Session ended; the connections stay mounted, held by the plugin", "role", s.role, "pid", s.pid, "reason", err, "connections", len(devs))
	if h.sessionEnded != nil {
		h.sessionEnded(s, held)
	}
	if h.exclusive {
		h.handToNext()
	}
}

// handToNext hands the connections no session holds to the newest session that serves (exclusive holders:
// the one that held them ended).
func (h *holder) handToNext() {
	h.mu.Lock()
	next := h.pickLocked()
	var missing []*keptConn
	if next != nil {
		missing = h.missingLocked(next)
	}
	h.mu.Unlock()
	for _, c := range missing {
		h.sendBackend(next, c.volume)
		if err := next.conn.Send(handover.Msg{Kind: handover.Serve, Volume: c.volume, Init: c.init}, c.dev); err != nil {
			klog.ErrorS(err, "Handing a connection over", "role", next.role, "volumeID", c.volume, "pid", next.pid)
			return
		}
	}
}

// takeBack handles a connection a keeper holds; it returns why it is refused, "" if it is the plugin's.
func (h *holder) takeBack(s *keeperSession, m handover.Msg, f *os.File) string {
	defer func() {
		if f != nil {
			s.conn.Discard(f)
		}
	}()
	h.mu.Lock()
	c := h.conns[m.Volume]
	h.mu.Unlock()
	if c == nil {
		return "the plugin has no record of this volume"
	}
	id, err := fuseconn.ID(int(f.Fd()))
	if err != nil {
		return fmt.Sprintf("cannot tell which connection the descriptor is: %v", err)
	}
	if top, ok, err := connectionAt(c.mountpoint, id); !ok {
		return fmt.Sprintf("connection %d is not the one mounted at the staging path %s (%v)", id, c.mountpoint, describeTop(top, err))
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	s.holds[m.Volume] = true
	if c.dev == nil && c.init != nil && len(m.Init) > 0 && !bytes.Equal(c.init, m.Init) {
		return "its handover record differs from the one the plugin recorded"
	}
	// A keeper says which of its servers answers each connection it hands back (0: none right now).
	c.setServed(s, m.PID, time.Now())
	if c.dev != nil {
		return "" // the plugin holds it already
	}
	c.dev, c.id, f = f, id, nil // adopted: kept open
	if c.init == nil {
		c.init = m.Init
	}
	klog.V(2).InfoS("Re-collected a FUSE connection", "role", s.role, "volumeID", c.volume, "connection", id, "pid", s.pid)
	return ""
}

func describeTop(top *mountinfo.Info, err error) string {
	switch {
	case err != nil:
		return err.Error()
	case top == nil:
		return "nothing is mounted there"
	}
	return fmt.Sprintf("%s, device %d:%d", top.FSType, top.Major, top.Minor)
}

// missingLocked returns the connections to hand to s: every initialised one it does not hold (it takes them
// over: any connected keeper can serve any connection), and a new one that no session holds yet (one server
// only must answer its INIT).
func (h *holder) missingLocked(s *keeperSession) []*keptConn {
	var out []*keptConn
	for _, c := range h.conns {
		if c.dev == nil || c.ended || s.holds[c.volume] || ((c.init == nil || h.exclusive) && h.heldLocked(c.volume)) {
			continue
		}
		s.holds[c.volume] = true
		if c.init == nil {
			s.handed[c.volume] = true // its server answers the INIT: its report gives the record
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].volume < out[j].volume })
	return out
}

// heldLocked reports whether a session holds the connection of volume.
func (h *holder) heldLocked(volume string) bool {
	for _, s := range h.sessions {
		if s.holds[volume] {
			return true
		}
	}
	return false
}

// reports handles a keeper's messages until its session ends.
func (h *holder) reports(s *keeperSession) error {
	for {
		m, f, err := s.conn.Recv()
		if err != nil {
			return err
		}
		if f != nil {
			s.conn.Discard(f) // only Hold carries a descriptor, and only right after hello
		}
		if m.Kind == handover.BackendEnded {
			if h.backendEnded != nil {
				h.backendEnded(m.Volume, s)
			}
			continue
		}
		h.mu.Lock()
		c := h.conns[m.Volume]
		switch {
		case c == nil:
		case !s.holds[m.Volume]:
			// A session speaks only of the connections it holds: another's report could mark any volume
			// served, or over for good.
			klog.ErrorS(nil, "Ignoring a report about a connection the session does not hold", "role", s.role, "pid", s.pid, "volumeID", m.Volume, "kind", m.Kind)
		case m.Kind == handover.Served && c.init == nil && !s.handed[m.Volume]:
			// Its record becomes the one every successor replays: only the session that was handed the new
			// connection, whose server answered its INIT, can know it.
			klog.ErrorS(nil, "Ignoring a handover record from a session that was not handed the new connection", "role", s.role, "pid", s.pid, "volumeID", m.Volume)
		case m.Kind == handover.Served:
			if s.handed[m.Volume] {
				s.proven = true
			}
			if c.init == nil {
				c.init = m.Init
			} else if !bytes.Equal(c.init, m.Init) {
				klog.ErrorS(nil, "A server reports another handover record than recorded", "role", s.role, "volumeID", m.Volume, "pid", s.pid)
			}
			c.setServed(s, m.PID, time.Now())
			c.version = m.Version
			klog.V(2).InfoS("FUSE connection served", "role", s.role, "volumeID", m.Volume, "serverPID", m.PID, "version", m.Version, "pid", s.pid)
			// Every other keeper takes an initialised connection over too: any of them can serve it next.
			for _, o := range h.sessions {
				if o != s && !o.holds[c.volume] && c.dev != nil && !h.exclusive {
					o.holds[c.volume] = true
					go func(o *keeperSession, c *keptConn, init []byte, dev *os.File) {
						h.sendBackend(o, c.volume)
						_ = o.conn.Send(handover.Msg{Kind: handover.Serve, Volume: c.volume, Init: init}, dev)
					}(o, c, c.init, c.dev)
				}
			}
		case m.Kind == handover.Ended:
			c.setServed(s, 0, time.Now())
			if m.Reason == handover.ReasonUnmounted {
				c.ended = true
				closeOnce(c.done)
			}
			klog.V(2).InfoS("A server stopped serving a connection", "role", s.role, "volumeID", m.Volume, "pid", s.pid, "reason", m.Reason)
		}
		h.notifyLocked()
		h.mu.Unlock()
	}
}

// sessionFor returns the session to run volume's real server on: the one that holds the volume's connection,
// else the one a new connection would go to; it waits for one until ctx ends.
func (h *holder) sessionFor(ctx context.Context, volume string) (*keeperSession, error) {
	for {
		h.mu.Lock()
		changed := h.changed
		var s *keeperSession
		for _, x := range h.sessions {
			if x.holds[volume] {
				s = x
			}
		}
		if s == nil {
			s = h.pickLocked()
		}
		h.mu.Unlock()
		if s != nil {
			return s, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w to %s in time to run the real server: is the keeper running on this node? (%w)", ErrNoKeeper, h.socket, ctx.Err())
		}
	}
}

// sendBackend sends s the volume's backend root, when the mode has one (backendOf).
func (h *holder) sendBackend(s *keeperSession, volume string) {
	if h.backendOf == nil {
		return
	}
	if f := h.backendOf(volume); f != nil {
		_ = s.conn.Send(handover.Msg{Kind: handover.Backend, Volume: volume}, f)
		f.Close()
	}
}

// sendBackendToHolders sends every session that holds volume its newest backend root (a new real server).
func (h *holder) sendBackendToHolders(volume string) {
	h.mu.Lock()
	var to []*keeperSession
	for _, s := range h.sessions {
		if s.holds[volume] {
			to = append(to, s)
		}
	}
	h.mu.Unlock()
	for _, s := range to {
		h.sendBackend(s, volume)
	}
}

// notifyLocked wakes everyone waiting for a change.
func (h *holder) notifyLocked() {
	close(h.changed)
	h.changed = make(chan struct{})
}

// forgetLocked drops the plugin's copy of c and tells every keeper to drop theirs.
func (h *holder) forgetLocked(c *keptConn) {
	if h.conns[c.volume] == c {
		delete(h.conns, c.volume)
	}
	if c.dev != nil {
		c.dev.Close()
		c.dev = nil
	}
	c.ended = true
	closeOnce(c.done)
	for _, s := range h.sessions {
		if s.holds[c.volume] {
			delete(s.holds, c.volume)
			go func(s *keeperSession) { _ = s.conn.Send(handover.Msg{Kind: handover.Stop, Volume: c.volume}, nil) }(s)
		}
	}
	h.notifyLocked()
}

func closeOnce(ch chan struct{}) {
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// clip bounds a string a session sent before it goes into a log line.
func clip(s string) string {
	const max = 64
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}

// notServedError is a new connection that the session handed it did not serve in time: like no keeper at all
// (ErrNoKeeper), the CO retries, and the next try goes to another session if there is one.
type notServedError struct{ error }

func (e notServedError) Is(target error) bool { return target == ErrNoKeeper || target == ErrRetry }
func (e notServedError) Unwrap() error        { return e.error }
