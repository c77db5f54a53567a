// Package keeper is `csi-plugin keeper`: the unprivileged process of the plugin's keeper placement that keeps
// a copy of every FUSE connection the plugin mounted and runs the FUSE servers that answer them.
//
// The plugin mounts each volume's connection (it is the only privileged part) and keeps a copy of its
// /dev/fuse descriptor; it hands the connection to the keeper over a session (package handover), and the
// keeper keeps a second copy and hands a third to one of its FUSE servers (dummy-fuse --session, several
// volumes per process). So every connection is held by at least two processes besides its server, and any one
// of the three can die while the mount lives on and its callers only wait:
//   - a server dies: the keeper starts another one and hands it the connections with their handover records;
//     it takes them over (INIT replayed) and asks the kernel to resend what the dead one had read;
//   - the keeper dies (and its servers with it, in its container): the plugin's copies keep the connections;
//     a new keeper connects, gets every connection from the plugin, and its servers take them over;
//   - the plugin dies: the keeper and its servers keep serving; the restarted plugin re-collects its copies
//     from the keeper when it reconnects, after checking that each is the connection of a mount it recorded.
//
// Only the loss of every holder at once (the plugin and the keeper together) ends a connection: the classic
// mount loss.
package keeper

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/contract"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fdpass"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseconn"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/handover"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/spawn"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/version"
)

// Config is the keeper's command line.
type Config struct {
	// PluginSocket is the plugin's keeper session socket.
	PluginSocket string
	// DummyFusePath is the FUSE server executable; ServerArgs are passed to it besides --session.
	DummyFusePath string
	ServerArgs    []string
	// VolumesPerServer bounds the connections one server process answers: one process per volume isolates
	// volumes from each other's crashes, several per process save a Go runtime (about 1 MiB) per volume.
	VolumesPerServer int
	// StatusFile, when set, receives the keeper's state (status.go) after every change.
	StatusFile string
	// SecretFile, when set, holds the per-node secret the plugin asks of a keeper (fusemode.KeeperSecretName
	// beside its socket); it is read at every connection, since a restarted plugin writes a new one.
	SecretFile string
	// RedialInterval is how often the keeper tries to reach the plugin while it cannot (default 100ms).
	RedialInterval time.Duration
	// Role is how it says hello to the plugin: "keeper" (the default), or "sidecar" when a pod's sidecar keeps
	// its volume's connection this way.
	Role string
	// Relay (the plugin's relay-keeper mode) says the servers relay each connection to its backend's root: a
	// connection is handed to a server only once the plugin has handed its root over.
	Relay bool
	// RealServer, when set (the plugin's relay-keeper mode), is the real FUSE server the keeper runs on each
	// backend connection the plugin hands over (backend.go).
	RealServer *fuseserver.Spec
	// HandoffDir is where the keeper makes the fusermount stand-in (fuseserver.Handoff) for a real server that
	// cannot serve /dev/fd/N and asks fusermount for its connection instead (a libfuse2 one); a directory of
	// the keeper's own that outlives nothing it needs.
	HandoffDir string
	// ExitWithServer makes the keeper exit when a FUSE server dies instead of starting another one: a pod's
	// sidecar lives and dies with its FUSE server, as in the sidecar mode without a kept copy, and kubelet's
	// restart of the container is what takes the connection over.
	ExitWithServer bool
}

// Keeper is the running keeper. All its state belongs to the goroutine of Run; everything else talks to it
// through events.
type Keeper struct {
	cfg    Config
	log    io.Writer
	spawn  *spawn.Spawner
	events chan event
	// closer closes what a peer sends that the keeper does not keep (see fdpass.Closer).
	closer *fdpass.Closer

	conns map[string]*conn // by volume
	// roots are the newest backend roots the plugin handed over (relay-keeper mode), by volume: every server
	// that gets the volume gets its root first.
	roots map[string]*os.File
	// backends are the real servers of the relay-keeper mode, by volume; realServer and realArgs run them, with
	// handoff's stand-in when the server asks fusermount for its connection (nil: it serves /dev/fd/N).
	backends   map[string]*backendServer
	realServer fuseserver.Server
	realArgs   []string
	handoff    *fuseserver.Handoff
	servers    []*server
	nextID     int
	plugin     *handover.Conn // the session with the plugin, nil while there is none
	crashes    []time.Time    // recent unexpected server exits, for the restart back-off
	statusErr  error          // the last failure to write the status file
	exitErr    error          // why Run must return (ExitWithServer)
	quit       chan struct{}  // closed when Run returns: nobody receives events any more
}

