package fusemode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/contract"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
)

// RelayKeeperName is the relay mode with the relay held by the keeper: the staging connection is the keeper
// mode's (the plugin mounts it, keeps a copy and hands it to the keeper, whose servers serve it), and the
// keeper's servers relay it (dummy-fuse --session --relay-node-dir) to the backend root the plugin hands over
// with it: a directory descriptor of the real server's private mount, which works from the keeper's mount
// namespace. The real server stays the plugin's child on that private mount (relay.go): when it dies, the
// plugin mounts a new backend and hands its root to the keeper, whose relay reopens its handles there. So the
// plugin's death costs the real server (a restart, a stall) and never the staging connection, which the
// keeper holds; the keeper's death costs its relays, which the next keeper's take over from the plugin's copy
// and the node tables in the keeper's own directory. See csi-plugin/README.md "Relay mode".
const RelayKeeperName = contract.ModeRelayKeeper

func init() { Register(RelayKeeperName, func(o Options) (Mode, error) { return NewRelayKeeper(o) }) }

// RelayKeeper is the relay-keeper mode: a Keeper for the staging connections, a Relay for the real servers.
type RelayKeeper struct {
	onStagingPath
	k *Keeper
	r *Relay

	mu   sync.Mutex
	vols map[string]*keptRelay // by volume
}

// NewRelayKeeper checks the real server as the relay mode does and the keeper's settings as the keeper mode
// does; the servers the keeper runs are relays (dummy-fuse), which take connections over.
func NewRelayKeeper(opts Options) (*RelayKeeper, error) {
	r, err := NewRelay(opts)
	if err != nil {
		return nil, fmt.Errorf("relay-keeper mode: %w", err)
	}
	ko := opts
	ko.Server = fuseserver.Spec{Name: fuseserver.DummyFuse}
	k, err := NewKeeper(ko)
	if err != nil {
		return nil, fmt.Errorf("relay-keeper mode: %w", err)
	}
	rk := &RelayKeeper{k: k, r: r, vols: map[string]*keptRelay{}}
	k.h.backendOf, k.h.exclusive = rk.backendOf, true
	return rk, nil
}

// Name implements Mode.
func (rk *RelayKeeper) Name() string { return RelayKeeperName }

// Close implements Mode: the keeper sessions end; the keeper's relays and the plugin's servers stay.
func (rk *RelayKeeper) Close() error {
	_ = rk.k.Close()
	return rk.r.Close()
}

// backendOf returns a copy of volume's newest backend root (holder.backendOf).
func (rk *RelayKeeper) backendOf(volume string) *os.File {
	rk.mu.Lock()
	v := rk.vols[volume]
	rk.mu.Unlock()
	if v == nil {
		return nil
	}
	return v.rootCopy()
}

// Recollect implements Mode: the keeper mode's (its copies of the staging connections come back from the
// keeper), and a new real server on a new backend for every recorded volume, since the old ones died with
// this plugin. What it detaches first is only a mount of the configured server's type at a recorded volume's
// own backend directory.
func (rk *RelayKeeper) Recollect(recs Records) (map[string]Server, error) {
	kept, err := rk.k.Recollect(recs)
	if err != nil {
		return nil, err
	}
	out := map[string]Server{}
	for _, rec := range recs.Stages {
		ks, ok := kept[rec.VolumeID].(*keptServer)
		if !ok {
			continue
		}
		v := rk.newVolume(rec.VolumeID, rec.StagingPath, ks)
		go v.serveBackend(nil)
		out[rec.VolumeID] = v
	}
	return out, nil
}

