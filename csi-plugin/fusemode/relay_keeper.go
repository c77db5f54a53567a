package fusemode

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/contract"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseconn"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/handover"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
)

// RelayKeeperName is the relay mode with the relay and the real server held by the keeper: the staging
// connection is the keeper mode's (the plugin mounts it, keeps a copy and hands it to the keeper), the keeper's
// servers relay it (dummy-fuse --session --relay-node-dir) to the backend root the plugin hands over with it,
// and the keeper runs the real server (csi-plugin keeper --relay-server) on the backend connection the plugin
// mounts, privately, and hands over as a descriptor. Descriptors work from the keeper's mount namespace, and the
// relay's root keeps the backend mount alive when the plugin's namespace goes. So the plugin's death touches
// nothing that serves; the real server's death makes the plugin (the only one that may mount) mount a new
// backend for the keeper; the keeper's death costs its relays and real servers, which the next keeper's replace
// from the plugin's copy, a new backend and the node tables in the keeper's own directory. See
// csi-plugin/README.md "Relay mode".
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

// NewRelayKeeper checks the real server as the relay mode does (the keeper runs it; the plugin names its
// mounts after it) and the keeper's settings as the keeper mode does; the servers the keeper runs for the
// staging connections are relays (dummy-fuse), which take connections over.
func NewRelayKeeper(opts Options) (*RelayKeeper, error) {
	r, err := NewRelay(opts)
	if err != nil {
		return nil, fmt.Errorf("relay-keeper mode: %w", err)
	}
	// The keeper runs the server in its own mount namespace, unprivileged: it can only serve a backend the
	// plugin mounted and passed, as /dev/fd/N or through the keeper's fusermount stand-in, never mount one.
	if r.selfMount != nil && !r.server.Kind().Fusermount() {
		return nil, fmt.Errorf("relay-keeper mode: the plugin mounts the backend and the keeper's server serves it as %s or asks fusermount for it (its spec's fusermount): %w", fuseserver.FDPath, r.selfMount)
	}
	ko := opts
	ko.Server = fuseserver.Spec{Name: fuseserver.DummyFuse}
	k, err := NewKeeper(ko)
	if err != nil {
		return nil, fmt.Errorf("relay-keeper mode: %w", err)
	}
	rk := &RelayKeeper{k: k, r: r, vols: map[string]*keptRelay{}}
	k.h.backendOf, k.h.exclusive = rk.backendOf, true
	k.h.backendEnded, k.h.sessionEnded = rk.backendEnded, rk.sessionEnded
	k.h.ownsAlso = rk.ownsBackend
	return rk, nil
}

// ownsBackend reports whether FUSE connection id is a volume's newest backend: the plugin mounted it, and only
// the keeper's real server holds it.
func (rk *RelayKeeper) ownsBackend(id uint32) bool {
	rk.mu.Lock()
	vols := slices.Collect(maps.Values(rk.vols))
	rk.mu.Unlock()
	for _, v := range vols {
		v.mu.Lock()
		own := v.backendID == id
		v.mu.Unlock()
		if own {
			return true
		}
	}
	return false
}

// Name implements Mode.
func (rk *RelayKeeper) Name() string { return RelayKeeperName }

// Close implements Mode: the keeper sessions end; the keeper's relays and the plugin's servers stay.
func (rk *RelayKeeper) Close() error {
	_ = rk.k.Close()
	return rk.r.Close()
}

// KeeperNodeDirName is the directory beside the keeper socket that the plugin makes for the keeper's relays'
// node tables (the keeper's --relay-node-dir): it lives on the node as the socket does, so it outlives every
// keeper, and only the plugin, which runs as root, can create it owned by the keeper's unprivileged user.
const KeeperNodeDirName = "relay-nodes"

