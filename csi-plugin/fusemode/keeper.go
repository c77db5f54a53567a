package fusemode

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/atomicfile"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/contract"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fdpass"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseconn"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/handover"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
)

// KeeperName is the mode in which no FUSE server runs in the plugin and no connection dies with it: the plugin
// mounts each staging path with a /dev/fuse descriptor of its own (it stays the only privileged part), keeps a
// copy of the descriptor, and hands the connection over a session (package handover) to a keeper
// (`csi-plugin keeper`, unprivileged, in a pod of its own), which keeps another copy and runs the FUSE servers.
// Each of the plugin, the keeper and a server can die and come back while the workloads only wait: see package
// keeper for who repairs what. A restarted plugin re-collects its copies from the keeper (Recollect).
const KeeperName = contract.ModeKeeper

// ErrNoKeeper is wrapped by Start when no keeper connected in time, or the one handed the connection did not
// serve it in time: the CO should retry later.
var ErrNoKeeper = Retryable(errors.New("no keeper connected"))

// DefaultKeeperID is the user and group ID the plugin expects a keeper to run as unless told otherwise: the
// chart's, chosen so that nothing else on a node runs as it (unlike 65534, nobody).
const DefaultKeeperID = 61731

// KeeperSecretName is the file beside the keeper socket that holds the per-node secret a keeper proves itself
// with (its hello's secret): the plugin writes a new one at every start, readable by the keeper's user only.
const KeeperSecretName = "keeper.secret"

// Bounds of the keeper socket: sessions at once (a keeper, and its successor during a rolling update, need
// two), and the Closer of what they send.
const (
	maxKeeperSessions = 8
	closeWorkers      = 4
	closePending      = 64
)

// maxReadBytes is the mount's max_read: a READ as large as the servers' max_write (dummyfs).
const maxReadBytes = 128 * 1024

// Keeper is the keeper mode: one holder (holder.go) of every volume's connection, on the keeper socket.
type Keeper struct {
	onStagingPath
	opts Options
	h    *holder

	mu     sync.Mutex
	secret []byte // this run's per-node secret, as written to the secret file
}

func init() { Register(KeeperName, func(o Options) (Mode, error) { return NewKeeper(o) }) }

// NewKeeper returns the keeper mode. It listens on opts.KeeperSocket once Recollect is called.
func NewKeeper(opts Options) (*Keeper, error) {
	if opts.KeeperSocket == "" {
		return nil, errors.New("keeper mode: the keeper socket path is empty")
	}
	server, err := fuseserver.Lookup(opts.Server.Name)
	if err != nil {
		return nil, fmt.Errorf("keeper mode: %w", err)
	}
	if !server.TakesOver {
		return nil, fmt.Errorf("keeper mode needs a FUSE server that takes over a live connection, and %s cannot: %s (use the child or sidecar mode)", server.Name, server.WhyNot)
	}
	if opts.KeeperUID < 0 {
		return nil, fmt.Errorf("keeper mode: the keeper's user ID must be given (got %d): no keeper socket is open to any user", opts.KeeperUID)
	}
	if err := checkUnservedLimit(opts.UnservedLimit); err != nil {
		return nil, fmt.Errorf("keeper mode: %w", err)
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 10 * time.Second
	}
	k := &Keeper{opts: opts}
	k.h = newHolder(opts.KeeperSocket, &sessionAuth{peer: k.peerIsKeeper, hello: k.helloHasSecret}, fdpass.NewCloser(closeWorkers, closePending), maxKeeperSessions)
	return k, nil
}

// peerIsKeeper lets a keeper session go on only from the keeper's user (and group, when set), as the kernel
// tells (SO_PEERCRED).
func (k *Keeper) peerIsKeeper(c *handover.Conn) error {
	cred, err := c.PeerCred()
	if err != nil {
		return err
	}
	if int(cred.Uid) != k.opts.KeeperUID || (k.opts.KeeperGID >= 0 && int(cred.Gid) != k.opts.KeeperGID) {
		return fmt.Errorf("peer uid %d gid %d (pid %d) is not the keeper's (uid %d gid %d)", cred.Uid, cred.Gid, cred.Pid, k.opts.KeeperUID, k.opts.KeeperGID)
	}
	return nil
}

// helloHasSecret lets it go on only with the secret of this plugin run, which only the keeper's user can read.
func (k *Keeper) helloHasSecret(hello handover.Msg) error {
	k.mu.Lock()
	secret := k.secret
	k.mu.Unlock()
	if len(secret) == 0 || subtle.ConstantTimeCompare(hello.Secret, secret) != 1 {
		return fmt.Errorf("the hello (pid %d) does not give the secret of %s", hello.PID, k.secretPath())
	}
	return nil
}

func (k *Keeper) secretPath() string {
	return filepath.Join(filepath.Dir(k.opts.KeeperSocket), KeeperSecretName)
}