// Start implements Mode: the backend first (mounted privately, its server started, answering, its root
// ready to hand over), then the staging connection, handed to the keeper with that root.
func (rk *RelayKeeper) Start(ctx context.Context, req Request) (Server, error) {
	v := rk.newVolume(req.VolumeID, req.Mountpoint, nil)
	if err := os.MkdirAll(v.rv.backend, 0o700); err != nil {
		rk.drop(v)
		return nil, fmt.Errorf("relay directory: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, rk.r.opts.StartTimeout)
	defer cancel()
	srv, err := v.startBackend(wctx)
	if err != nil {
		rk.drop(v)
		v.rv.teardown()
		return nil, fmt.Errorf("volume %s: real server %s: %w (output: %q)", req.VolumeID, rk.r.server.Name(), err, srv.tail())
	}
	s, err := rk.k.Start(ctx, req)
	if err != nil {
		rk.drop(v)
		v.rv.teardown()
		v.closeRoot()
		return nil, err
	}
	v.setKept(s.(*keptServer))
	go v.serveBackend(srv)
	klog.V(4).InfoS("FUSE connection relayed by the keeper", "volumeID", req.VolumeID, "mountpoint", req.Mountpoint, "serverPID", srv.pid())
	return v, nil
}

func (rk *RelayKeeper) newVolume(volumeID, mountpoint string, ks *keptServer) *keptRelay {
	dir := rk.r.volumeDir(volumeID)
	rv := &relayVolume{r: rk.r, volumeID: volumeID, mountpoint: mountpoint, dir: dir, backend: filepath.Join(dir, "backend"),
		stop: make(chan struct{}), done: make(chan struct{})}
	v := &keptRelay{rk: rk, rv: rv, ks: ks, kept: make(chan struct{})}
	if ks != nil {
		close(v.kept)
	}
	rk.mu.Lock()
	if old := rk.vols[volumeID]; old != nil {
		go old.stopBackend()
	}
	rk.vols[volumeID] = v
	rk.mu.Unlock()
	return v
}

func (rk *RelayKeeper) drop(v *keptRelay) {
	rk.mu.Lock()
	if rk.vols[v.rv.volumeID] == v {
		delete(rk.vols, v.rv.volumeID)
	}
	rk.mu.Unlock()
}

// keptRelay is one volume of the relay-keeper mode (its Server): the staging connection as the keeper mode
// holds it, the real server and its backend as the relay mode runs them.
type keptRelay struct {
	rk   *RelayKeeper
	rv   *relayVolume  // only its server side: the relay runs in the keeper
	kept chan struct{} // closed once ks is set
	ks   *keptServer

	mu   sync.Mutex
	root *os.File // the newest backend's root (O_PATH), handed to every keeper session holding the volume
}

func (v *keptRelay) setKept(ks *keptServer) {
	v.ks = ks
	close(v.kept)
}

// rootCopy returns a copy of the newest root, nil while none.
func (v *keptRelay) rootCopy() *os.File {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.root == nil {
		return nil
	}
	fd, err := unix.FcntlInt(v.root.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	return os.NewFile(uintptr(fd), v.root.Name())
}

func (v *keptRelay) closeRoot() {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.root != nil {
		v.root.Close()
		v.root = nil
	}
}

// startBackend detaches what is left of a dead backend at the volume's own directory (only a mount of the
// server's type), mounts a new one, starts the server on it, waits until it answers and opens its root.
// O_PATH: opening the root asks nothing of the server, and the relay needs the descriptor only to open below
// it (openat2) and to statfs.
func (v *keptRelay) startBackend(ctx context.Context) (*relayProc, error) {
	v.rv.r.detachBackend(v.rv.backend)
	srv, err := v.rv.startServer(ctx)
	if err == nil {
		err = mounts.WaitAnswering(ctx, v.rv.backend, ServedFile, srv.done)
	}
	var fd int
	if err == nil {
		fd, err = unix.Open(v.rv.backend, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		if srv != nil && srv.cmd.Process != nil {
			_ = srv.cmd.Process.Kill()
		}
		return srv, err
	}
	v.mu.Lock()
	old := v.root
	v.root = os.NewFile(uintptr(fd), v.rv.backend)
	v.mu.Unlock()
	if old != nil {
		old.Close()
	}
	return srv, nil
}

// serveBackend starts the real server again whenever it ends (first: the running one, nil for none), hands
// each new backend's root to the keeper sessions that hold the volume, and backs off while the starts fail or
// the servers die within relayStable of their start, until the volume stops.
func (v *keptRelay) serveBackend(first *relayProc) {
	p, started, quick := first, time.Now(), 0
	backoff := time.Duration(0)
	for {
		if p != nil {
			select {
			case <-p.done:
			case <-v.rv.stop:
				return
			}
			klog.ErrorS(p.err, "Relay-keeper mode: the real server exited, starting it again", "volumeID", v.rv.volumeID, "pid", p.pid(), "output", p.tail())
			quick++
			if time.Since(started) >= relayStable {
				quick, backoff = 1, 0
			}
			if quick > 1 {
				backoff = min(max(2*backoff, relayMinBackoff), relayMaxBackoff)
			}
		}
		select {
		case <-time.After(backoff):
		case <-v.rv.stop:
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), v.rv.r.opts.StartTimeout)
		np, err := v.startBackend(ctx)
		cancel()
		if err != nil {
			backoff = min(max(2*backoff, relayMinBackoff), relayMaxBackoff)
			klog.ErrorS(err, "Relay-keeper mode: starting the real server failed", "volumeID", v.rv.volumeID, "retryIn", backoff, "output", np.tail())
			if np != nil {
				<-np.done
			}
			p = nil
			continue
		}
		if v.rv.isStopping() {
			return
		}
		p, started = np, time.Now()
		klog.InfoS("Relay-keeper mode: real server started; handing its root to the keeper", "volumeID", v.rv.volumeID, "pid", p.pid())
		<-v.kept
		v.rk.k.h.sendBackendToHolders(v.rv.volumeID)
	}
}

// stopBackend kills the real server and detaches its backend.
func (v *keptRelay) stopBackend() {
	_ = v.rv.Stop(context.Background())
	v.closeRoot()
}

// PID implements Server: the keeper's relay serving the staging connection.
func (v *keptRelay) PID() int {
	<-v.kept
	return v.ks.PID()
}

// Done implements Server: closed once the staging connection is over.
func (v *keptRelay) Done() <-chan struct{} {
	<-v.kept
	return v.ks.Done()
}

// InitRecord implements Server: the staging connection's, which a restarted plugin needs to check what the
// keeper hands back.
func (v *keptRelay) InitRecord() []byte {
	<-v.kept
	return v.ks.InitRecord()
}

// Stop implements Server: every copy of the staging connection is dropped (the keeper's relay ends with its
// mount), then the real server is killed and its backend detached.
func (v *keptRelay) Stop(ctx context.Context) error {
	<-v.kept
	err := v.ks.Stop(ctx)
	v.stopBackend()
	v.rk.drop(v)
	return err
}
