// Package local is the scenario backend that plays kubelet and the container runtime on this machine with
// real processes, real mounts and real mount namespaces, in seconds and without a cluster.
//
//   - The run's kubelet root dir (<run dir>/root) is bind-mounted onto itself and made rshared, like
//     /var/lib/kubelet on a node, so that mounts made below it reach HostToContainer containers.
//   - The plugin "container" is the csi-plugin binary in a new PID namespace (it is PID 1 there, so SIGKILL
//     of it kills its dummy-fuse children, exactly as a container kill does) sharing the host mount
//     namespace (Bidirectional propagation). Restarting it starts the same command with the same state dir.
//   - The runner calls the plugin over its socket with a real CSI gRPC client in kubelet's order and with
//     kubelet's paths; like kubelet, it does not stage or publish again after the plugin restarts.
//   - Each workload "container" is dummy-fuse-workload in new PID and mount namespaces, set up by a small
//     init (this binary re-executed, see MaybeInit) the way runc sets up CRI mounts. Before every start it
//     does what kubelet and containerd do: kubelet's subPath preparation, then containerd's stat of each
//     mount source, with their error messages. Restart policies and kubelet's restart back-off are applied.
//   - In the plugin's sidecar mode the pod's FUSE sidecar (csi-plugin sidecar) is a container too, started
//     before the workload's, as user 65534 without capabilities (see sidecar.go). Deleting the pod is
//     kubelet's teardown (containers stopped, unpublish, unstage); creating it again uses a new pod UID.
//   - Stop stops every process by PID and unmounts everything below the root dir, deepest first.
package local

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/kubeletpath"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
)

// Names of the objects the local kubelet pretends to manage.
const (
	nodeID       = "local-node"
	volumeHandle = "dummy-fuse-volume"
	pvName       = "dummy-fuse-pv"
	podName      = "workload"
	podNamespace = "default"
	volumeName   = "dummy-fuse" // the pod's volume name (volumeMounts[].name), as in manifests/
)

// Options configure the local backend.
type Options struct {
	// PluginPath, FusePath and WorkloadPath are the csi-plugin, dummy-fuse and dummy-fuse-workload binaries.
	PluginPath, FusePath, WorkloadPath string
	// NextPluginPath and NextFusePath are a newer build of csi-plugin and dummy-fuse (another version), which
	// an upgrade step rolls the keeper to; empty: the keeper cannot be upgraded.
	NextPluginPath, NextFusePath string
	// ReadInterval is the workload's read interval when a scenario does not set one (default 200ms).
	ReadInterval time.Duration
	// BackoffBase and BackoffMax shrink kubelet's restart back-off (10s doubling to 5m) for fast runs
	// (defaults 500ms and 30 × base).
	BackoffBase, BackoffMax time.Duration
	// ProbeInterval is how often the volume paths are stat'ed (default 100ms).
	ProbeInterval time.Duration
	// DriverName is the CSI driver name (default dummy-fuse-csi).
	DriverName string
	// PluginVerbosity is the plugin's klog -v (default 5: every GRPC call with request and response).
	PluginVerbosity int
	// KubeletVersion is the kubelet whose behaviour the backend reproduces: one of KubeletVersions or its
	// minor (default: the newest). Start fails on any other.
	KubeletVersion string
	// Keep leaves everything running and mounted at Stop; KeepNote then says how to inspect and clean up.
	Keep bool
}

// BinariesIn sets the binary paths to the project's binaries in dir, and the next build to those in dir/next
// when it holds them (make build puts a build of another version there).
func (o *Options) BinariesIn(dir string) {
	o.PluginPath = filepath.Join(dir, "csi-plugin")
	o.FusePath = filepath.Join(dir, "dummy-fuse")
	o.WorkloadPath = filepath.Join(dir, "dummy-fuse-workload")
	next := filepath.Join(dir, NextDir)
	if _, err := os.Stat(filepath.Join(next, "dummy-fuse")); err == nil {
		o.NextPluginPath = filepath.Join(next, "csi-plugin")
		o.NextFusePath = filepath.Join(next, "dummy-fuse")
	}
}

// NextDir is the directory, beside the binaries, of their next build (another version) for upgrade steps.
const NextDir = "next"

