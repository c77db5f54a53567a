package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/keeper"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/contract"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// The keeper of the plugin's keeper modes (topology.Keeper, topology.RelayKeeper), as the chart deploys it: `csi-plugin
// keeper` in a container of its own (new mount and PID namespaces: its FUSE servers die with it), user 65534
// without capabilities, with the plugin's socket directory mounted and a directory for its status
// file; its two binaries are bind-mounted in, standing in for its image.
const (
	// keeperUser is the keeper's runAsUser and runAsGroup (nobody).
	keeperUser = 65534
	// keeperSocketDir is where the plugin's socket directory appears in the keeper; keeperStatusDir holds its
	// status file.
	keeperSocketDir = "/mnt/csi"
	keeperStatusDir = "/mnt/keeper"
)

// keeperInstance is one run of the keeper container.
type keeperInstance struct {
	p         *proc
	n         int    // its number: 0, 1, … in start order
	version   string // the version of its dummy-fuse
	statusDir string // host side of keeperStatusDir
	out       chan struct{}
	connected chan struct{} // closed once it is connected to the plugin (it serves whatever the plugin hands it)
	served    chan struct{} // closed at its first "served" line: it serves the volume
}

// keeperPart is the keeper container of the keeper mode: the running instance, those an upgrade or a restart
// replaced, and the binaries the next one runs.
type keeperPart struct {
	noPart
	b                    *Backend
	cur                  *keeperInstance
	old                  []*keeperInstance
	starts               int
	pluginPath, fusePath string
	log                  *scenarios.LogFile
	// servedBy is the PID (in the keeper's namespace) of the server the keeper last said serves the volume.
	servedBy atomic.Int64
}

// newKeeperPart is the keeper of the modes that have one.
func newKeeperPart(b *Backend, env *scenarios.Env) (part, error) {
	logs, err := env.Logs("keeper.log")
	if err != nil {
		return nil, err
	}
	b.logs.all = append(b.logs.all, logs[0])
	b.peers.keeper = &keeperPart{b: b, log: logs[0], pluginPath: b.opts.PluginPath, fusePath: b.opts.FusePath}
	return b.peers.keeper, nil
}

// pluginArgs lets the keeper's user connect to the plugin's keeper socket.
func (k *keeperPart) pluginArgs() []string {
	return []string{fmt.Sprintf("--keeper-uid=%d", keeperUser)}
}

// deploy starts the first keeper once the plugin serves.
func (k *keeperPart) deploy(context.Context) error {
	// The keeper (uid 65534) reaches the plugin's keeper socket through this directory, as the chart's
	// hostPath gives it (created 0755).
	if err := os.Chmod(filepath.Dir(k.b.sock), 0o755); err != nil {
		return err
	}
	var err error
	k.cur, err = k.startInstance(k.pluginPath, k.fusePath)
	return err
}

// teardown stops every keeper still running and waits (briefly) until its log is read.
func (k *keeperPart) teardown() error {
	var errs []error
	for _, ki := range k.instances() {
		if !ki.p.exited() {
			k.b.logf("teardown: stop keeper#%d pid %d", ki.n, ki.p.pid())
			if err := ki.p.stop(5 * time.Second); err != nil {
				errs = append(errs, fmt.Errorf("stop keeper: %w", err))
			}
		}
		select {
		case <-ki.out:
		case <-time.After(2 * time.Second):
		}
	}
	return errors.Join(errs...)
}

// instances lists every keeper instance started, the running one last.
func (k *keeperPart) instances() []*keeperInstance {
	if k.cur == nil {
		return k.old
	}
	return append(append([]*keeperInstance(nil), k.old...), k.cur)
}

func (k *keeperPart) procs() []knownProc {
	var out []knownProc
	for _, ki := range k.instances() {
		out = append(out, knownProc{ki.p, fmt.Sprintf("keeper container #%d: pid %d (csi-plugin keeper, uid %d), status %s/status.json",
			ki.n, ki.p.pid(), keeperUser, ki.statusDir)})
	}
	return out
}

func (k *keeperPart) event(kind scenarios.Kind, t time.Time, msg string) {
	k.b.rec.Add(scenarios.Event{Time: t, Source: scenarios.SrcComponent, Component: topology.KeeperContainer, Kind: kind, Message: msg})
}