// conn is one FUSE connection the keeper holds.
type conn struct {
	volume string
	dev    *os.File
	id     uint32 // fuseconn.ID, 0 when unknown
	init   []byte // handover record, nil until its INIT was answered
	server *server
	served bool // server reported that it serves it
}

// event is something that happened outside the loop.
type event struct {
	kind    eventKind
	msg     handover.Msg
	f       *os.File
	srv     *server
	backend *backendServer
	conn    *handover.Conn
	err     error
}

type eventKind int

const (
	pluginConnected eventKind = iota // conn: a new session with the plugin
	pluginMsg                        // msg, f from the plugin's session conn
	pluginGone                       // the session conn ended (err)
	serverMsg                        // msg from srv
	serverGone                       // srv exited (err)
	restartDue                       // time to start servers for unserved connections
	backendGone                      // backend: a real server exited (err)
)

// New checks cfg and returns a keeper that logs to log.
func New(cfg Config, log io.Writer) (*Keeper, error) {
	switch {
	case cfg.PluginSocket == "":
		return nil, errors.New("the plugin's keeper socket is required")
	case cfg.DummyFusePath == "":
		return nil, errors.New("dummy-fuse not found: give its path")
	case cfg.VolumesPerServer < 1:
		return nil, fmt.Errorf("volumes per server must be at least 1, not %d", cfg.VolumesPerServer)
	}
	if st, err := os.Stat(cfg.DummyFusePath); err != nil || !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
		return nil, fmt.Errorf("dummy-fuse %s is not an executable file (%v)", cfg.DummyFusePath, err)
	}
	if cfg.RedialInterval <= 0 {
		cfg.RedialInterval = 100 * time.Millisecond
	}
	if cfg.Role == "" {
		cfg.Role = "keeper"
	}
	var real fuseserver.Server
	var realArgs []string
	var handoff *fuseserver.Handoff
	if cfg.RealServer != nil {
		var err error
		if real, err = fuseserver.New(*cfg.RealServer); err != nil {
			return nil, fmt.Errorf("real server: %w", err)
		}
		if realArgs, handoff, err = passedConnection(real, cfg.HandoffDir); err != nil {
			return nil, fmt.Errorf("real server: %w", err)
		}
	}
	if cfg.StatusFile != "" {
		if err := os.MkdirAll(filepath.Dir(cfg.StatusFile), 0o755); err != nil {
			return nil, fmt.Errorf("status file: %w", err)
		}
	}
	return &Keeper{cfg: cfg, log: log, closer: fdpass.NewCloser(2, 16), realServer: real, realArgs: realArgs, handoff: handoff, events: make(chan event, 64), conns: map[string]*conn{}, roots: map[string]*os.File{}, backends: map[string]*backendServer{}, quit: make(chan struct{})}, nil
}

// Run keeps connections until ctx ends; then it stops its servers (SIGTERM: they exit without unmounting
// anything), closes the session with the plugin, whose copies keep the connections, and returns nil.
func (k *Keeper) Run(ctx context.Context) error {
	k.spawn = spawn.New()
	defer k.spawn.Close()
	defer close(k.quit)
	k.logf("keeper %s pid %d: FUSE servers %s, %d volume(s) per server; plugin at %s", version.Version, os.Getpid(), k.cfg.DummyFusePath, k.cfg.VolumesPerServer, k.cfg.PluginSocket)
	dialCtx, stopDial := context.WithCancel(ctx)
	defer stopDial()
	redial := make(chan struct{}, 1)
	redial <- struct{}{}
	go k.dialLoop(dialCtx, redial)
	k.writeStatus()
	for {
		select {
		case <-ctx.Done():
			k.shutdown()
			return nil
		case e := <-k.events:
			if k.handle(e) {
				select {
				case redial <- struct{}{}:
				default:
				}
			}
			k.writeStatus()
			if k.exitErr != nil {
				k.shutdown()
				return k.exitErr
			}
		}
	}
}