func (o *Options) defaults() {
	if o.ReadInterval <= 0 {
		o.ReadInterval = 200 * time.Millisecond
	}
	if o.BackoffBase <= 0 {
		o.BackoffBase = 500 * time.Millisecond
	}
	if o.BackoffMax <= 0 {
		o.BackoffMax = 30 * o.BackoffBase
	}
	if o.ProbeInterval <= 0 {
		o.ProbeInterval = 100 * time.Millisecond
	}
	if o.DriverName == "" {
		o.DriverName = "dummy-fuse-csi"
	}
	if o.PluginVerbosity == 0 {
		o.PluginVerbosity = 5
	}
}

// Backend is the local scenario backend. Use New; one Backend runs one scenario.
type Backend struct {
	opts    Options
	rec     *scenarios.Recorder
	kubelet scenarios.KubeletVersion

	sc        *scenarios.Scenario
	dir, root string
	podUID    string
	// podDeleted: a step deleted the pod and none was created since.
	podDeleted bool
	sock       string
	stateDir   string
	vol        volume

	kubeletLog, pluginLog, workloadLog *scenarios.LogFile

	// The keeper (keeper mode): the running instance, those an upgrade replaced, starts so far, the binaries
	// it runs, its log.
	keeper                   *keeperInstance
	oldKeepers               []*keeperInstance
	keeperStarts             int
	keeperPlugin, keeperFuse string
	keeperLog                *scenarios.LogFile
	// remediatorLog holds the remediator's decisions (Plugin.Remediation).
	remediatorLog *scenarios.LogFile

	plugin       *proc
	pluginStarts int
	csi          *csiClient

	// The pod's FUSE sidecar (sidecar mode; nil without), its emptyDir and log.
	sidecar    *sidecarCtr
	sidecarDir string
	sidecarLog *scenarios.LogFile

	containers []*container
	loopCtx    context.Context    // the kubelet loops' and the probe's, for the life of the backend
	cancel     context.CancelFunc // stops the kubelet loops and the probe
	podCancel  context.CancelFunc // stops the current pod's loops and probe
	wg         sync.WaitGroup     // the current pod's loops and probe
	rootBound  bool
	stopped    bool
	keepNote   string

	// mu guards csi, vol, podUID, podDeleted and containers against the background loops (bg): the volume
	// health probe and the remediator, which read them, and the remediator's recreation of the pod.
	mu sync.Mutex
	bg sync.WaitGroup // the background loops, for the life of the backend (loopCtx)
}

var _ scenarios.Backend = (*Backend)(nil)

// New returns a local backend.
func New(opts Options) *Backend {
	opts.defaults()
	return &Backend{opts: opts}
}

// Name implements scenarios.Backend.
func (b *Backend) Name() string { return scenarios.BackendLocal }

// Describe implements scenarios.Backend.
func (b *Backend) Describe() string {
	kubelet := b.opts.KubeletVersion
	if v, err := ModelledKubelet(kubelet); err == nil {
		kubelet = v.String()
	}
	return fmt.Sprintf("backend local modelling kubelet %s: read interval %s, restart back-off %s doubling to %s — shortened for a fast run (kubelet: 10s doubling to 5m)",
		kubelet, b.opts.ReadInterval, b.opts.BackoffBase, b.opts.BackoffMax)
}

// Timing implements scenarios.Backend.
func (b *Backend) Timing() scenarios.Timing {
	return scenarios.Timing{ReadInterval: b.opts.ReadInterval, BackoffBase: b.opts.BackoffBase, BackoffMax: b.opts.BackoffMax}
}

