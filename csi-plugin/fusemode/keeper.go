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
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseconn"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/handover"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
)

// KeeperName is the mode in which no FUSE server runs in the plugin and no connection dies with it: the plugin
// mounts each staging path with a /dev/fuse descriptor of its own (it stays the only privileged part), keeps a
// copy of the descriptor, and hands the connection over a session (package handover) to a keeper
// (`csi-plugin keeper`, unprivileged, in a pod of its own), which keeps another copy and runs the FUSE servers.
// Each of the plugin, the keeper and a server can die and come back while the workloads only wait: see package
// keeper for who repairs what. A restarted plugin re-collects its copies from the keeper (Recollect).
const KeeperName = "keeper"

// ErrNoKeeper is wrapped by Start when no keeper connected in time: the CO should retry later.
var ErrNoKeeper = errors.New("no keeper connected")

// maxReadBytes is the mount's max_read: a READ as large as the servers' max_write (dummyfs).
const maxReadBytes = 128 * 1024

// Recorded is a volume the plugin's records say it staged in keeper mode.
type Recorded struct {
	VolumeID    string
	StagingPath string
	// Init is the connection's handover record as recorded, nil in records without one.
	Init []byte
}

// Holder is a Mode that keeps copies of the connections it mounted, and gets them back from its peers after a
// restart of the plugin.
type Holder interface {
	Mode
	// Recollect tells the holder which volumes the plugin's records say it staged and starts taking
	// connections back: a peer's copy of one of them is adopted once it is proven to be the connection
	// mounted at its staging path; any other is refused. It returns a Server for each recorded volume. Call it
	// once, before Start.
	Recollect(recs []Recorded) (map[string]Server, error)
}

// InitRecorder is a Server that knows its connection's handover record, for the plugin to record it.
type InitRecorder interface {
	InitRecord() []byte
}

// Keeper is the keeper mode.
type Keeper struct {
	opts Options

	mu       sync.Mutex
	ln       *handover.Listener
	conns    map[string]*keptConn // by volume
	sessions []*keeperSession     // connected keepers, oldest first
	changed  chan struct{}        // closed and replaced whenever a session or a connection's state changes
	closed   bool
}

// keptConn is one connection the plugin mounted (or re-collects).
type keptConn struct {
	volume, mountpoint string
	dev                *os.File // the plugin's copy; nil until a keeper hands it back after a restart
	init               []byte   // handover record; nil while its INIT is unanswered
	servedBy           int      // PID (in the keeper's namespace) of the server that answers it, 0 if none
	version            string   // that server's version
	done               chan struct{}
	ended              bool
}

// keeperSession is one connected keeper.
type keeperSession struct {
	conn    *handover.Conn
	version string
	pid     int
	holds   map[string]bool // connections it holds (said hold, or was handed)
}

// NewKeeper returns the keeper mode. It listens on opts.KeeperSocket once Recollect is called.
func NewKeeper(opts Options) (*Keeper, error) {
	if opts.KeeperSocket == "" {
		return nil, errors.New("keeper mode: the keeper socket path is empty")
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 10 * time.Second
	}
	return &Keeper{opts: opts, conns: map[string]*keptConn{}, changed: make(chan struct{})}, nil
}

// Name implements Mode.
func (k *Keeper) Name() string { return KeeperName }

// Recollect implements Holder: it records what to take back and starts listening for keepers.
func (k *Keeper) Recollect(recs []Recorded) (map[string]Server, error) {
	out := map[string]Server{}
	k.mu.Lock()
	for _, r := range recs {
		c := &keptConn{volume: r.VolumeID, mountpoint: r.StagingPath, init: r.Init, done: make(chan struct{})}
		k.conns[r.VolumeID] = c
		out[r.VolumeID] = &keptServer{k: k, c: c}
	}
	k.mu.Unlock()
	// Who may connect: anyone who can reach the socket; the chart mounts its directory only into the
	// keeper's pods, and KeeperUID narrows it down to the keeper's user.
	ln, err := handover.Listen(k.opts.KeeperSocket, 0o666)
	if err != nil {
		return nil, fmt.Errorf("keeper socket: %w", err)
	}
	k.mu.Lock()
	k.ln = ln
	k.mu.Unlock()
	go k.accept(ln)
	klog.InfoS("Waiting for keepers", "socket", k.opts.KeeperSocket, "recorded", len(recs))
	switch limit, err := fuseconn.PauseLimit(); {
	case err != nil:
		klog.ErrorS(err, "Cannot read the kernel's FUSE request timeouts")
	case limit > 0:
		klog.InfoS("The kernel aborts a FUSE connection whose request waits longer than the request timeout: a FUSE server's or keeper's successor must serve within it", "requestTimeout", limit)
	default:
		klog.V(2).InfoS("No FUSE request timeout: a connection waits for its next server as long as a holder keeps it")
	}
	return out, nil
}