// dialLoop connects to the plugin whenever asked (at start, after a session ended) and hands the session to
// the loop.
func (k *Keeper) dialLoop(ctx context.Context, redial <-chan struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-redial:
		}
		waiting := time.AfterFunc(2*time.Second, func() { k.logf("waiting for the plugin at %s", k.cfg.PluginSocket) })
		c, err := k.dial(ctx)
		waiting.Stop()
		if err != nil {
			return // ctx ended
		}
		k.emit(event{kind: pluginConnected, conn: c})
	}
}

// dial connects to the plugin, until ctx ends. handover.Dial waits out a socket not there yet or not listening;
// any other error (EACCES in the moment between the plugin's bind and its chown of the socket, seen on a real
// node as a keeper that never connected) is tried again here, logged: giving up would leave the keeper serving
// nothing for good.
func (k *Keeper) dial(ctx context.Context) (*handover.Conn, error) {
	for {
		c, err := handover.Dial(ctx, k.cfg.PluginSocket, k.cfg.RedialInterval)
		if err == nil {
			c.CloseVia(k.closer)
		}
		if err == nil || ctx.Err() != nil {
			return c, err
		}
		k.logf("connecting to the plugin: %v; trying again in %s", err, k.cfg.RedialInterval)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(k.cfg.RedialInterval):
		}
	}
}

// emit hands e to the loop; it reports false once the loop is gone.
func (k *Keeper) emit(e event) bool {
	select {
	case k.events <- e:
		return true
	case <-k.quit:
		return false
	}
}

// handle applies one event; it reports whether the plugin must be dialled again.
func (k *Keeper) handle(e event) (redial bool) {
	switch e.kind {
	case pluginConnected:
		return k.pluginConnected(e.conn)
	case pluginMsg:
		if e.conn == k.plugin {
			k.pluginMsg(e.msg, e.f)
		} else if e.f != nil {
			e.f.Close()
		}
	case pluginGone:
		if e.conn == k.plugin {
			k.logf("session with the plugin ended (%v); serving on, the connections are kept here until it is back", e.err)
			k.plugin.Close()
			k.plugin = nil
			return true
		}
	case serverMsg:
		k.serverMsg(e.srv, e.msg)
	case serverGone:
		k.serverGone(e.srv, e.err)
	case restartDue:
		k.serveUnserved()
	case backendGone:
		k.backendGone(e.backend, e.err)
	}
	return false
}

// pluginConnected greets the plugin: hello, then every connection held here, so that a restarted plugin gets
// its copies back; the plugin answers with the connections it has and the keeper lacks.
func (k *Keeper) pluginConnected(c *handover.Conn) bool {
	held := k.sortedConns()
	hello := handover.Msg{Kind: handover.Hello, Role: k.cfg.Role, Version: version.Version, PID: os.Getpid(), Holds: len(held)}
	if k.cfg.SecretFile != "" {
		secret, err := readSecret(k.cfg.SecretFile)
		if err != nil {
			k.logf("the plugin will refuse this session: %v", err)
		}
		hello.Secret = secret
	}
	err := c.Send(hello, nil)
	for _, cn := range held {
		if err != nil {
			break
		}
		// With the PID of the server that answers it (0: none now), so that the plugin knows which connections
		// wait for a server.
		pid := 0
		if cn.server != nil && cn.served {
			pid = cn.server.pid
		}
		err = c.Send(handover.Msg{Kind: handover.Hold, Volume: cn.volume, Init: cn.init, PID: pid}, cn.dev)
	}
	if err != nil {
		k.logf("greeting the plugin failed: %v", err)
		c.Close()
		return true
	}
	k.logf(contract.KeeperConnectedFormat, len(held))
	k.plugin = c
	if k.realServer != nil {
		// A restarted plugin does not know which backends lost their server while it was down: only it can
		// mount new ones.
		for _, cn := range held {
			if k.backends[cn.volume] == nil {
				k.tellPlugin(handover.Msg{Kind: handover.BackendEnded, Volume: cn.volume, Reason: "no real server runs for it"})
			}
		}
	}
	go func() {
		for {
			m, f, err := c.Recv()
			if err != nil {
				k.emit(event{kind: pluginGone, conn: c, err: err})
				return
			}
			if !k.emit(event{kind: pluginMsg, conn: c, msg: m, f: f}) && f != nil {
				c.Discard(f)
			}
		}
	}()
	return false
}

