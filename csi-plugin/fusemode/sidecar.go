package fusemode

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/contract"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fdpass"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseconn"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/handover"
)

// SidecarName is the mode of the GCS FUSE CSI driver (pkg/csi_mounter/csi_mounter.go in
// GoogleCloudPlatform/gcs-fuse-csi-driver): no FUSE server runs on the node. NodePublishVolume opens /dev/fuse,
// mounts the target with fd=N and hands the descriptor over a unix socket, inside a volume of the pod, to an
// unprivileged sidecar container of the workload pod, which serves it. The plugin closes its own copy once it is
// sent, so the mount lives and dies with the sidecar, not with the plugin.
const SidecarName = contract.ModeSidecar

const (
	// SidecarVolume is the emptyDir volume that a pod using the sidecar mode must have, mounted in its sidecar
	// container: the plugin puts each CSI volume's socket in <SidecarVolume>/<volume spec name>/<SocketName>.
	SidecarVolume = contract.SidecarVolume
	// SocketName is the name of the socket in the directory of TargetRequest.SocketDir.
	SocketName = contract.SidecarSocket
)

// TargetRequest describes one target to mount.
type TargetRequest struct {
	VolumeID string
	// Target is the publish target: an existing empty directory with nothing mounted on it.
	Target   string
	ReadOnly bool
	// PodDir is the pod's directory, which the plugin trusts; SocketDir is relative to it and lies in a volume
	// the pod can write to, so it is opened without following any symlink and without leaving PodDir.
	PodDir, SocketDir string
}

// Handover is the JSON sent beside the descriptor.
type Handover struct {
	VolumeID string `json:"volumeID"`
	ReadOnly bool   `json:"readOnly"`
}

// Sidecar is the sidecar mode.
type Sidecar struct {
	opts    Options
	server  fuseserver.Kind // what the sidecars run: the plugin runs no server itself
	mu      sync.Mutex
	pending map[string]*waitingHandover // by target: the descriptor still to send (GCS's design)
	held    map[string]*heldTarget      // by target: the connections kept for the sidecars (KeepFD)
}

type waitingHandover struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// NewSidecar returns the sidecar mode. It needs no FUSE server on the node: the sidecar runs it. Keeping a copy
// of each connection for the next sidecar (SidecarKeepFD) needs a server that takes a live connection over.
func NewSidecar(opts Options) (*Sidecar, error) {
	server, err := fuseserver.Lookup(opts.Server.Name)
	if err != nil {
		return nil, fmt.Errorf("sidecar mode: %w", err)
	}
	if opts.SidecarKeepFD && !server.TakesOver {
		return nil, fmt.Errorf("sidecar mode: --sidecar-keep-fd needs a FUSE server that takes over a live connection, and %s cannot: %s", server.Name, server.WhyNot)
	}
	if err := checkUnservedLimit(opts.UnservedLimit); err != nil {
		return nil, fmt.Errorf("sidecar mode: %w", err)
	}
	if opts.SendTimeout <= 0 {
		opts.SendTimeout = 10 * time.Second
	}
	return &Sidecar{opts: opts, server: server, pending: map[string]*waitingHandover{}, held: map[string]*heldTarget{}}, nil
}

// Name implements Mode.
func (s *Sidecar) Name() string { return SidecarName }

// Start implements Mode: the sidecar mode serves nothing on staging paths.
func (s *Sidecar) Start(context.Context, Request) (Server, error) {
	return nil, errors.New("sidecar mode mounts publish targets, not staging paths")
}

// Close ends every handover still waiting (as the plugin's exit would): their mounts die. With KeepFD it only
// stops listening: the sidecars serve on, and hand their copies to the next plugin.
func (s *Sidecar) Close() error {
	s.mu.Lock()
	targets := make([]string, 0, len(s.pending))
	for t := range s.pending {
		targets = append(targets, t)
	}
	held := s.held
	s.held = map[string]*heldTarget{}
	s.mu.Unlock()
	for _, t := range targets {
		s.Release(t)
	}
	hs := make([]*holder, 0, len(held))
	for _, t := range held {
		t.release(true)
		hs = append(hs, t.h)
	}
	drainAll(hs)
	return nil
}