// Close stops listening and ends every session. The mounts stay: the keepers keep serving them, and the
// plugin's own copies close with the process.
func (k *Keeper) Close() error {
	k.mu.Lock()
	k.closed = true
	ln, sessions := k.ln, k.sessions
	k.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	for _, s := range sessions {
		_ = s.conn.Close()
	}
	return nil
}

// Start implements Mode: it mounts a new connection at req.Mountpoint, hands it to the newest keeper and
// returns once that keeper's server answers it. Without a keeper within the start timeout, it undoes the
// mount.
func (k *Keeper) Start(ctx context.Context, req Request) (Server, error) {
	dev, err := fuseconn.Open()
	if err != nil {
		return nil, err
	}
	o := fuseconn.MountOptions{Name: dummyFuse, Source: dummyFuse, ReadOnly: true, AllowOther: true, MaxRead: maxReadBytes}
	if err := fuseconn.Mount(dev, req.Mountpoint, o); err != nil {
		dev.Close()
		return nil, err
	}
	c := &keptConn{volume: req.VolumeID, mountpoint: req.Mountpoint, dev: dev, done: make(chan struct{})}
	k.mu.Lock()
	if old := k.conns[req.VolumeID]; old != nil {
		k.forgetLocked(old)
	}
	k.conns[req.VolumeID] = c
	k.mu.Unlock()
	srv := &keptServer{k: k, c: c}
	wctx, cancel := context.WithTimeout(ctx, k.opts.StartTimeout)
	defer cancel()
	if err := k.handToKeeper(wctx, c); err != nil {
		srv.undo()
		return nil, fmt.Errorf("volume %s: %w", req.VolumeID, err)
	}
	if err := mounts.WaitAnswering(wctx, req.Mountpoint, ServedFile, c.done); err != nil {
		srv.undo()
		return nil, err
	}
	klog.V(4).InfoS("FUSE connection served by the keeper", "volumeID", req.VolumeID, "mountpoint", req.Mountpoint, "pid", srv.PID())
	return srv, nil
}

// handToKeeper sends a new connection to the newest keeper and waits until it says a server answers it.
func (k *Keeper) handToKeeper(ctx context.Context, c *keptConn) error {
	for {
		k.mu.Lock()
		changed := k.changed
		served := c.init != nil && c.servedBy != 0
		var s *keeperSession
		if n := len(k.sessions); n > 0 {
			s = k.sessions[n-1]
		}
		sent := s != nil && s.holds[c.volume]
		k.mu.Unlock()
		switch {
		case served:
			return nil
		case s != nil && !sent:
			k.mu.Lock()
			s.holds[c.volume] = true
			k.mu.Unlock()
			if err := s.conn.Send(handover.Msg{Kind: handover.Serve, Volume: c.volume}, c.dev); err != nil {
				s.conn.Close() // its receiver removes the session; the next one gets the connection
			}
		}
		select {
		case <-changed:
		case <-ctx.Done():
			if s == nil {
				return fmt.Errorf("%w to %s within the start timeout: is the keeper running on this node? (%w)", ErrNoKeeper, k.opts.KeeperSocket, ctx.Err())
			}
			return fmt.Errorf("keeper pid %d did not serve the connection in time: %w", s.pid, ctx.Err())
		}
	}
}

// accept takes keeper sessions until the listener is closed.
func (k *Keeper) accept(ln *handover.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			k.mu.Lock()
			closed := k.closed
			k.mu.Unlock()
			if !closed {
				klog.ErrorS(err, "Keeper socket stopped accepting")
			}
			return
		}
		go k.session(c)
	}
}

// helloTimeout bounds how long a new session may take to say hello.
const helloTimeout = 10 * time.Second