// pluginMsg handles a message from the plugin.
func (k *Keeper) pluginMsg(m handover.Msg, f *os.File) {
	switch m.Kind {
	case handover.Serve:
		k.take(m, f)
	case handover.Backend:
		k.backend(m.Volume, f)
	case handover.BackendServe:
		k.serveBackend(m.Volume, f)
	case handover.Stop, handover.Drop:
		if r := k.roots[m.Volume]; r != nil && m.Kind == handover.Stop {
			r.Close()
			delete(k.roots, m.Volume)
		}
		if m.Kind == handover.Stop {
			k.stopBackend(m.Volume)
		}
		cn := k.conns[m.Volume]
		if cn == nil {
			return
		}
		if m.Kind == handover.Drop {
			k.logf("volume %s: the plugin has no record of it (%s); dropping this copy", m.Volume, m.Reason)
		} else {
			k.logf("volume %s: unstaged; dropping this copy (its server ends with the mount)", m.Volume)
		}
		cn.dev.Close()
		if cn.server != nil {
			delete(cn.server.volumes, m.Volume)
		}
		delete(k.conns, m.Volume)
	default:
		k.logf("ignoring a %s message from the plugin about %q", m.Kind, m.Volume)
		if f != nil {
			f.Close()
		}
	}
}

// take holds the connection the plugin handed over and has it served.
func (k *Keeper) take(m handover.Msg, f *os.File) {
	id, _ := fuseconn.ID(int(f.Fd()))
	if cn := k.conns[m.Volume]; cn != nil {
		if id != 0 && cn.id == id {
			f.Close() // held already (a plugin that re-sent it): tell it again who serves it
			if cn.server != nil && cn.init != nil {
				k.tellPlugin(handover.Msg{Kind: handover.Served, Volume: cn.volume, Init: cn.init, PID: cn.server.pid, Version: cn.server.version})
			}
			return
		}
		// Another connection for the volume (the plugin mounted it anew): the old one is over.
		k.logf("volume %s: the plugin handed over a new connection; dropping the old one", m.Volume)
		cn.dev.Close()
		if cn.server != nil {
			delete(cn.server.volumes, m.Volume)
		}
	}
	cn := &conn{volume: m.Volume, dev: f, id: id, init: m.Init}
	k.conns[m.Volume] = cn
	k.serve(cn)
}

// serve hands cn to a server with room, starting one if needed.
func (k *Keeper) serve(cn *conn) {
	if k.cfg.Relay && k.roots[cn.volume] == nil {
		// Served at once all the same: the relay lets requests wait for the root within its backend wait and
		// then fails them, where a connection left unserved would queue them until the plugin gives it up
		// (a keeper rolled to a real server that cannot start would otherwise lose every volume).
		k.logf("volume %s: no backend root yet; its relay waits for the plugin to hand one over", cn.volume)
	}
	var srv *server
	for _, s := range k.servers {
		if !s.stopping && len(s.volumes) < k.cfg.VolumesPerServer {
			srv = s
			break
		}
	}
	if srv == nil {
		if k.restartPending() {
			return // serveUnserved hands it over once the back-off has passed
		}
		var err error
		if srv, err = k.startServer(); err != nil {
			k.logf("volume %s: cannot start a FUSE server: %v", cn.volume, err)
			k.noteCrash()
			return
		}
	}
	srv.volumes[cn.volume] = true
	cn.server = srv
	if r := k.roots[cn.volume]; r != nil {
		if err := srv.session.Send(handover.Msg{Kind: handover.Backend, Volume: cn.volume}, r); err != nil {
			k.logf("volume %s: handing its backend root to server pid %d: %v", cn.volume, srv.pid, err)
		}
	}
	if cn.init == nil {
		// Never answered, or its first server died before answering: its INIT may sit in the dead server's
		// hands, so ask the kernel to queue it again before the new server reads.
		_, _ = fuseconn.Resend(int(cn.dev.Fd()))
	}
	if err := srv.session.Send(handover.Msg{Kind: handover.Serve, Volume: cn.volume, Init: cn.init}, cn.dev); err != nil {
		k.logf("volume %s: handing it to server pid %d: %v", cn.volume, srv.pid, err)
		srv.kill()
	}
}