func (k *keeperPart) serverEvent(kind scenarios.Kind, t time.Time, msg, version string) {
	k.b.rec.Add(scenarios.Event{Time: t, Source: scenarios.SrcComponent, Component: topology.FuseServer, Kind: kind, Message: msg, Detail: version})
}

// startInstance starts a keeper container running pluginPath's `keeper` with fusePath as its FUSE server, and
// returns once it runs (it serves once the plugin hands it connections: ready).
func (k *keeperPart) startInstance(pluginPath, fusePath string) (*keeperInstance, error) {
	b := k.b
	version, err := binaryVersion(fusePath)
	if err != nil {
		return nil, err
	}
	n := k.starts
	k.starts++
	ki := &keeperInstance{n: n, version: version, statusDir: filepath.Join(b.dir, fmt.Sprintf("keeper-%d", n)),
		out: make(chan struct{}), connected: make(chan struct{}), served: make(chan struct{})}
	if err := os.MkdirAll(ki.statusDir, 0o755); err != nil {
		return nil, err
	}
	if err := os.Chown(ki.statusDir, keeperUser, keeperUser); err != nil {
		return nil, err
	}
	const bin = "/mnt/bin"
	args := append([]string{"keeper",
		"--plugin-socket=" + filepath.Join(keeperSocketDir, contract.KeeperSocket),
		"--dummy-fuse-path=" + filepath.Join(bin, "dummy-fuse"),
		"--status-file=" + filepath.Join(keeperStatusDir, "status.json"),
	}, b.sc.Plugin.Keeper.Args()...)
	mounts := []initMount{
		{Source: filepath.Dir(b.sock), Target: keeperSocketDir, Propagation: "rprivate"},
		{Source: ki.statusDir, Target: keeperStatusDir, Propagation: "rprivate"},
		{Source: pluginPath, Target: filepath.Join(bin, "csi-plugin"), Propagation: "rprivate"},
		{Source: fusePath, Target: filepath.Join(bin, "dummy-fuse"), Propagation: "rprivate"},
	}
	if b.peers.relayServer != nil { // it runs the relays and the real servers
		relayArgs, relayMount, err := k.relayNodeDir()
		if err != nil {
			return nil, err
		}
		args, mounts = append(args, relayArgs...), append(mounts, relayMount)
		mounts = append(mounts, hideFusermount(pluginPath)...)
	}
	logPath := filepath.Join(b.dir, "containers", fmt.Sprintf("keeper-%d.log", n))
	p, err := b.launch(initConfig{
		Mounts: mounts,
		Argv:   append([]string{filepath.Join(bin, "csi-plugin")}, args...),
		User:   &initUser{UID: keeperUser, GID: keeperUser},
	}, logPath)
	if err != nil {
		return nil, fmt.Errorf("start keeper: %w", err)
	}
	ki.p = p
	logR, err := os.Open(logPath)
	if err != nil {
		_ = p.stop(time.Second)
		return nil, err
	}
	k.event(scenarios.KStarted, time.Time{}, fmt.Sprintf("keeper#%d pid %d, uid %d, dummy-fuse %s: %s", n, p.pid(), keeperUser, version, strings.Join(args, " ")))
	b.logf("keeper#%d: started pid %d as uid %d: %s, log %s", n, p.pid(), keeperUser, strings.Join(args, " "), logPath)
	go func() {
		<-p.done
		k.event(scenarios.KExited, p.exitTime, fmt.Sprintf("keeper#%d: %s", n, p.state))
	}()
	go func() {
		defer close(ki.out)
		defer logR.Close()
		prefix := fmt.Sprintf("keeper#%d", n)
		scenarios.TailLines(logR, p.done, 20*time.Millisecond, func(line []byte) {
			k.log.WriteLine(prefix, line)
			t := scenarios.LineTime(line, time.Now())
			switch ev := contract.ParseKeeperLine(line); ev.Kind {
			case contract.KeeperLineConnected:
				if !closed(ki.connected) {
					close(ki.connected)
					k.event(scenarios.KReady, t, fmt.Sprintf("keeper#%d connected to the plugin", n))
				}
			case contract.KeeperLineServed:
				if ev.Volume != volumeHandle {
					break
				}
				k.servedBy.Store(int64(ev.PID))
				k.serverEvent(scenarios.KReady, t, fmt.Sprintf("keeper#%d: dummy-fuse %s pid %d serves the volume", n, ev.Version, ev.PID), ev.Version)
				if !closed(ki.served) {
					close(ki.served)
				}
			case contract.KeeperLineServerExited:
				k.serverEvent(scenarios.KExited, t, fmt.Sprintf("keeper#%d: FUSE server pid %d: %s", n, ev.PID, ev.Reason), "")
			}
		})
	}()
	return ki, nil
}