// targetMount is how a target is mounted: with the options of the GCS FUSE CSI driver (nosuid, nodev,
// allow_other so the workload's user reaches it, default_permissions so the kernel checks modes, and ro for
// read-only volumes), named after the server the sidecars run (fuse.<server> in the mount table).
func (s *Sidecar) targetMount(readOnly bool) fuseconn.MountOptions {
	return fuseconn.MountOptions{Name: s.server.Name, Source: s.server.Name, ReadOnly: readOnly, AllowOther: true, DefaultPermissions: true}
}

// MountTarget mounts req.Target and starts handing the FUSE connection to the server that connects to the socket
// (one only, or with KeepFD every one in turn); it returns once the target is mounted.
func (s *Sidecar) MountTarget(_ context.Context, req TargetRequest) (err error) {
	s.mu.Lock()
	_, busy := s.pending[req.Target]
	_, held := s.held[req.Target]
	s.mu.Unlock()
	if busy || held {
		return fmt.Errorf("a handover of %s is already waiting", req.Target)
	}
	network := "unix"
	if s.opts.SidecarKeepFD {
		network = "unixpacket" // a session (package handover) instead of one message
	}
	// What the pod can make slow to close (the sockets in its volume, whatever its sidecar sends) is closed
	// by a Closer of the target's own: a pod that jams it stalls nothing but its own socket.
	closer := targetCloser()
	ln, dev, sockDir, err := s.prepareTarget(req, network, closer)
	if err != nil {
		return err
	}
	socket := filepath.Join(req.PodDir, req.SocketDir, SocketName)
	if s.opts.SidecarKeepFD {
		h := newHolder(socket, nil, closer, maxTargetSessions) // any user: the pod runs its sidecar as it likes
		t := &heldTarget{h: h, c: h.add(req.VolumeID, req.Target, dev), sockDir: sockDir}
		h.serve(handover.ListenerOf(ln))
		h.watchUnserved(s.opts.UnservedLimit) // a sidecar that never comes back must not hang the pod's readers
		s.mu.Lock()
		s.held[req.Target] = t
		s.mu.Unlock()
		klog.V(4).InfoS("Target mounted, its connection kept for the sidecar", "volumeID", req.VolumeID, "target", req.Target, "socket", socket)
		return nil
	}

	ctx, cancel := context.WithCancel(context.Background())
	h := &waitingHandover{cancel: cancel, done: make(chan struct{})}
	s.mu.Lock()
	s.pending[req.Target] = h
	s.mu.Unlock()
	go func() {
		defer close(h.done)
		err := fdpass.SendOnce(ctx, ln, dev, Handover{VolumeID: req.VolumeID, ReadOnly: req.ReadOnly}, s.opts.SendTimeout, closer)
		// Closed in every case, as GCS does: from now on the mount lives only as long as its server.
		_ = dev.Close()
		_ = removeSocket(sockDir)
		_ = sockDir.Close()
		s.mu.Lock()
		if s.pending[req.Target] == h {
			delete(s.pending, req.Target)
		}
		s.mu.Unlock()
		if err != nil {
			klog.ErrorS(err, "FUSE descriptor not handed to a sidecar; the mount is dead", "volumeID", req.VolumeID, "target", req.Target)
			return
		}
		klog.V(2).InfoS("FUSE descriptor handed to the sidecar", "volumeID", req.VolumeID, "target", req.Target)
	}()
	klog.V(4).InfoS("Target mounted, waiting for the sidecar", "volumeID", req.VolumeID, "target", req.Target, "socket", socket)
	return nil
}

// RecollectTargets takes back, from whichever sidecar connects to each target's socket, the connections of the
// recorded targets (only the connection the kernel shows mounted at the target is adopted), and returns what it
// could not set up, per target. Without KeepFD there is nothing to take back (the sidecars hold the only copies).
func (s *Sidecar) RecollectTargets(reqs []TargetRequest) map[string]error {
	if !s.opts.SidecarKeepFD {
		return nil
	}
	errs := map[string]error{}
	for _, req := range reqs {
		dir, err := openSocketDir(req.PodDir, req.SocketDir)
		if err != nil {
			errs[req.Target] = err
			continue
		}
		closer := targetCloser()
		ln, err := listenIn(dir, "unixpacket", SocketName, closer)
		if err != nil {
			dir.Close()
			errs[req.Target] = fmt.Errorf("socket in %s: %w", dir.Name(), err)
			continue
		}
		h := newHolder(filepath.Join(req.PodDir, req.SocketDir, SocketName), nil, closer, maxTargetSessions)
		t := &heldTarget{h: h, c: h.expect(req.VolumeID, req.Target, nil), sockDir: dir}
		h.serve(handover.ListenerOf(ln))
		h.watchUnserved(s.opts.UnservedLimit)
		s.mu.Lock()
		s.held[req.Target] = t
		s.mu.Unlock()
	}
	return errs
}