// session runs one keeper's session: hello, the connections it holds (re-collected or refused), the ones it
// lacks (handed over), then its reports until it ends.
func (k *Keeper) session(c *handover.Conn) {
	defer c.Close()
	if want := k.opts.KeeperUID; want >= 0 {
		if uid, err := c.PeerUID(); err != nil || uid != want {
			klog.ErrorS(err, "Refusing a keeper session from another user", "uid", uid, "want", want)
			return
		}
	}
	timer := time.AfterFunc(helloTimeout, func() { c.Close() })
	m, f, err := c.Recv()
	timer.Stop()
	if err != nil || m.Kind != handover.Hello {
		if f != nil {
			f.Close()
		}
		klog.ErrorS(err, "Keeper session without hello", "got", m.Kind)
		return
	}
	s := &keeperSession{conn: c, version: m.Version, pid: m.PID, holds: map[string]bool{}}
	var adopted, refused []string
	for i := 0; i < m.Holds; i++ {
		h, f, err := c.Recv()
		if err != nil || h.Kind != handover.Hold {
			if f != nil {
				f.Close()
			}
			klog.ErrorS(err, "Keeper session broke off while handing back its connections", "keeperPID", s.pid, "got", h.Kind)
			return
		}
		why := k.takeBack(s, h, f)
		if why != "" {
			refused = append(refused, h.Volume)
			klog.InfoS("Refusing a connection a keeper holds", "volumeID", h.Volume, "keeperPID", s.pid, "reason", why)
			if err := c.Send(handover.Msg{Kind: handover.Drop, Volume: h.Volume, Reason: why}, nil); err != nil {
				return
			}
		} else {
			adopted = append(adopted, h.Volume)
		}
	}
	k.mu.Lock()
	k.sessions = append(k.sessions, s)
	missing := k.missingLocked(s)
	k.notifyLocked()
	k.mu.Unlock()
	klog.InfoS("Keeper connected", "keeperPID", s.pid, "version", s.version, "holds", m.Holds, "adopted", len(adopted), "refused", len(refused), "handing", len(missing))
	for _, c := range missing {
		if err := s.conn.Send(handover.Msg{Kind: handover.Serve, Volume: c.volume, Init: c.init}, c.dev); err != nil {
			klog.ErrorS(err, "Handing a connection to the keeper", "volumeID", c.volume, "keeperPID", s.pid)
			break
		}
	}
	err = k.reports(s)
	k.mu.Lock()
	for i, x := range k.sessions {
		if x == s {
			k.sessions = append(k.sessions[:i], k.sessions[i+1:]...)
			break
		}
	}
	for _, cn := range k.conns {
		if cn.servedBy != 0 && s.holds[cn.volume] {
			cn.servedBy = 0 // unknown until another keeper reports
		}
	}
	devs := k.devsLocked()
	k.notifyLocked()
	k.mu.Unlock()
	// The requests its servers had read and not answered stay stuck until someone asks the kernel to queue
	// them again: another keeper's servers answer them at once, the next keeper's when it takes over.
	for _, d := range devs {
		_, _ = fuseconn.Resend(int(d.Fd()))
	}
	klog.InfoS("Keeper session ended; the connections stay mounted, held by the plugin", "keeperPID", s.pid, "reason", err, "connections", len(devs))
}