// serverMsg handles a report of one of the servers.
func (k *Keeper) serverMsg(srv *server, m handover.Msg) {
	cn := k.conns[m.Volume]
	switch m.Kind {
	case handover.Served:
		if srv.version == "" {
			srv.version = m.Version
		}
		if cn == nil || cn.server != srv {
			return
		}
		if cn.init == nil {
			cn.init = m.Init
		}
		cn.served = true
		k.logf(contract.KeeperServedFormat, m.Volume, m.Version, srv.pid)
		k.tellPlugin(handover.Msg{Kind: handover.Served, Volume: m.Volume, Init: cn.init, PID: srv.pid, Version: m.Version})
	case handover.Ended:
		delete(srv.volumes, m.Volume)
		if cn == nil || cn.server != srv {
			return
		}
		cn.server, cn.served = nil, false
		k.logf("volume %s: its server pid %d stopped serving it: %s", m.Volume, srv.pid, m.Reason)
		k.tellPlugin(handover.Msg{Kind: handover.Ended, Volume: m.Volume, Reason: m.Reason})
		if m.Reason != handover.ReasonUnmounted {
			// The server failed the connection (a refused takeover, a device error) while it lives on, held
			// here: hand it to a server again, with the back-off of a crash, rather than leave it unserved
			// until the plugin's --unserved-abort-after ends it.
			k.noteCrash()
			k.serveUnserved()
		}
	}
}

// serverGone handles the exit of a server: its connections go to a new one.
func (k *Keeper) serverGone(srv *server, err error) {
	k.servers = deleteServer(k.servers, srv)
	if srv.stopping {
		return
	}
	var orphans []string
	for v := range srv.volumes {
		if cn := k.conns[v]; cn != nil && cn.server == srv {
			cn.server, cn.served = nil, false
			orphans = append(orphans, v)
		}
	}
	sort.Strings(orphans)
	k.logf(contract.KeeperExitedFormat, srv.pid, err, strings.Join(orphans, ", "))
	// The plugin learns that these wait for a server: it aborts a connection that no server answers for long
	// (its --unserved-abort-after), so that a crash loop fails the workloads' calls instead of hanging them.
	for _, v := range orphans {
		k.tellPlugin(handover.Msg{Kind: handover.Ended, Volume: v, Reason: fmt.Sprintf("its FUSE server pid %d exited (%v)", srv.pid, err)})
	}
	if k.cfg.ExitWithServer {
		k.exitErr = fmt.Errorf("FUSE server pid %d exited (%w): exiting with it; the plugin keeps its copy of the connection for the next instance", srv.pid, err)
		return
	}
	if time.Since(srv.started) < quickDeath {
		k.noteCrash() // a server that dies right after its start may do so again: count it for the back-off
	}
	k.serveUnserved()
}

// serveUnserved hands every connection without a server to a server, unless the restart back-off holds.
func (k *Keeper) serveUnserved() {
	if k.restartPending() {
		return
	}
	for _, cn := range k.sortedConns() {
		if cn.server == nil {
			k.serve(cn)
		}
	}
}

// Restart back-off: servers that keep dying right after their start (a broken binary, a refused takeover) are
// not restarted in a hot loop. A server that served for a while is restarted at once however often it dies,
// and so are the first quick deaths: a crash costs the workloads only the time to start a process.
const (
	quickDeath    = time.Second
	crashWindow   = 10 * time.Second
	freeRestarts  = 3
	restartPeriod = time.Second
)

func (k *Keeper) noteCrash() {
	now := time.Now()
	k.crashes = append(k.crashes, now)
	for len(k.crashes) > 0 && now.Sub(k.crashes[0]) > crashWindow {
		k.crashes = k.crashes[1:]
	}
}

// restartPending reports whether servers crashed too often lately; it schedules serveUnserved for later.
func (k *Keeper) restartPending() bool {
	if len(k.crashes) <= freeRestarts || time.Since(k.crashes[len(k.crashes)-1]) >= restartPeriod {
		return false
	}
	time.AfterFunc(restartPeriod, func() { k.emit(event{kind: restartDue}) })
	return true
}