// writeSecret makes a new per-node secret and writes it beside the socket, readable by the keeper's user
// only (and its group's, when set). The socket's directory is the plugin's: nobody else can put a link there.
func (k *Keeper) writeSecret() error {
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return err
	}
	path := k.secretPath()
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return err
	}
	if err := atomicfile.Write(path, []byte(hex.EncodeToString(secret)), 0o400); err != nil {
		return err
	}
	if err := os.Lchown(path, k.opts.KeeperUID, k.opts.KeeperGID); err != nil {
		return err
	}
	k.mu.Lock()
	k.secret = []byte(hex.EncodeToString(secret))
	k.mu.Unlock()
	return nil
}

// Name implements Mode.
func (k *Keeper) Name() string { return KeeperName }

// Recollect implements Mode: it records what to take back and starts listening for keepers.
func (k *Keeper) Recollect(recs Records) (map[string]Server, error) {
	out := map[string]Server{}
	for _, r := range recs.Stages {
		out[r.VolumeID] = &keptServer{h: k.h, c: k.h.expect(r.VolumeID, r.StagingPath, r.Init)}
	}
	if err := k.writeSecret(); err != nil {
		return nil, fmt.Errorf("keeper secret: %w", err)
	}
	// Who may connect: the keeper's user (group) only, by the socket's owner and mode; the chart mounts its
	// directory only into the keeper's pods; a session then proves uid, gid (peerIsKeeper) and the secret (helloHasSecret).
	mode := os.FileMode(0o600)
	if k.opts.KeeperGID >= 0 {
		mode = 0o660
	}
	ln, err := handover.Listen(k.opts.KeeperSocket, mode)
	if err != nil {
		return nil, fmt.Errorf("keeper socket: %w", err)
	}
	if err := os.Lchown(k.opts.KeeperSocket, k.opts.KeeperUID, k.opts.KeeperGID); err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("keeper socket: %w", err)
	}
	k.h.serve(ln)
	k.h.watchUnserved(k.opts.UnservedLimit)
	klog.InfoS("Waiting for keepers", "socket", k.opts.KeeperSocket, "recorded", len(recs.Stages), "unservedLimit", k.opts.UnservedLimit)
	logPauseLimit()
	return out, nil
}

// logPauseLimit says how long the kernel lets a connection wait for its next server.
func logPauseLimit() {
	switch limit, err := fuseconn.PauseLimit(); {
	case err != nil:
		klog.ErrorS(err, "Cannot read the kernel's FUSE request timeouts")
	case limit > 0:
		klog.InfoS("The kernel aborts a FUSE connection whose request waits longer than the request timeout: a FUSE server's successor must serve within it", "requestTimeout", limit)
	default:
		klog.V(2).InfoS("No FUSE request timeout: a connection waits for its next server as long as a holder keeps it")
	}
}

// Close stops listening and ends every session, then ends the closes of what sessions sent (holder.drain). The
// mounts stay: the keepers keep serving them, and the plugin's own copies close with the process.
func (k *Keeper) Close() error {
	k.h.close()
	drainAll([]*holder{k.h})
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
	o := fuseconn.MountOptions{Name: fuseserver.DummyFuse, Source: fuseserver.DummyFuse, ReadOnly: !k.opts.Writable, DefaultPermissions: k.opts.Writable, AllowOther: true, MaxRead: maxReadBytes}
	if err := fuseconn.Mount(dev, req.Mountpoint, o); err != nil {
		dev.Close()
		return nil, err
	}
	srv := &keptServer{h: k.h, c: k.h.add(req.VolumeID, req.Mountpoint, dev)}
	wctx, cancel := context.WithTimeout(ctx, k.opts.StartTimeout)
	defer cancel()
	if err := k.h.waitServed(wctx, srv.c); err != nil {
		srv.undo()
		return nil, fmt.Errorf("volume %s: %w", req.VolumeID, err)
	}
	if err := mounts.WaitAnswering(wctx, req.Mountpoint, ServedFile, srv.c.done); err != nil {
		srv.undo()
		return nil, err
	}
	klog.V(4).InfoS("FUSE connection served by the keeper", "volumeID", req.VolumeID, "mountpoint", req.Mountpoint, "pid", srv.PID())
	return srv, nil
}

// keptServer is the Server of a connection in keeper mode.
type keptServer struct {
	h *holder
	c *keptConn
}

// PID is the serving process as the keeper sees it (its PID namespace), 0 while none.
func (s *keptServer) PID() int {
	_, pid := s.h.served(s.c)
	return pid
}

// Done is closed once the connection is over (unmounted, or stopped).
func (s *keptServer) Done() <-chan struct{} { return s.c.done }

// InitRecord implements Server.
func (s *keptServer) InitRecord() []byte { return s.h.initRecord(s.c) }

// Stop ends the connection's life with the plugin and the keepers: every copy is dropped. The caller unmounts
// (normally first: the keeper's server then ends on its own).
func (s *keptServer) Stop(context.Context) error {
	s.h.forget(s.c)
	return nil
}

// undo gives up a connection whose start failed: the mount goes, then every copy.
func (s *keptServer) undo() {
	_ = unix.Unmount(s.c.mountpoint, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
	_ = s.Stop(context.Background())
}