// prepareTarget opens the socket directory of req, listens there (network "unix" or "unixpacket"), opens a
// connection and mounts req.Target with it. It returns the listener, the connection's descriptor and the socket
// directory (kept open: the socket's address goes through it, and it is removed through it at the end), or an
// error after undoing what it did.
func (s *Sidecar) prepareTarget(req TargetRequest, network string, closer *fdpass.Closer) (*net.UnixListener, *os.File, *os.File, error) {
	dir, err := openSocketDir(req.PodDir, req.SocketDir)
	if err != nil {
		return nil, nil, nil, err
	}
	ln, err := listenIn(dir, network, SocketName, closer)
	if err != nil {
		dir.Close()
		return nil, nil, nil, fmt.Errorf("socket in %s: %w", filepath.Join(req.PodDir, req.SocketDir), err)
	}
	undo := func() {
		go closer.Close(ln) // the pod may have queued slow descriptors on it: not on the publish call's path
		_ = removeSocket(dir)
		_ = dir.Close()
	}
	dev, err := fuseconn.Open()
	if err != nil {
		undo()
		return nil, nil, nil, err
	}
	if err := fuseconn.Mount(dev, req.Target, s.targetMount(req.ReadOnly)); err != nil {
		_ = dev.Close()
		undo()
		return nil, nil, nil, err
	}
	return ln, dev, dir, nil
}

// heldTarget is a target of the KeepFD sidecar mode: its holder, its connection, its socket directory.
type heldTarget struct {
	h       *holder
	c       *keptConn
	sockDir *os.File
}

// release drops every copy of the connection (forget: the sidecar is told to stop) or, with keep, only stops
// listening (the plugin exits: the sidecar serves on and comes back to the next plugin), and removes the socket.
func (t *heldTarget) release(keep bool) {
	if !keep {
		t.h.forget(t.c)
	}
	t.h.close()
	_ = removeSocket(t.sockDir)
	_ = t.sockDir.Close()
}

// Release implements Mode.
func (s *Sidecar) Release(target string) {
	s.mu.Lock()
	h := s.pending[target]
	t := s.held[target]
	delete(s.held, target)
	s.mu.Unlock()
	if t != nil {
		t.release(false)
	}
	if h == nil {
		return
	}
	h.cancel()
	// The handover closes what the pod can make slow to close through the Closer, so it ends at once; the
	// bound is for what cannot be foreseen: unpublish and the plugin's exit never wait longer.
	select {
	case <-h.done:
	case <-time.After(releaseWait):
		klog.ErrorS(nil, "The handover to the sidecar did not end in time; leaving it", "target", target, "waited", releaseWait)
	}
}

// releaseWait bounds how long Release waits for a handover to end.
const releaseWait = 2 * time.Second

// maxTargetSessions bounds the sessions at once on one target's socket (KeepFD): a sidecar and its restarted
// successor.
const maxTargetSessions = 4

// targetCloser returns the Closer of one target: one worker (one thread at most stuck per target), a few
// waiting.
func targetCloser() *fdpass.Closer { return fdpass.NewCloser(1, 16) }

// Pending reports whether target's descriptor is still waiting for its server: with KeepFD, whether no sidecar
// serves the target's connection yet.
func (s *Sidecar) Pending(target string) bool {
	s.mu.Lock()
	_, ok := s.pending[target]
	t := s.held[target]
	s.mu.Unlock()
	if t != nil {
		served, _ := t.h.served(t.c)
		return !served
	}
	return ok
}

