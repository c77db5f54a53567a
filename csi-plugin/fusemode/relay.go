package fusemode

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/contract"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseconn"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/spawn"
)

// RelayName is the mode in which the kernel connection of each staging path is served by a relay (dummy-fuse
// --relay-backend, package relayfs) whose backend is the real server's mount, kept in the plugin's own
// directory (Options.RelayDir) and never shared with the node's mount tree. The plugin keeps a copy of the
// staging connection's descriptor, so that the relay's death only pauses it: the plugin starts a successor
// that takes the connection over (--takeover, with the node table and handover record its predecessor
// wrote). When the real server dies, the plugin (the only one that may mount) detaches its dead mount,
// mounts a new connection at the same path and starts the server again on it (/dev/fd/3); the relay, which
// found the backend dead, reopens it there and retries. A server that cannot serve a passed connection
// (servesFD: false, or libfuse2) mounts the backend directory itself instead, and the plugin detaches its dead
// mount before it starts it again. Both processes are children of the plugin and die with it: see
// csi-plugin/README.md "Relay mode" for which crashes that keeps error-free.
const RelayName = contract.ModeRelay

// DefaultRelayBackendWait is how long a relay lets requests wait for a dead backend unless told otherwise.
const DefaultRelayBackendWait = 30 * time.Second

// DefaultRelayServerUID is the user the real server runs as unless told otherwise: nobody.
const DefaultRelayServerUID = 65534

// Bounds of the restarts: the first retry is at once, later ones back off to relayMaxBackoff, so a server
// that cannot start costs a try a second, not a busy loop.
const (
	relayMinBackoff = 10 * time.Millisecond
	relayMaxBackoff = time.Second
	// relayStable is how long a process must have run for its death to count as a crash rather than a
	// failed start: the next start is then at once.
	relayStable = 5 * time.Second
)

func init() { Register(RelayName, func(o Options) (Mode, error) { return NewRelay(o) }) }

// Relay is the relay mode.
type Relay struct {
	onStagingPath
	opts     Options
	server   fuseserver.Server
	serverFD []string // the server's arguments to serve /dev/fd/3; nil: it mounts the backend itself
	// selfMount says why the server mounts the backend itself (it cannot serve /dev/fd/3); nil when it does not.
	selfMount error
	relayBin  string
	spawn     *spawn.Spawner
}

// NewRelay checks the real server and the relay's executable. A server that serves a descriptor (/dev/fd/3)
// serves a backend the plugin mounts; any other mounts the backend directory itself. Direct I/O
// (Options.Server.DirectIO) is the relay's: the server behind it is read with the workload's own flags.
func NewRelay(opts Options) (*Relay, error) {
	spec := opts.Server
	spec.DirectIO = false
	server, err := fuseserver.New(spec)
	if err != nil {
		return nil, fmt.Errorf("relay mode: %w", err)
	}
	// A server that cannot serve /dev/fd/3 mounts the backend itself, as the plugin's user (startServer).
	args, selfMount := server.FDArgs()
	if opts.RelayDir == "" || !filepath.IsAbs(opts.RelayDir) {
		return nil, fmt.Errorf("relay mode: the relay directory must be an absolute path, got %q", opts.RelayDir)
	}
	bin := opts.RelayPath
	if bin == "" {
		bin = fuseserver.Find(fuseserver.DummyFuse)
	}
	if st, err := os.Stat(bin); bin == "" || err != nil || !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
		return nil, fmt.Errorf("relay mode: the relay's executable (dummy-fuse) %q is missing or not executable (--relay-path)", bin)
	}
	if opts.RelayBackendWait <= 0 {
		opts.RelayBackendWait = DefaultRelayBackendWait
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 10 * time.Second
	}
	if selfMount != nil {
		klog.InfoS("Relay mode: the real server mounts each backend itself, as the plugin's user", "server", server.Name(), "why", selfMount)
	}
	return &Relay{opts: opts, server: server, serverFD: args, selfMount: selfMount, relayBin: bin, spawn: spawn.New()}, nil
}

// Name implements Mode.
func (r *Relay) Name() string { return RelayName }

// Close stops the spawner; running relays and servers are not touched.
func (r *Relay) Close() error {
	r.spawn.Close()
	return nil
}