// makeNodeDir creates KeeperNodeDirName owned by the keeper's user (and group), mode 0700. What is already there
// is kept only when it is a directory (Lstat: the socket's directory is the plugin's, but a link is never followed).
func (rk *RelayKeeper) makeNodeDir() error {
	dir := filepath.Join(filepath.Dir(rk.k.opts.KeeperSocket), KeeperNodeDirName)
	if err := os.MkdirAll(filepath.Dir(dir), 0o750); err != nil {
		return fmt.Errorf("keeper node directory: %w", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !os.IsExist(err) {
		return fmt.Errorf("keeper node directory: %w", err)
	}
	if fi, err := os.Lstat(dir); err != nil {
		return fmt.Errorf("keeper node directory: %w", err)
	} else if !fi.IsDir() {
		return fmt.Errorf("keeper node directory %s is not a directory (%v)", dir, fi.Mode().Type())
	}
	if err := os.Lchown(dir, rk.k.opts.KeeperUID, rk.k.opts.KeeperGID); err != nil {
		return fmt.Errorf("keeper node directory: %w", err)
	}
	return nil
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
// keeper). The real servers run in the keeper and outlived this plugin, and the keeper's relays hold their
// backends' roots: nothing is mounted until a keeper says a real server died or its session ends.
func (rk *RelayKeeper) Recollect(recs Records) (map[string]Server, error) {
	// The volumes first: a keeper may say a real server is gone the moment it connects.
	if err := rk.makeNodeDir(); err != nil {
		return nil, err
	}
	vols := map[string]*keptRelay{}
	for _, rec := range recs.Stages {
		vols[rec.VolumeID] = rk.newVolume(rec.VolumeID, nil)
	}
	kept, err := rk.k.Recollect(recs)
	if err != nil {
		for _, v := range vols {
			rk.drop(v)
		}
		return nil, err
	}
	out := map[string]Server{}
	for id, v := range vols {
		ks, ok := kept[id].(*keptServer)
		if !ok {
			rk.drop(v)
			continue
		}
		v.setKept(ks)
		go v.serveBackend(false)
		out[id] = v
	}
	return out, nil
}

// Start implements Mode: the backend first (mounted privately, its real server started by the keeper,
// answering, its root ready to hand over), then the staging connection, handed to the keeper with that root.
func (rk *RelayKeeper) Start(ctx context.Context, req Request) (Server, error) {
	v := rk.newVolume(req.VolumeID, nil)
	wctx, cancel := context.WithTimeout(ctx, rk.r.opts.StartTimeout)
	defer cancel()
	if err := v.startBackend(wctx); err != nil {
		rk.drop(v)
		v.stopBackend()
		return nil, fmt.Errorf("volume %s: real server %s: %w", req.VolumeID, rk.r.server.Name(), err)
	}
	s, err := rk.k.Start(ctx, req)
	if err != nil {
		rk.drop(v)
		v.stopBackend()
		return nil, err
	}
	v.setKept(s.(*keptServer))
	go v.serveBackend(true)
	klog.V(4).InfoS("FUSE connection relayed by the keeper", "volumeID", req.VolumeID, "mountpoint", req.Mountpoint)
	return v, nil
}

func (rk *RelayKeeper) newVolume(volumeID string, ks *keptServer) *keptRelay {
	v := &keptRelay{rk: rk, volumeID: volumeID, backend: filepath.Join(rk.r.volumeDir(volumeID), "backend"), ks: ks,
		kept: make(chan struct{}), stop: make(chan struct{}), ended: make(chan struct{})}
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
	if rk.vols[v.volumeID] == v {
		delete(rk.vols, v.volumeID)
	}
	rk.mu.Unlock()
}

func (rk *RelayKeeper) volume(id string) *keptRelay {
	rk.mu.Lock()
	defer rk.mu.Unlock()
	return rk.vols[id]
}

// backendEnded hears a keeper say the real server of a volume exited: only the session that runs it counts
// (after a restart of the plugin, which does not know which one does, any session).
func (rk *RelayKeeper) backendEnded(volume string, s *keeperSession) {
	if v := rk.volume(volume); v != nil {
		v.serverGone(s, true)
	}
}

// sessionEnded: the real servers of an ended session died with its keeper.
func (rk *RelayKeeper) sessionEnded(s *keeperSession, held []string) {
	rk.mu.Lock()
	vols := make([]*keptRelay, 0, len(rk.vols))
	for _, v := range rk.vols {
		vols = append(vols, v)
	}
	rk.mu.Unlock()
	for _, v := range vols {
		v.serverGone(s, slices.Contains(held, v.volumeID))
	}
}

// keptRelay is one volume of the relay-keeper mode (its Server): the staging connection as the keeper mode
// holds it, and the backend the plugin mounts and the keeper's real server serves.
type keptRelay struct {
	rk                *RelayKeeper
	volumeID, backend string
	kept              chan struct{} // closed once ks is set
	ks                *keptServer
	stop              chan struct{}
	stopOnce          sync.Once

	mu        sync.Mutex
	root      *os.File       // the newest backend's root (O_PATH), handed to every keeper session holding the volume
	backendID uint32         // the newest backend's connection (fuseconn.ID), 0 while unknown
	session   *keeperSession // the session whose keeper runs the real server; nil while unknown
	ended     chan struct{}  // closed once that server is gone
}

func (v *keptRelay) setKept(ks *keptServer) {
	v.ks = ks
	close(v.kept)
}

// serverGone closes ended when s runs the volume's real server, or, while that is unknown, when s held the
// volume (held).
func (v *keptRelay) serverGone(s *keeperSession, held bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.session == s || (v.session == nil && held) {
		closeOnce(v.ended)
		if v.root != nil { // dead with its server: the next keeper waits for the new one rather than relay this
			v.root.Close()
			v.root = nil
		}
	}
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

// startBackend detaches what is left at the volume's own backend directory (only a mount of the server's
// type), mounts a new backend there and hands its descriptor to a keeper, whose real server serves it; once it
// answers, its root is opened (O_PATH: the open asks nothing of the server; the relay needs it only to open
// below it and to statfs) and handed to the keeper sessions that hold the volume.
func (v *keptRelay) startBackend(ctx context.Context) error {
	r := v.rk.r
	r.detachBackend(v.backend)
	// Made at every mount, not once at the stage: the relay directory is the plugin pod's emptyDir, and a
	// restarted plugin's pod has a new, empty one, where the first backend it mounts (its predecessor's real
	// server died) has no directory yet.
	if err := os.MkdirAll(v.backend, 0o700); err != nil {
		return fmt.Errorf("relay directory: %w", err)
	}
	s, err := v.rk.k.h.sessionFor(ctx, v.volumeID)
	if err != nil {
		return err
	}
	dev, err := fuseconn.Open()
	if err != nil {
		return err
	}
	name := r.server.Name()
	if err := fuseconn.Mount(dev, v.backend, fuseconn.MountOptions{Name: name, Source: name, ReadOnly: !r.opts.Writable, AllowOther: true}); err != nil {
		dev.Close()
		return err
	}
	id, _ := fuseconn.ID(int(dev.Fd())) // to abort it if the keeper never serves it: a probe of it would wait
	ended := make(chan struct{})
	v.mu.Lock()
	v.session, v.ended, v.backendID = s, ended, id
	v.mu.Unlock()
	// The plugin keeps no copy: the server's death must end the backend's connection (ENOTCONN), not leave
	// its requests queued.
	err = s.conn.Send(handover.Msg{Kind: handover.BackendServe, Volume: v.volumeID}, dev)
	dev.Close()
	if err == nil {
		err = mounts.WaitAnswering(ctx, v.backend, ServedFile, ended)
	}
	var fd int
	if err == nil {
		fd, err = unix.Open(v.backend, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		if id != 0 {
			_ = fuseconn.Abort(id)
		}
		_ = unix.Unmount(v.backend, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
		return fmt.Errorf("the keeper's real server (%s pid %d) did not serve the backend: %w", s.role, s.pid, err)
	}
	v.mu.Lock()
	old := v.root
	v.root = os.NewFile(uintptr(fd), v.backend)
	v.mu.Unlock()
	if old != nil {
		old.Close()
	}
	v.rk.k.h.sendBackendToHolders(v.volumeID)
	return nil
}

// serveBackend mounts a new backend whenever the real server is gone (at once: started false for a running
// one), with a back-off while the starts fail or the servers die within relayStable of their start, until
// the volume stops.
func (v *keptRelay) serveBackend(started bool) {
	var backoff time.Duration
	last := time.Now()
	for {
		v.mu.Lock()
		ended := v.ended
		v.mu.Unlock()
		if started {
			select {
			case <-ended:
			case <-v.stop:
				return
			}
			klog.ErrorS(nil, "Relay-keeper mode: the real server is gone; mounting a new backend", "volumeID", v.volumeID)
			if time.Since(last) >= relayStable {
				backoff = 0
			} else {
				backoff = min(max(2*backoff, relayMinBackoff), relayMaxBackoff)
			}
		} else {
			select {
			case <-ended:
			case <-v.stop:
				return
			}
		}
		select {
		case <-time.After(backoff):
		case <-v.stop:
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), v.rk.r.opts.StartTimeout)
		err := v.startBackend(ctx)
		cancel()
		if err != nil {
			backoff = min(max(2*backoff, relayMinBackoff), relayMaxBackoff)
			klog.ErrorS(err, "Relay-keeper mode: starting the real server failed", "volumeID", v.volumeID, "retryIn", backoff)
			started = false
			v.mu.Lock()
			closeOnce(v.ended) // try again
			v.mu.Unlock()
			continue
		}
		klog.InfoS("Relay-keeper mode: real server serves a new backend; its root handed to the keeper", "volumeID", v.volumeID)
		started, last = true, time.Now()
	}
}

// stopBackend ends serveBackend, tells the keeper that ran the real server to stop it, detaches the backend
// and closes its root.
func (v *keptRelay) stopBackend() {
	v.stopOnce.Do(func() { close(v.stop) })
	v.mu.Lock()
	s, root := v.session, v.root
	v.root = nil
	v.mu.Unlock()
	if s != nil {
		_ = s.conn.Send(handover.Msg{Kind: handover.Stop, Volume: v.volumeID}, nil)
	}
	v.rk.r.detachBackend(v.backend)
	if root != nil {
		root.Close()
	}
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
// mount), the keeper's real server is stopped and the backend detached.
func (v *keptRelay) Stop(ctx context.Context) error {
	<-v.kept
	err := v.ks.Stop(ctx)
	v.stopBackend()
	v.rk.drop(v)
	return err
}