// takeBack handles a connection a keeper holds; it returns why it is refused, "" if it is the plugin's.
func (k *Keeper) takeBack(s *keeperSession, h handover.Msg, f *os.File) string {
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	k.mu.Lock()
	c := k.conns[h.Volume]
	k.mu.Unlock()
	if c == nil {
		return "the plugin has no record of this volume"
	}
	id, err := fuseconn.ID(int(f.Fd()))
	if err != nil {
		return fmt.Sprintf("cannot tell which connection the descriptor is: %v", err)
	}
	top, err := mounts.Top(c.mountpoint)
	if err != nil || top == nil || top.Major != 0 || uint32(top.Minor) != id {
		return fmt.Sprintf("connection %d is not the one mounted at the staging path %s (%v)", id, c.mountpoint, describeTop(top, err))
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	s.holds[h.Volume] = true
	if c.dev != nil {
		return "" // the plugin holds it already
	}
	if c.init != nil && len(h.Init) > 0 && !bytes.Equal(c.init, h.Init) {
		return "its handover record differs from the one the plugin recorded"
	}
	c.dev, f = f, nil // adopted: kept open
	if c.init == nil {
		c.init = h.Init
	}
	klog.V(2).InfoS("Re-collected a FUSE connection from the keeper", "volumeID", c.volume, "connection", id, "keeperPID", s.pid)
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

// missingLocked returns the connections s does not hold that can be handed to it: initialised ones (it takes
// them over); a new one goes to one keeper only, by Start.
func (k *Keeper) missingLocked(s *keeperSession) []*keptConn {
	var out []*keptConn
	for _, c := range k.conns {
		if c.dev != nil && c.init != nil && !c.ended && !s.holds[c.volume] {
			s.holds[c.volume] = true
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].volume < out[j].volume })
	return out
}

// reports handles a keeper's messages until its session ends.
func (k *Keeper) reports(s *keeperSession) error {
	for {
		m, f, err := s.conn.Recv()
		if err != nil {
			return err
		}
		if f != nil {
			f.Close() // only Hold carries a descriptor, and only right after hello
		}
		k.mu.Lock()
		c := k.conns[m.Volume]
		switch {
		case c == nil:
		case m.Kind == handover.Served:
			if c.init == nil {
				c.init = m.Init
			} else if !bytes.Equal(c.init, m.Init) {
				klog.ErrorS(nil, "A keeper's server reports another handover record than recorded", "volumeID", m.Volume, "keeperPID", s.pid)
			}
			c.servedBy, c.version = m.PID, m.Version
			klog.V(2).InfoS("FUSE connection served", "volumeID", m.Volume, "serverPID", m.PID, "version", m.Version, "keeperPID", s.pid)
			// Every other keeper takes an initialised connection over too: any of them can serve it next.
			for _, o := range k.sessions {
				if o != s && !o.holds[c.volume] && c.dev != nil {
					o.holds[c.volume] = true
					go func(o *keeperSession, c *keptConn, init []byte) {
						_ = o.conn.Send(handover.Msg{Kind: handover.Serve, Volume: c.volume, Init: init}, c.dev)
					}(o, c, c.init)
				}
			}
		case m.Kind == handover.Ended:
			c.servedBy = 0
			if m.Reason == "unmounted" {
				c.ended = true
				closeOnce(c.done)
			}
			klog.V(2).InfoS("A keeper's server stopped serving a connection", "volumeID", m.Volume, "keeperPID", s.pid, "reason", m.Reason)
		}
		k.notifyLocked()
		k.mu.Unlock()
	}
}

// devsLocked returns the plugin's copies.
func (k *Keeper) devsLocked() []*os.File {
	var out []*os.File
	for _, c := range k.conns {
		if c.dev != nil {
			out = append(out, c.dev)
		}
	}
	return out
}

// notifyLocked wakes everyone waiting for a change.
func (k *Keeper) notifyLocked() {
	close(k.changed)
	k.changed = make(chan struct{})
}

// forgetLocked drops the plugin's copy of c and tells every keeper to drop theirs.
func (k *Keeper) forgetLocked(c *keptConn) {
	if k.conns[c.volume] == c {
		delete(k.conns, c.volume)
	}
	if c.dev != nil {
		c.dev.Close()
		c.dev = nil
	}
	c.ended = true
	closeOnce(c.done)
	for _, s := range k.sessions {
		if s.holds[c.volume] {
			delete(s.holds, c.volume)
			go func(s *keeperSession) { _ = s.conn.Send(handover.Msg{Kind: handover.Stop, Volume: c.volume}, nil) }(s)
		}
	}
	k.notifyLocked()
}

func closeOnce(ch chan struct{}) {
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// keptServer is the Server of a connection in keeper mode.
type keptServer struct {
	k *Keeper
	c *keptConn
}

// PID is the serving process as the keeper sees it (its PID namespace), 0 while none.
func (s *keptServer) PID() int {
	s.k.mu.Lock()
	defer s.k.mu.Unlock()
	return s.c.servedBy
}

// Done is closed once the connection is over (unmounted, or stopped).
func (s *keptServer) Done() <-chan struct{} { return s.c.done }

// InitRecord implements InitRecorder.
func (s *keptServer) InitRecord() []byte {
	s.k.mu.Lock()
	defer s.k.mu.Unlock()
	return s.c.init
}

// Stop ends the connection's life with the plugin and the keepers: every copy is dropped. The caller unmounts
// (normally first: the keeper's server then ends on its own).
func (s *keptServer) Stop(context.Context) error {
	s.k.mu.Lock()
	defer s.k.mu.Unlock()
	s.k.forgetLocked(s.c)
	return nil
}

// undo gives up a connection whose start failed: the mount goes, then every copy.
func (s *keptServer) undo() {
	_ = unix.Unmount(s.c.mountpoint, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
	_ = s.Stop(context.Background())
}