// tellPlugin sends m to the plugin if a session is up; a failed send ends the session (it is redialled).
func (k *Keeper) tellPlugin(m handover.Msg) {
	if k.plugin == nil {
		return
	}
	if err := k.plugin.Send(m, nil); err != nil {
		k.logf("telling the plugin %s about %s: %v", m.Kind, m.Volume, err)
		k.plugin.Close() // its receiver reports pluginGone
	}
}

// shutdown stops every server gracefully and lets go of everything.
func (k *Keeper) shutdown() {
	k.logf("stopping: %d FUSE server(s) exit without unmounting; the plugin keeps the connections", len(k.servers))
	var wg sync.WaitGroup
	for _, s := range k.servers {
		wg.Go(func() { s.stop(serverGrace) })
	}
	wg.Wait()
	if k.plugin != nil {
		k.plugin.Close()
	}
	for _, cn := range k.conns {
		cn.dev.Close()
	}
	for _, r := range k.roots {
		r.Close()
	}
	for v := range k.backends {
		k.stopBackend(v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := k.closer.Drain(ctx); err != nil {
		k.logf("exiting with descriptors a peer sent still being closed: %v", err)
	}
}

// backend keeps f, the newest root of volume's backend (relay-keeper mode: the plugin mounted a new one), and
// hands it to the server that relays the volume; the next server gets it before the connection (serve).
func (k *Keeper) backend(volume string, f *os.File) {
	if old := k.roots[volume]; old != nil {
		old.Close()
	}
	k.roots[volume] = f
	if cn := k.conns[volume]; cn != nil && cn.server == nil {
		k.serve(cn)
	} else if cn != nil {
		if err := cn.server.session.Send(handover.Msg{Kind: handover.Backend, Volume: volume}, f); err != nil {
			k.logf("volume %s: handing its backend root to server pid %d: %v", volume, cn.server.pid, err)
		}
	}
	k.logf("volume %s: the plugin handed over a backend root", volume)
}

func (k *Keeper) sortedConns() []*conn {
	out := make([]*conn, 0, len(k.conns))
	for _, cn := range k.conns {
		out = append(out, cn)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].volume < out[j].volume })
	return out
}

// logf writes a line stamped with this process's clock, as `csi-plugin sidecar` does: scenario backends read
// the time of each event from it.
func (k *Keeper) logf(format string, a ...any) {
	fmt.Fprintf(k.log, "%s csi-plugin %s: %s\n", time.Now().UTC().Format(time.RFC3339Nano), k.cfg.Role, fmt.Sprintf(format, a...))
}

// command line of a server.
func (k *Keeper) serverCmd(child *os.File) *exec.Cmd {
	cmd := exec.Command(k.cfg.DummyFusePath, append(append([]string{}, k.cfg.ServerArgs...), "--session", "/dev/fd/3")...)
	cmd.ExtraFiles = []*os.File{child}
	cmd.Stdout, cmd.Stderr = k.log, k.log
	// One OS thread per server process is plenty (its requests take microseconds unless told to be slow).
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	return cmd
}

// passedConnection returns how the real server serves a backend connection passed as descriptor
// fuseserver.FD: as /dev/fd/N, or, when it cannot, asking the fusermount stand-in made in handoffDir.
func passedConnection(real fuseserver.Server, handoffDir string) ([]string, *fuseserver.Handoff, error) {
	args, fdErr := real.FDArgs()
	switch {
	case fdErr == nil:
		return args, nil, nil
	case !real.Kind().Fusermount():
		return nil, nil, fmt.Errorf("it must serve %s or ask fusermount for its connection (its spec's fusermount): %w", fuseserver.FDPath, fdErr)
	case handoffDir == "":
		return nil, nil, fmt.Errorf("it asks fusermount for its connection, and no directory for the stand-in was given: %w", fdErr)
	}
	if err := fuseserver.NoRealFusermount(); err != nil {
		return nil, nil, err
	}
	h := fuseserver.NewHandoff(handoffDir)
	args, err := real.FusermountArgs(h.Mountpoint())
	if err != nil {
		return nil, nil, err
	}
	return args, h, nil
}

// readSecret reads the plugin's per-node secret.
func readSecret(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading the plugin's secret: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, handover.MaxSecret+1))
	if err != nil || len(b) == 0 || len(b) > handover.MaxSecret {
		return nil, fmt.Errorf("reading the plugin's secret %s: %d bytes (%v)", path, len(b), err)
	}
	return b, nil
}