// Setup implements scenarios.Backend.
func (b *Backend) Setup(ctx context.Context, sc *scenarios.Scenario, env *scenarios.Env) error {
	if b.sc != nil {
		return errors.New("local backend: Setup called twice")
	}
	b.sc, b.rec, b.dir = sc, env.Rec, env.Dir
	var err error
	if b.kubelet, err = ModelledKubelet(b.opts.KubeletVersion); err != nil {
		return err
	}
	b.rec.SetKubelet(b.kubelet)
	for _, p := range []string{b.opts.PluginPath, b.opts.FusePath, b.opts.WorkloadPath} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("binary missing (run make build): %w", err)
		}
	}
	b.root = filepath.Join(b.dir, "root")
	if err := os.MkdirAll(b.root, 0o755); err != nil {
		return err
	}
	logs, err := env.Logs("plugin.log", "workload.log", "kubelet.log")
	if err != nil {
		return err
	}
	b.pluginLog, b.workloadLog, b.kubeletLog = logs[0], logs[1], logs[2]
	if sc.Pod.Sidecar != nil {
		if logs, err = env.Logs("sidecar.log"); err != nil {
			return err
		}
		b.sidecarLog = logs[0]
		b.sidecar = &sidecarCtr{}
	}
	if sc.Plugin.FuseMode == scenarios.FuseModeKeeper {
		if logs, err = env.Logs("keeper.log"); err != nil {
			return err
		}
		b.keeperLog = logs[0]
	}
	if sc.Plugin.Remediation != nil {
		if logs, err = env.Logs("remediator.log"); err != nil {
			return err
		}
		b.remediatorLog = logs[0]
	}

	if err := makeRShared(b.root); err != nil {
		return err
	}
	b.rootBound = true
	b.logf("modelling kubelet %s; kubelet root %s: bind-mounted onto itself, rshared", b.kubelet, b.root)

	b.sock = filepath.Join(b.root, "plugins", b.opts.DriverName, "csi.sock")
	// sun_path holds 108 bytes with the terminating NUL (unix(7)); a longer path fails only when the plugin
	// binds, with a bare "invalid argument".
	if len(b.sock) > 107 {
		return fmt.Errorf("the plugin's socket %s would be %d bytes long, more than the 107 a unix socket path allows: choose a shorter run directory (--out)", b.sock, len(b.sock))
	}
	b.stateDir = filepath.Join(b.dir, "plugin-state")
	for _, d := range []string{filepath.Dir(b.sock), b.stateDir} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return err
		}
	}
	if err := b.startPlugin(ctx); err != nil {
		return err
	}
	if sc.Plugin.FuseMode == scenarios.FuseModeKeeper {
		// The keeper (uid 65534) reaches the plugin's keeper socket through this directory, as the chart's
		// hostPath gives it (created 0755).
		if err := os.Chmod(filepath.Dir(b.sock), 0o755); err != nil {
			return err
		}
		b.keeperPlugin, b.keeperFuse = b.opts.PluginPath, b.opts.FusePath
		if b.keeper, err = b.startKeeper(b.keeperPlugin, b.keeperFuse); err != nil {
			return err
		}
	}
	b.loopCtx, b.cancel = context.WithCancel(context.WithoutCancel(ctx))
	if err := b.podUp(ctx); err != nil {
		return err
	}
	if sc.VolumeHealth {
		b.bg.Add(1)
		go b.watchVolumeHealth(b.loopCtx)
	}
	if r := sc.Plugin.Remediation; r != nil {
		b.bg.Add(1)
		go b.runRemediator(b.loopCtx, *r)
	}
	return nil
}