// openSocketDir opens (creating its last element) podDir/rel without following symlinks and without leaving
// podDir: rel lies in a volume that the pod's containers can write to, and the plugin is root. The last element
// is created by the plugin (mode 0755), so nobody else can put anything in it; one that exists must be a
// directory of the plugin's user.
func openSocketDir(podDir, rel string) (*os.File, error) {
	if !filepath.IsLocal(rel) {
		return nil, fmt.Errorf("socket directory %q is not inside the pod directory", rel)
	}
	root, err := os.OpenFile(podDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	parentRel, name := filepath.Dir(rel), filepath.Base(rel)
	parent, err := unix.Openat2(int(root.Fd()), parentRel, how)
	if errors.Is(err, unix.ENOENT) {
		return nil, fmt.Errorf("%s does not exist: the pod needs an emptyDir volume called %s (mounted in its sidecar), or kubelet has not set it up yet", filepath.Join(podDir, parentRel), SidecarVolume)
	}
	if err != nil {
		return nil, &os.PathError{Op: "open (no symlinks)", Path: filepath.Join(podDir, parentRel), Err: err}
	}
	defer unix.Close(parent)
	if err := unix.Mkdirat(parent, name, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
		return nil, &os.PathError{Op: "mkdir", Path: filepath.Join(podDir, rel), Err: err}
	}
	fd, err := unix.Openat2(parent, name, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: how.Resolve})
	if err != nil {
		return nil, &os.PathError{Op: "open (no symlinks)", Path: filepath.Join(podDir, rel), Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || int(st.Uid) != os.Getuid() || st.Mode&0o022 != 0 {
		unix.Close(fd)
		return nil, fmt.Errorf("socket directory %s is not the plugin's own (uid %d, mode %#o): refusing to use it", filepath.Join(podDir, rel), st.Uid, st.Mode&0o7777)
	}
	return os.NewFile(uintptr(fd), filepath.Join(podDir, rel)), nil
}

// listenIn listens on a socket of network ("unix", "unixpacket") called name in dir, replacing a socket left by
// an earlier handover; on failure the socket is closed through closer. The address goes through /proc/self/fd: short whatever dir's path (sun_path holds 108
// bytes; GCS symlinks a short path for the same reason), and no symlink on the way can move it.
func listenIn(dir *os.File, network, name string, closer *fdpass.Closer) (*net.UnixListener, error) {
	if err := removeSocket(dir); err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("/proc/self/fd/%d/%s", dir.Fd(), name)
	var lc net.ListenConfig
	if network == "unix" {
		// One message goes out (fdpass.SendOnce) and none is read: the pod may queue no descriptor at all.
		lc.Control = fdpass.RefuseRightsControl
	}
	l, err := lc.Listen(context.Background(), network, addr)
	if err != nil {
		return nil, err
	}
	ln := l.(*net.UnixListener)
	ln.SetUnlinkOnClose(false) // the address is only valid while dir is open: removeSocket does it
	// Any user in the pod may connect (the sidecar runs as non-root): the first one gets the descriptor.
	if err := chmodSocket(dir, name); err != nil {
		go closer.Close(ln) // the pod may have queued slow descriptors on it: not on the publish call's path
		_ = removeSocket(dir)
		return nil, fmt.Errorf("chmod socket: %w", err)
	}
	return ln, nil
}

// chmodSocket makes the socket called name in dir connectable by anyone (0666). A pod's root can replace the
// name between bind and chmod, so the chmod never goes through the name: the file is opened without following
// a symlink (O_PATH|O_NOFOLLOW), checked to be a socket, and its mode set through that descriptor.
func chmodSocket(dir *os.File, name string) error {
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK || int(st.Uid) != os.Getuid() {
		return fmt.Errorf("%s/%s is not the plugin's socket (mode %#o, uid %d): left alone", dir.Name(), name, st.Mode, st.Uid)
	}
	// chmod(2) of a /proc/self/fd link acts on the inode the descriptor holds, whatever the name now is.
	return unix.Chmod(fmt.Sprintf("/proc/self/fd/%d", fd), 0o666)
}

// removeSocket removes the socket of a handover from dir; anything else there is left alone.
func removeSocket(dir *os.File) error {
	var st unix.Stat_t
	err := unix.Fstatat(int(dir.Fd()), SocketName, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return fmt.Errorf("%s/%s exists and is not a socket: left alone", dir.Name(), SocketName)
	}
	return unix.Unlinkat(int(dir.Fd()), SocketName, 0)
}