// wait waits until ch (k.connected, k.served) is closed.
func (k *keeperInstance) wait(ctx context.Context, ch chan struct{}, what string) error {
	const timeout = 30 * time.Second
	select {
	case <-ch:
		return nil
	case <-k.p.done:
		return fmt.Errorf("keeper#%d exited before it %s (%s)", k.n, what, k.p.state)
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(timeout):
		return fmt.Errorf("keeper#%d: not %s within %s", k.n, what, timeout)
	}
}

func closed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// kill kills the keeper container (PID 1 of its namespace: its FUSE servers die with it).
func (k *keeperPart) kill(ctx context.Context) error {
	if k.cur == nil {
		return errors.New("no keeper")
	}
	return k.b.killContainer(ctx, k.cur.p, "keeper container", k.event)
}

// start starts the keeper container again with the binaries of the last one and waits until it is connected
// to the plugin (which hands it every connection it still holds).
func (k *keeperPart) start(ctx context.Context) error {
	if k.cur != nil && !k.cur.p.exited() {
		return errors.New("the keeper is still running")
	}
	ki, err := k.startInstance(k.pluginPath, k.fusePath)
	if err != nil {
		return err
	}
	if k.cur != nil {
		k.old = append(k.old, k.cur)
	}
	k.cur = ki
	return ki.wait(ctx, ki.connected, "connected to the plugin")
}

// upgrade rolls the keeper to the next build: the new keeper starts beside the old one and takes every
// connection over (the plugin hands them to every keeper), then the old one gets SIGTERM: its FUSE servers
// exit without unmounting anything.
func (k *keeperPart) upgrade(ctx context.Context) error {
	b := k.b
	if b.opts.NextPluginPath == "" || b.opts.NextFusePath == "" {
		return errors.New("no next build to upgrade to (Options.NextPluginPath, NextFusePath: make build puts one in bin/next)")
	}
	old := k.cur
	if old == nil || old.p.exited() {
		return errors.New("no running keeper to upgrade")
	}
	version, err := binaryVersion(b.opts.NextFusePath)
	if err != nil {
		return err
	}
	if version == old.version {
		return fmt.Errorf("the next build has the running version %s: it would prove nothing", version)
	}
	b.rec.Add(scenarios.Event{Source: scenarios.SrcComponent, Component: topology.KeeperContainer, Kind: scenarios.KUpgraded,
		Message: fmt.Sprintf("keeper %s → %s", old.version, version), Detail: version})
	k.pluginPath, k.fusePath = b.opts.NextPluginPath, b.opts.NextFusePath
	ki, err := k.startInstance(k.pluginPath, k.fusePath)
	if err != nil {
		return err
	}
	k.old = append(k.old, old)
	k.cur = ki
	if err := ki.wait(ctx, ki.served, "served the volume"); err != nil {
		return err
	}
	b.logf("keeper#%d: SIGTERM (replaced by keeper#%d)", old.n, ki.n)
	if err := old.p.stop(10 * time.Second); err != nil {
		return fmt.Errorf("stopping the old keeper: %w", err)
	}
	return nil
}

// keeperServer is the keeper's FUSE server of the volume: killed as a crash, started by the keeper itself.
type keeperServer struct {
	noPart
	k *keeperPart
}

// newKeeperServerPart is the keeper's FUSE server of the volume.
func newKeeperServerPart(b *Backend, _ *scenarios.Env) (part, error) {
	return &keeperServer{k: b.peers.keeper}, nil
}