// volumeDir is the plugin's directory of a volume: a hash of its ID, which may hold any character.
func (r *Relay) volumeDir(volumeID string) string {
	sum := sha256.Sum256([]byte(volumeID))
	return filepath.Join(r.opts.RelayDir, hex.EncodeToString(sum[:12]))
}

// Recollect implements Mode. The relays and servers of a dead plugin died with it (children), so their staging
// connections are over and the driver's restore mounts them again through Start. What it detaches first is
// only the backend mount at a recorded volume's own directory, and only when it is a mount of the configured
// server's type: the plugin made it, in this mount namespace, before it died.
func (r *Relay) Recollect(recs Records) (map[string]Server, error) {
	for _, s := range recs.Stages {
		r.detachBackend(filepath.Join(r.volumeDir(s.VolumeID), "backend"))
	}
	return nil, nil
}

// detachBackend lazily unmounts every mount of the server's type stacked at dir (a dead one: no request
// reaches it).
func (r *Relay) detachBackend(dir string) {
	for {
		top, err := mounts.Top(dir)
		if err != nil || top == nil || top.Mountpoint != dir || !r.backendType(top.FSType) {
			return
		}
		if err := unix.Unmount(dir, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil {
			klog.ErrorS(err, "Detaching a relay backend", "dir", dir)
			return
		}
	}
}

// backendType reports whether fstype is the type of a backend mount: "fuse.<server>", the type the plugin
// mounts with, or, for a server that mounts the backend itself and so names its type (libfuse2 after its
// executable), any FUSE type. Either way the mount must be at a volume's own backend directory, which only
// the plugin and the server it started mount on.
func (r *Relay) backendType(fstype string) bool {
	if r.selfMount != nil {
		return fstype == "fuse" || strings.HasPrefix(fstype, "fuse.")
	}
	return fstype == "fuse."+r.server.Name()
}

// checkBackend returns an error unless a backend mount (backendType) is on top at dir; it reads the mount
// table only, never the mount.
func (r *Relay) checkBackend(dir string) error {
	top, err := mounts.Top(dir)
	switch {
	case err != nil:
		return fmt.Errorf("reading the mount table: %w", err)
	case top == nil || top.Mountpoint != dir:
		return fmt.Errorf("nothing is mounted at %s", dir)
	case !r.backendType(top.FSType):
		return fmt.Errorf("the mount at %s is of type %s, not a backend's", dir, top.FSType)
	}
	return nil
}

// Start implements Mode: the backend first (mounted, its server started, answering), then the staging
// connection and its relay.
func (r *Relay) Start(ctx context.Context, req Request) (Server, error) {
	dir := r.volumeDir(req.VolumeID)
	v := &relayVolume{r: r, volumeID: req.VolumeID, mountpoint: req.Mountpoint, dir: dir, backend: filepath.Join(dir, "backend"),
		nodes: filepath.Join(dir, "nodes"), init: filepath.Join(dir, "init"), stop: make(chan struct{}), done: make(chan struct{})}
	// First the mount a predecessor left at this volume's own directory: making the directory stats the path,
	// which would reach that mount's server (or fail on a dead one).
	r.detachBackend(v.backend)
	if err := os.MkdirAll(v.backend, 0o700); err != nil {
		return nil, fmt.Errorf("relay directory: %w", err)
	}
	// A new connection starts with no node table: a predecessor's would give IDs the kernel never handed out;
	// nor with a predecessor's journals (of another connection's handles).
	for _, f := range []string{v.nodes, v.init, v.spill()} {
		if err := os.RemoveAll(f); err != nil {
			return nil, err
		}
	}
	wctx, cancel := context.WithTimeout(ctx, r.opts.StartTimeout)
	defer cancel()
	srv, err := v.startServer(wctx)
	if err == nil {
		err = mounts.WaitAnswering(wctx, v.backend, ServedFile, srv.done)
	}
	if err == nil {
		// The relay takes the first root's filesystem type for the one to wait for after a crash: that root must
		// be a backend mount at this directory, which the mount table tells without asking the server.
		err = v.r.checkBackend(v.backend)
	}
	if err != nil {
		v.teardown()
		return nil, fmt.Errorf("volume %s: real server %s: %w (output: %q)", req.VolumeID, r.server.Name(), err, srv.tail())
	}
	dev, err := fuseconn.Open()
	if err != nil {
		v.teardown()
		return nil, err
	}
	o := fuseconn.MountOptions{Name: fuseserver.DummyFuse, Source: "dummy-fuse-relay", ReadOnly: !r.opts.Writable, DefaultPermissions: r.opts.Writable, AllowOther: true, MaxRead: maxReadBytes}
	if err := fuseconn.Mount(dev, req.Mountpoint, o); err != nil {
		dev.Close()
		v.teardown()
		return nil, err
	}
	v.dev = dev
	rel, err := v.startRelay(wctx, "--save-init", v.init)
	if err == nil {
		err = mounts.WaitAnswering(wctx, req.Mountpoint, ServedFile, rel.done)
	}
	if err != nil {
		_ = unix.Unmount(req.Mountpoint, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
		v.teardown()
		return nil, fmt.Errorf("volume %s: relay: %w (output: %q)", req.VolumeID, err, rel.tail())
	}
	v.forkStandby()
	go v.watch("server", srv, v.restartServer)
	go v.watch("relay", rel, v.restartRelay)
	klog.V(4).InfoS("FUSE connection served by a relay", "volumeID", req.VolumeID, "mountpoint", req.Mountpoint, "relayPID", rel.pid(), "serverPID", srv.pid())
	return v, nil
}

// relayVolume is one volume's relay and real server (the Server of the relay mode).
type relayVolume struct {
	r                         *Relay
	volumeID, mountpoint      string
	dir, backend, nodes, init string
	dev                       *os.File // the plugin's copy of the staging connection
	stop, done                chan struct{}
	mu                        sync.Mutex
	relay, server, standby    *relayProc // standby: the relay's successor, forked in advance (restartRelay)
	stopping                  bool
}

// relayProc is one child process: a relay or a real server.
type relayProc struct {
	cmd  *exec.Cmd
	out  *tail
	done chan struct{}
	err  error
	gate *os.File // a standby's stdin: a byte lets it take over
}

func (p *relayProc) pid() int {
	if p == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

func (p *relayProc) tail() string {
	if p == nil {
		return ""
	}
	return p.out.String()
}

// start runs cmd with dev as descriptor 3 (none when dev is nil); dev is the caller's to close.
func (v *relayVolume) start(ctx context.Context, cmd *exec.Cmd, dev *os.File) (*relayProc, error) {
	p := &relayProc{cmd: cmd, out: newTail(4096), done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if dev != nil {
		cmd.ExtraFiles = []*os.File{dev}
	}
	if err := v.r.spawn.Start(ctx, cmd); err != nil {
		close(p.done)
		return p, fmt.Errorf("starting %s: %w", cmd.Path, err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	return p, nil
}

// startServer mounts a new backend connection and starts the real server on it. The plugin closes its copy
// once the server has it: the server's death must end the backend connection (ENOTCONN, which the relay
// waits out), not leave its requests queued with nobody to answer them.
func (v *relayVolume) startServer(ctx context.Context) (*relayProc, error) {
	if v.r.selfMount != nil {
		return v.startSelfMounting(ctx)
	}
	dev, err := fuseconn.Open()
	if err != nil {
		return nil, err
	}
	defer dev.Close()
	name := v.r.server.Name()
	if err := fuseconn.Mount(dev, v.backend, fuseconn.MountOptions{Name: name, Source: name, ReadOnly: !v.r.opts.Writable, AllowOther: true}); err != nil {
		return nil, err
	}
	cmd := fuseserver.Command(v.r.server, v.r.serverFD)
	if uid := v.r.opts.RelayServerUID; uid >= 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}}}
	}
	p, err := v.start(ctx, cmd, dev)
	if err != nil {
		_ = unix.Unmount(v.backend, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
		return p, err
	}
	v.mu.Lock()
	v.server = p
	v.mu.Unlock()
	return p, nil
}

// startSelfMounting starts a server that mounts the backend directory itself. It runs as the plugin's user,
// not --relay-server-uid: mounting is the plugin's privilege (libfuse2 as root calls mount(2) in the plugin's
// mount namespace); as another user it would need the setuid fusermount and user_allow_other in
// /etc/fuse.conf, which lets every user of the node share FUSE mounts. Its death leaves a dead mount at the
// backend directory, which restartServer detaches before the next start.
func (v *relayVolume) startSelfMounting(ctx context.Context) (*relayProc, error) {
	p, err := v.start(ctx, fuseserver.Command(v.r.server, v.r.server.MountArgs(v.backend)), nil)
	if err != nil {
		return p, err
	}
	v.mu.Lock()
	v.server = p
	v.mu.Unlock()
	return p, nil
}

// spill is where the volume's writable relays keep their journals, which a successor relay replays.
func (v *relayVolume) spill() string { return filepath.Join(v.dir, "spill") }

// relayCommand is a relay on the plugin's copy of the staging connection with extra arguments.
func (v *relayVolume) relayCommand(extra ...string) *exec.Cmd {
	args := []string{"--relay-backend", v.backend, "--node-table", v.nodes, "--backend-wait", v.r.opts.RelayBackendWait.String()}
	if v.r.opts.Server.DirectIO {
		args = append(args, "--direct-io")
	}
	if v.r.opts.Writable {
		args = append(args, "--relay-writable", "--spill-dir", v.spill())
	}
	args = append(append(args, extra...), fuseserver.FDPath)
	cmd := exec.Command(v.r.relayBin, args...)
	cmd.Env = append(os.Environ(), "GOMAXPROCS=2")
	return cmd
}

// startRelay starts the first relay of the connection, then its standby successor.
func (v *relayVolume) startRelay(ctx context.Context, extra ...string) (*relayProc, error) {
	p, err := v.start(ctx, v.relayCommand(extra...), v.dev)
	if err != nil {
		return p, err
	}
	v.mu.Lock()
	v.relay = p
	v.mu.Unlock()
	return p, nil
}

// forkStandby starts the relay's successor now, while the relay serves: it waits (dummy-fuse --standby) until
// restartRelay lets it take over. Forked after the relay died, it could hang: a child closes at exec its
// copies of whatever the plugin has open on the staging mount (a probe), and each close waits for the
// relay's answer to a FLUSH.
func (v *relayVolume) forkStandby() {
	ctx, cancel := context.WithTimeout(context.Background(), v.r.opts.StartTimeout)
	defer cancel()
	gate, gateW, err := os.Pipe()
	if err != nil {
		klog.ErrorS(err, "Relay mode: no standby relay", "volumeID", v.volumeID)
		return
	}
	defer gate.Close()
	cmd := v.relayCommand("--standby", "--takeover", v.init)
	cmd.Stdin = gate
	p, err := v.start(ctx, cmd, v.dev)
	if err != nil {
		gateW.Close()
		klog.ErrorS(err, "Relay mode: no standby relay", "volumeID", v.volumeID)
		return
	}
	p.gate = gateW
	v.mu.Lock()
	v.standby = p
	v.mu.Unlock()
}

// restartServer detaches the dead backend (only a mount of the backend's type at the volume's own backend
// directory) and starts the server again on a new one.
func (v *relayVolume) restartServer() (*relayProc, error) {
	v.r.detachBackend(v.backend)
	ctx, cancel := context.WithTimeout(context.Background(), v.r.opts.StartTimeout)
	defer cancel()
	return v.startServer(ctx)
}

// restartRelay lets the standby take the staging connection over from the handover record and node table its
// predecessor wrote (the kernel resends what the dead relay had read), then forks the next standby. Without a
// live standby it starts a successor directly.
func (v *relayVolume) restartRelay() (*relayProc, error) {
	v.mu.Lock()
	p := v.standby
	v.standby = nil
	v.mu.Unlock()
	if p != nil {
		_, err := p.gate.Write([]byte{1})
		p.gate.Close()
		select {
		case <-p.done:
			err = fmt.Errorf("the standby relay (pid %d) had exited: %v", p.pid(), p.err)
		default:
		}
		if err == nil {
			v.mu.Lock()
			v.relay = p
			v.mu.Unlock()
			v.forkStandby()
			return p, nil
		}
		_ = p.cmd.Process.Kill()
		klog.ErrorS(err, "Relay mode: the standby relay did not take over; starting a successor", "volumeID", v.volumeID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), v.r.opts.StartTimeout)
	defer cancel()
	np, err := v.startRelay(ctx, "--takeover", v.init)
	if err == nil {
		v.forkStandby()
	}
	return np, err
}

// watch starts a process of kind again whenever it ends, until Stop, with a backoff while the starts fail or
// the processes die within relayStable of their start (a crash loop). A relay that exits with status 0 found its connection gone (the staging path was unmounted): the
// volume is over, and so is its server.
func (v *relayVolume) watch(kind string, p *relayProc, restart func() (*relayProc, error)) {
	started, quick := time.Now(), 0 // quick: deaths in a row within relayStable of their start
	for {
		select {
		case <-p.done:
		case <-v.stop:
			return
		}
		// The first death is answered at once; a crash loop backs off.
		quick++
		if time.Since(started) >= relayStable {
			quick = 1
		}
		backoff := time.Duration(0)
		for i := 1; i < quick && backoff < relayMaxBackoff; i++ {
			backoff = min(max(2*backoff, relayMinBackoff), relayMaxBackoff)
		}
		if v.isStopping() {
			return
		}
		if kind == "relay" && p.err == nil {
			klog.V(2).InfoS("Relay exited after its connection ended", "volumeID", v.volumeID, "pid", p.pid())
			go func() { _ = v.Stop(context.Background()) }()
			return
		}
		klog.ErrorS(p.err, "Relay mode: process exited, starting it again", "what", kind, "volumeID", v.volumeID, "pid", p.pid(), "output", p.tail())
		for {
			select {
			case <-time.After(backoff):
			case <-v.stop:
				return
			}
			np, err := restart()
			if err == nil {
				klog.InfoS("Relay mode: process started again", "what", kind, "volumeID", v.volumeID, "pid", np.pid(), "after", backoff)
				p, started = np, time.Now()
				break
			}
			backoff = min(max(2*backoff, relayMinBackoff), relayMaxBackoff)
			klog.ErrorS(err, "Relay mode: starting a process again failed", "what", kind, "volumeID", v.volumeID, "retryIn", backoff)
		}
	}
}

func (v *relayVolume) isStopping() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.stopping
}

// PID implements Server: the relay's.
func (v *relayVolume) PID() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.relay.pid()
}

// Done implements Server: closed once Stop has ended the relay and the server.
func (v *relayVolume) Done() <-chan struct{} { return v.done }

// InitRecord implements Server: nothing outlives the plugin in this mode, so its records need none.
func (v *relayVolume) InitRecord() []byte { return nil }

// Stop implements Server: the watchers stop, the relay, its standby and the server are killed (SIGKILL: the
// server serves a read-only backend nobody else reaches, and a graceful stop of a server on /dev/fd/3 would try
// to unmount what it did not mount), the backend is detached and the plugin's copy of the staging connection
// closed. The caller unmounts the staging path, normally first. A second call waits for the first, within ctx.
func (v *relayVolume) Stop(ctx context.Context) error {
	v.mu.Lock()
	if v.stopping {
		v.mu.Unlock()
		select {
		case <-v.done:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("volume %s: waiting for the relay mode's stop: %w", v.volumeID, ctx.Err())
		}
	}
	v.stopping = true
	close(v.stop)
	v.mu.Unlock()
	v.teardown()
	close(v.done)
	return nil
}

// killWait bounds how long teardown waits for a SIGKILLed child: a relay killed while its server does not
// answer finishes exiting only once the server does (the kernel sends the FLUSH of each of its open backend
// files, fuse_flush in fs/fuse/file.c), so the server is killed at the same time.
const killWait = 5 * time.Second

// teardown kills what still runs, detaches the backend and closes the plugin's copy of the staging connection.
func (v *relayVolume) teardown() {
	v.mu.Lock()
	procs := []*relayProc{v.relay, v.server, v.standby}
	v.mu.Unlock()
	for _, p := range procs {
		if p != nil && p.cmd.Process != nil {
			_ = p.cmd.Process.Kill()
		}
	}
	for _, p := range procs {
		if p == nil {
			continue
		}
		select {
		case <-p.done:
		case <-time.After(killWait):
			klog.ErrorS(nil, "Relay mode: a killed process did not exit", "volumeID", v.volumeID, "pid", p.pid())
		}
	}
	v.r.detachBackend(v.backend)
	if v.dev != nil {
		v.dev.Close()
	}
}