// podUp is what kubelet does for a new pod: a new pod UID, its emptyDir, NodeStageVolume and
// NodePublishVolume, the probe of its volume paths, then its native sidecar and its containers. It returns
// once every container has had its first start attempt. A container's instances are numbered on from the
// pod before (kubelet would start again at restart count 0), so that the evidence tells them apart.
func (b *Backend) podUp(ctx context.Context) error {
	sc := b.sc
	uid := newUID()
	vol := volume{
		driver: b.opts.DriverName, handle: volumeHandle, pvName: pvName,
		podName: podName, podNamespace: podNamespace, podUID: uid,
		staging: kubeletpath.Staging(b.root, b.opts.DriverName, volumeHandle),
		target:  kubeletpath.Target(b.root, uid, pvName),
	}
	b.mu.Lock()
	b.podUID, b.vol = uid, vol
	b.mu.Unlock()
	b.rec.SetPaths(map[string]string{
		scenarios.PathRoot: b.root, scenarios.PathVolume: b.vol.target, scenarios.PathStaging: b.vol.staging,
	})
	b.logf("pod %s/%s: uid %s", podNamespace, podName, uid)
	if sc.Pod.Sidecar != nil {
		if err := b.makeSidecarVolume(); err != nil {
			return err
		}
	}
	mkdir := func(d string) error { return os.MkdirAll(d, 0o750) }
	if err := b.csi.stageAndPublish(ctx, b.vol, mkdir, b.logf); err != nil {
		return err
	}
	b.rec.Add(scenarios.Event{Source: scenarios.SrcKubelet, Kind: scenarios.KVolumeMounted,
		Message: "volume staged and published (NodeStageVolume, NodePublishVolume)"})

	podCtx, cancel := context.WithCancel(b.loopCtx)
	b.podCancel = cancel
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		scenarios.StatHostPaths(podCtx, b.rec, map[string]string{
			scenarios.PathVolume: b.vol.target, scenarios.PathStaging: b.vol.staging}, b.opts.ProbeInterval)
	}()
	// A native sidecar starts before the pod's containers (kubelet's SidecarContainers, GA in v1.33); its
	// restart back-off is the new pod's own.
	if b.sidecar != nil {
		b.sidecar.bo = restartBackoff{base: b.opts.BackoffBase, max: b.opts.BackoffMax}
		if err := b.startSidecar(); err != nil {
			return err
		}
		b.wg.Add(1)
		go b.superviseSidecar(podCtx)
	}
	previous := b.containers
	var containers []*container
	for i, spec := range sc.Pod.Containers {
		c := &container{b: b, spec: spec, index: i, firstAttempt: make(chan struct{}),
			bo: restartBackoff{base: b.opts.BackoffBase, max: b.opts.BackoffMax}}
		if i < len(previous) {
			c.starts = previous[i].starts
		}
		containers = append(containers, c)
	}
	b.mu.Lock()
	b.containers = containers
	b.mu.Unlock()
	for _, c := range containers {
		b.wg.Add(1)
		go c.loop(podCtx)
	}
	for _, c := range b.containers {
		select {
		case <-c.firstAttempt:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// stopPod stops the pod's containers and its sidecar (SIGTERM, a grace period, SIGKILL: kubelet's order) and
// removes its subPath binds (kubelet's CleanSubPaths, before the volume is unpublished); the pod's loops must
// have ended. logPrefix starts its lines in kubelet.log.
func (b *Backend) stopPod(logPrefix string) error {
	var errs []error
	for _, c := range b.containers {
		if p := c.current(); p != nil && !p.exited() {
			b.logf("%sstop %s pid %d", logPrefix, c.spec.Name, p.pid())
			if err := p.stop(2 * time.Second); err != nil {
				errs = append(errs, fmt.Errorf("stop container %s: %w", c.spec.Name, err))
			}
			c.waitOutput()
		}
	}
	if b.sidecar != nil {
		if p := b.sidecar.current(); p != nil && !p.exited() {
			b.logf("%sstop sidecar pid %d", logPrefix, p.pid())
			if err := p.stop(2 * time.Second); err != nil {
				errs = append(errs, fmt.Errorf("stop sidecar: %w", err))
			}
		}
		b.sidecar.waitOutput()
	}
	if b.podUID != "" {
		done, err := unmountAll(kubeletpath.SubPaths(b.root, b.podUID))
		b.logLines(logPrefix, done)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// podDown is kubelet's deletion of the pod: its loops end, its containers and its sidecar are stopped
// (SIGTERM, a grace period, SIGKILL), its subPath binds cleaned (CleanSubPaths), then NodeUnpublishVolume and,
// as no other pod uses the volume, NodeUnstageVolume. It returns what it could not stop or unmount.
func (b *Backend) podDown(ctx context.Context) error {
	if b.podCancel != nil {
		b.podCancel()
	}
	b.wg.Wait()
	errs := []error{b.stopPod("pod deletion: ")}
	if b.plugin != nil && !b.plugin.exited() && b.csi != nil {
		if err := b.csi.unpublishAndUnstage(ctx, b.vol, b.logf); err != nil {
			errs = append(errs, err)
		}
	} else {
		errs = append(errs, errors.New("the plugin is not running: kubelet cannot unpublish the pod's volume"))
	}
	return errors.Join(errs...)
}

// Kill implements scenarios.Backend.
func (b *Backend) Kill(ctx context.Context, c scenarios.Component) error {
	switch c {
	case scenarios.PluginContainer:
		return b.killPlugin(ctx)
	case scenarios.SidecarContainer:
		if b.sidecar != nil {
			return b.killSidecar(ctx)
		}
	case scenarios.KeeperContainer:
		if b.keeper != nil {
			return b.killKeeper(ctx)
		}
	case scenarios.FuseServer:
		if b.keeper != nil {
			return b.killFuseServer(ctx)
		}
	case scenarios.WorkloadPod:
		if b.podGone() {
			return errors.New("the pod is deleted already")
		}
		b.rec.Add(scenarios.Event{Source: scenarios.SrcComponent, Component: scenarios.WorkloadPod, Kind: scenarios.KKilled,
			Message: "pod " + b.podUID + " deleted: containers stopped, volume unpublished and unstaged"})
		b.setPodDeleted(true)
		err := b.podDown(ctx)
		b.rec.Add(scenarios.Event{Source: scenarios.SrcComponent, Component: scenarios.WorkloadPod, Kind: scenarios.KExited,
			Message: "pod " + b.podUID + " gone"})
		return err
	}
	return fmt.Errorf("local backend: cannot kill %s", c)
}

// Start implements scenarios.Backend.
func (b *Backend) Start(ctx context.Context, c scenarios.Component) error {
	switch c {
	case scenarios.PluginContainer:
		if b.plugin != nil && !b.plugin.exited() {
			return errors.New("the plugin is still running")
		}
		return b.startPlugin(ctx)
	case scenarios.SidecarContainer:
		if b.sidecar != nil {
			// The local kubelet starts it again by itself (superviseSidecar), as the real one does.
			return b.rec.AwaitRestart(ctx, scenarios.SidecarContainer, b.opts.BackoffMax+10*time.Second)
		}
	case scenarios.KeeperContainer:
		if b.keeper != nil {
			return b.restartKeeper(ctx)
		}
	case scenarios.FuseServer:
		if b.keeper != nil {
			return b.rec.AwaitReady(ctx, scenarios.FuseServer, 30*time.Second)
		}
	case scenarios.WorkloadPod:
		if !b.podGone() {
			return errors.New("the pod still exists")
		}
		b.setPodDeleted(false)
		if err := b.podUp(ctx); err != nil {
			return err
		}
		b.rec.Add(scenarios.Event{Source: scenarios.SrcComponent, Component: scenarios.WorkloadPod, Kind: scenarios.KStarted,
			Message: "pod " + b.podUID + " created"})
		b.rec.Add(scenarios.Event{Source: scenarios.SrcComponent, Component: scenarios.WorkloadPod, Kind: scenarios.KReady,
			Message: "pod " + b.podUID + ": volume published, every container had its first start"})
		return nil
	}
	return fmt.Errorf("local backend: cannot start %s", c)
}

// Upgrade implements scenarios.Backend: the keeper can be rolled to the next build.
func (b *Backend) Upgrade(ctx context.Context, c scenarios.Component) error {
	if c == scenarios.KeeperContainer && b.keeper != nil {
		return b.upgradeKeeper(ctx)
	}
	return fmt.Errorf("local backend: cannot upgrade %s", c)
}

// pluginEvent records an event of the plugin container's lifecycle.
func (b *Backend) pluginEvent(kind scenarios.Kind, t time.Time, msg string) {
	b.rec.Add(scenarios.Event{Time: t, Source: scenarios.SrcComponent, Component: scenarios.PluginContainer, Kind: kind, Message: msg})
}

// killPlugin sends SIGKILL to the plugin's PID namespace init.
func (b *Backend) killPlugin(ctx context.Context) error {
	return b.killContainer(ctx, b.plugin, "plugin container", b.pluginEvent)
}

// killContainer kills the container whose init (PID 1 of its namespace, so everything in it dies too) is p,
// records KKilled with event, and waits for its exit.
func (b *Backend) killContainer(ctx context.Context, p *proc, what string, event func(scenarios.Kind, time.Time, string)) error {
	if p == nil || p.exited() {
		return fmt.Errorf("the %s is not running", what)
	}
	event(scenarios.KKilled, time.Time{}, fmt.Sprintf("SIGKILL pid %d", p.pid()))
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill %s pid %d: %w", what, p.pid(), err)
	}
	b.logf("%s pid %d: SIGKILL", what, p.pid())
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s pid %d did not die within 10s of SIGKILL", what, p.pid())
	}
}

func (b *Backend) startPlugin(ctx context.Context) error {
	args := []string{
		"--endpoint=unix://" + b.sock,
		"--nodeid=" + nodeID,
		"--drivername=" + b.opts.DriverName,
		"--state-dir=" + b.stateDir,
		"--dummy-fuse-path=" + b.opts.FusePath,
		fmt.Sprintf("-v=%d", b.opts.PluginVerbosity),
	}
	args = append(args, b.sc.Plugin.Args()...)
	if b.sc.Plugin.FuseMode == scenarios.FuseModeKeeper {
		args = append(args, fmt.Sprintf("--keeper-uid=%d", keeperUser))
	}
	b.pluginStarts++
	b.pluginLog.Printf("==== plugin container start #%d at %s: %s %s", b.pluginStarts,
		time.Now().UTC().Format(time.RFC3339Nano), b.opts.PluginPath, strings.Join(args, " "))
	cmd := exec.Command(b.opts.PluginPath, args...)
	cmd.Stdout, cmd.Stderr = b.pluginLog.File(), b.pluginLog.File()
	// A new PID namespace makes the plugin its init: when it dies, the kernel kills everything in it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Setpgid: true, Pdeathsig: b.deathSig()}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start plugin: %w", err)
	}
	p := startedProc(cmd)
	b.plugin = p
	flags := strings.Join(b.sc.Plugin.Args(), " ")
	if flags == "" {
		flags = "no restore flags"
	}
	b.pluginEvent(scenarios.KStarted, time.Time{}, fmt.Sprintf("pid %d, %s", p.pid(), flags))
	b.logf("plugin container start #%d: pid %d", b.pluginStarts, p.pid())
	go func() {
		<-p.done
		b.pluginEvent(scenarios.KExited, p.exitTime, p.state.String())
	}()

	c, err := dialCSI(b.sock)
	if err != nil {
		return err
	}
	b.mu.Lock()
	old := b.csi
	b.csi = c
	b.mu.Unlock()
	if old != nil {
		old.Close()
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, err := b.csi.ready(ctx)
		if ok {
			b.pluginEvent(scenarios.KReady, time.Time{}, "Probe: ready")
			return nil
		}
		if p.exited() {
			return fmt.Errorf("plugin exited before serving (%s); see %s", p.state, b.pluginLog.Name())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("plugin not ready after 30s (last Probe: %v); see %s", err, b.pluginLog.Name())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (b *Backend) deathSig() syscall.Signal {
	if b.opts.Keep {
		return 0 // --keep: everything outlives the runner
	}
	return syscall.SIGKILL // the runner dying (even by SIGKILL) takes its "containers" with it
}

// Stop implements scenarios.Backend.
func (b *Backend) Stop(ctx context.Context) error {
	if b.stopped {
		return nil
	}
	b.stopped = true
	// The local kubelet stops first: no more restarts, probes or CSI calls.
	if b.cancel != nil {
		b.cancel()
	}
	b.bg.Wait()
	b.wg.Wait()
	if b.opts.Keep && b.sc != nil {
		b.printKeep()
		b.closeLogs()
		return nil
	}
	var errs []error

	// Delete the pod: SIGTERM, a grace period, SIGKILL (kubelet's order).
	if !b.podDeleted {
		errs = append(errs, b.stopPod("teardown: "))
	}
	if b.plugin != nil && !b.plugin.exited() && b.csi != nil && !b.podDeleted {
		if err := b.csi.unpublishAndUnstage(ctx, b.vol, b.logf); err != nil {
			b.logf("teardown: %v", err) // the unmount below cleans up what the plugin could not
		}
	}
	if b.csi != nil {
		b.csi.Close()
	}
	if b.plugin != nil && !b.plugin.exited() {
		b.logf("teardown: stop plugin pid %d", b.plugin.pid())
		if err := b.plugin.stop(5 * time.Second); err != nil {
			errs = append(errs, fmt.Errorf("stop plugin: %w", err))
		}
	}
	for _, k := range b.keepers() {
		if !k.p.exited() {
			b.logf("teardown: stop keeper#%d pid %d", k.n, k.p.pid())
			if err := k.p.stop(5 * time.Second); err != nil {
				errs = append(errs, fmt.Errorf("stop keeper: %w", err))
			}
		}
		select {
		case <-k.out:
		case <-time.After(2 * time.Second):
		}
	}
	if b.rootBound {
		done, err := unmountAll(b.root)
		b.logLines("teardown: ", done)
		if err != nil {
			errs = append(errs, err)
		}
	}
	if b.dir != "" {
		if left, err := mountsUnder(b.dir); err != nil {
			errs = append(errs, err)
		} else if len(left) > 0 {
			errs = append(errs, fmt.Errorf("%d mounts left under %s, e.g. %s", len(left), b.dir, left[0].Mountpoint))
		}
	}
	if err := errors.Join(errs...); err != nil {
		b.logf("teardown failed: %v", err)
	}
	b.closeLogs()
	return errors.Join(errs...)
}

// sidecarProc is the sidecar container's current instance, nil if none.
func (b *Backend) sidecarProc() *proc {
	if b.sidecar == nil {
		return nil
	}
	return b.sidecar.current()
}

// KeepNote says, after Stop with Keep, what was left running and the commands that clean it up.
func (b *Backend) KeepNote() string { return b.keepNote }

// printKeep records how to inspect and how to clean up what --keep left behind.
func (b *Backend) printKeep() {
	var w strings.Builder
	var pids []string
	fmt.Fprintf(&w, "--keep: everything is left running (the local kubelet is gone: nothing restarts any more).\n")
	if b.plugin != nil && !b.plugin.exited() {
		fmt.Fprintf(&w, "  plugin container: pid %d (csi-plugin, init of its PID namespace), socket %s\n", b.plugin.pid(), b.sock)
		pids = append(pids, fmt.Sprint(b.plugin.pid()))
	}
	if p := b.sidecarProc(); p != nil && !p.exited() {
		fmt.Fprintf(&w, "  sidecar container: pid %d (csi-plugin sidecar, uid %d)\n", p.pid(), sidecarUser)
		pids = append(pids, fmt.Sprint(p.pid()))
	}
	for _, k := range b.keepers() {
		if !k.p.exited() {
			fmt.Fprintf(&w, "  keeper container #%d: pid %d (csi-plugin keeper, uid %d), status %s/status.json\n", k.n, k.p.pid(), keeperUser, k.statusDir)
			pids = append(pids, fmt.Sprint(k.p.pid()))
		}
	}
	for _, c := range b.containers {
		if p := c.current(); p != nil && !p.exited() {
			fmt.Fprintf(&w, "  container %s: pid %d, log %s/containers/%s-%d.log\n", c.spec.Name, p.pid(), b.dir, c.spec.Name, c.starts-1)
			fmt.Fprintf(&w, "    look inside: nsenter -t %d -m cat %s\n", p.pid(), c.spec.File())
			pids = append(pids, fmt.Sprint(p.pid()))
		}
	}
	fmt.Fprintf(&w, "  volume dir:  %s\n  staging dir: %s\n", b.vol.target, b.vol.staging)
	fmt.Fprintf(&w, "Clean up with:\n")
	if len(pids) > 0 {
		fmt.Fprintf(&w, "  kill -KILL %s\n", strings.Join(pids, " "))
	}
	ms, _ := mountsUnder(b.root)
	for _, m := range ms {
		fmt.Fprintf(&w, "  umount -l %s\n", m.Mountpoint)
	}
	b.keepNote = w.String()
}

func (b *Backend) closeLogs() {
	for _, l := range []*scenarios.LogFile{b.workloadLog, b.pluginLog, b.kubeletLog, b.sidecarLog, b.keeperLog, b.remediatorLog} {
		if l != nil {
			_ = l.Close()
		}
	}
}

// keepers lists every keeper instance started, the running one last.
func (b *Backend) keepers() []*keeperInstance {
	if b.keeper == nil {
		return b.oldKeepers
	}
	return append(append([]*keeperInstance(nil), b.oldKeepers...), b.keeper)
}

func (b *Backend) logf(format string, args ...any) {
	b.kubeletLog.WriteLine(time.Now().UTC().Format("15:04:05.000000"), fmt.Appendf(nil, format, args...))
}

func (b *Backend) logLines(prefix string, lines []string) {
	for _, l := range lines {
		b.logf("%s%s", prefix, l)
	}
}

// proc is a started process and its exit.
type proc struct {
	started  time.Time
	cmd      *exec.Cmd
	done     chan struct{}
	state    *os.ProcessState
	exitTime time.Time
}

func startedProc(cmd *exec.Cmd) *proc {
	p := &proc{started: time.Now(), cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		p.exitTime = time.Now()
		p.state = cmd.ProcessState
		close(p.done)
	}()
	return p
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// exitCode is the exit code as a container runtime reports it: 128+signal for a killed process.
func (p *proc) exitCode() int {
	if ws, ok := p.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return p.state.ExitCode()
}

// stop sends SIGTERM, waits up to grace, then SIGKILL.
func (p *proc) stop(grace time.Duration) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("pid %d survived SIGKILL for 10s", p.pid())
	}
}

func newUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

func randomID() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