// start waits until the keeper's next server serves the volume: the keeper starts it by itself.
func (s *keeperServer) start(ctx context.Context) error {
	return s.k.b.rec.AwaitReady(ctx, topology.FuseServer, 30*time.Second)
}

// kill sends SIGKILL to the FUSE server that serves the volume.
func (s *keeperServer) kill(ctx context.Context) error {
	k := s.k
	_, err := k.killServing(ctx, "FUSE server", func(pid, nsPID int) {
		k.serverEvent(scenarios.KKilled, time.Time{}, fmt.Sprintf("SIGKILL pid %d (%d in the keeper's namespace)", pid, nsPID), "")
	})
	return err
}

// killServing sends SIGKILL to the keeper's child that serves the volume (its FUSE server, or in relay-keeper
// mode its relay), found as the keeper says (its status file) and translated from the keeper's PID namespace
// to this one through the keeper's children; killed records the kill just before the signal. It returns the
// PID in the keeper's namespace once the process is gone.
func (k *keeperPart) killServing(ctx context.Context, what string, killed func(pid, nsPID int)) (int, error) {
	if k.cur == nil || k.cur.p.exited() {
		return 0, errors.New("no keeper running")
	}
	st, err := keeper.ReadStatus(filepath.Join(k.cur.statusDir, "status.json"))
	if err != nil {
		return 0, err
	}
	nsPID, err := st.ServerOf(volumeHandle)
	if err != nil {
		return 0, err
	}
	pid, err := childInNamespace(k.cur.p.pid(), nsPID)
	if err != nil {
		return 0, fmt.Errorf("%s %d of the keeper: %w", what, nsPID, err)
	}
	pidfd, err := pidfdOpen(pid)
	if err != nil {
		return 0, err
	}
	defer syscall.Close(pidfd)
	killed(pid, nsPID)
	if err := pidfdKill(pidfd); err != nil {
		return 0, fmt.Errorf("kill %s pid %d: %w", what, pid, err)
	}
	k.b.logf("%s pid %d (%d in keeper#%d): SIGKILL", what, pid, nsPID, k.cur.n)
	// Gone once its pidfd is readable (pidfd_open(2)); the keeper reaps it.
	return nsPID, waitPidfd(ctx, pidfd, 10*time.Second)
}

// binaryVersion asks a binary of the project for its version (--version).
func binaryVersion(path string) (string, error) {
	out, err := exec.Command(path, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", path, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// childInNamespace returns the PID (in this namespace) of the child of parent whose PID in its own namespace
// is nsPID, from the kernel's lists of parent's children and each child's NSpid.
func childInNamespace(parent, nsPID int) (int, error) {
	for _, child := range children(parent) {
		if ns, ok := innermostPID(child); ok && ns == nsPID {
			return child, nil
		}
	}
	return 0, fmt.Errorf("no child of pid %d has pid %d in its namespace", parent, nsPID)
}

// innermostPID is pid's PID in the innermost PID namespace it belongs to (the last NSpid of its status).
func innermostPID(pid int) (int, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, false
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if rest, ok := bytes.CutPrefix(line, []byte("NSpid:")); ok {
			f := strings.Fields(string(rest))
			if len(f) == 0 {
				return 0, false
			}
			n, err := strconv.Atoi(f[len(f)-1])
			return n, err == nil
		}
	}
	return 0, false
}

// hideFusermount puts the stand-in (csi-plugin) over the host's fusermount helpers in the keeper container, as
// the chart's image has no real one: libfuse runs the helper at the path it was built with before it searches
// $PATH, where the keeper puts the stand-in for a real server that asks fusermount for its connection
// (fuseserver.Handoff). Elsewhere the host's setuid helper would mount a filesystem of its own.
func hideFusermount(pluginPath string) []initMount {
	var out []initMount
	seen := map[string]bool{}
	for _, p := range fuseserver.HelperPaths() {
		real, err := filepath.EvalSymlinks(p)
		if err != nil || seen[real] {
			continue
		}
		seen[real] = true
		out = append(out, initMount{Source: pluginPath, Target: real, Propagation: "rprivate", Over: true})
	}
	return out
}
