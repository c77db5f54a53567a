// Package local is the scenario backend that plays kubelet and the container runtime on this machine with
// real processes, real mounts and real mount namespaces, in seconds and without a cluster: the plugin, each
// container and each FUSE server holder is a process in namespaces of its own, driven through its part
// (parts.go). scenarios/README.md ("How the local backend plays kubelet and the container runtime") says what
// it does as kubelet, containerd and runc would, and where it stops.
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

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/contract"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/podcgroup"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
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
	// ServersDir holds the real FUSE servers and what they need (make servers: bin/servers); an executable not
	// there is looked for in $PATH.
	ServersDir string
	// ServerOpts are the settings of a server described in a spec file (--fuse-server-opt); the built-in real
	// servers get theirs from what the backend prepares for them to read (package backing).
	ServerOpts map[string]string
	// KubeletVersion is the kubelet whose behaviour the backend reproduces: one of KubeletVersions or its
	// minor (default: the newest). Start fails on any other.
	KubeletVersion string
	// Keep leaves everything running and mounted at Stop; KeepNote then says how to inspect and clean up.
	Keep bool
	// FirstStartWait bounds how long the pod's containers take to make their first start attempt (default 60s).
	FirstStartWait time.Duration
}

// BinariesIn sets the binary paths to the project's binaries in dir, and the next build to those in dir/next
// when it holds them (make build puts a build of another version there).
func (o *Options) BinariesIn(dir string) {
	o.PluginPath = filepath.Join(dir, "csi-plugin")
	o.FusePath = filepath.Join(dir, "dummy-fuse")
	o.WorkloadPath = filepath.Join(dir, "dummy-fuse-workload")
	o.ServersDir = filepath.Join(dir, "servers")
	next := filepath.Join(dir, NextDir)
	if _, err := os.Stat(filepath.Join(next, "dummy-fuse")); err == nil {
		o.NextPluginPath = filepath.Join(next, "csi-plugin")
		o.NextFusePath = filepath.Join(next, "dummy-fuse")
	}
}

// findServer returns the executable called name from ServersDir, else beside dfc-scenario, else $PATH, else "".
func (o *Options) findServer(name string) string { return fuseserver.Find(name, o.ServersDir) }

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
	sock      string
	sockDir   string // the short directory of the plugin's sockets when the run directory is too long for them
	stateDir  string
	vol       volume
	logs      runLogs
	pod       podState

	// parts are the scenario's components with their handlers (parts.go), and peers those that others reach.
	parts *topology.Parts[part]
	peers peers

	plugin       *proc
	pluginStarts int
	csi          *csiClient

	loopCtx   context.Context    // the kubelet loops' and the probe's, for the life of the backend
	cancel    context.CancelFunc // stops the kubelet loops and the probe
	rootBound bool
	stopped   bool
	keepNote  string

	// mu guards csi, vol and pod's uid, deleted and containers against the background loops (bg): the volume
	// health probe and the remediator, which read them, and the remediator's recreation of the pod.
	mu sync.Mutex
	bg sync.WaitGroup // the background loops, for the life of the backend (loopCtx)
}

// runLogs are the run's own logs (a part opens its own, e.g. keeper.log, and adds it to all).
type runLogs struct {
	kubelet, plugin, workload *scenarios.LogFile
	// remediator holds the remediator's decisions (Plugin.Remediation).
	remediator *scenarios.LogFile
	// all are every log file opened, closed at Stop.
	all []*scenarios.LogFile
}

// podState is the current workload pod's.
type podState struct {
	uid string
	// deleted: a step deleted the pod and none was created since.
	deleted    bool
	containers []*container
	cancel     context.CancelFunc // stops the pod's loops and probe
	wg         sync.WaitGroup     // the pod's loops and probe
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
	b.logs.plugin, b.logs.workload, b.logs.kubelet = logs[0], logs[1], logs[2]
	b.logs.all = append(b.logs.all, logs...)
	if b.peers.server, err = newServer(b, env); err != nil {
		return err
	}
	if err := b.makeParts(env); err != nil {
		return err
	}
	if sc.Plugin.Remediation != nil {
		if logs, err = env.Logs("remediator.log"); err != nil {
			return err
		}
		b.logs.remediator = logs[0]
		b.logs.all = append(b.logs.all, logs[0])
	}

	if err := makeRShared(b.root); err != nil {
		return err
	}
	b.rootBound = true
	b.logf("modelling kubelet %s; kubelet root %s: bind-mounted onto itself, rshared", b.kubelet, b.root)

	b.sock = filepath.Join(b.pluginDir(), "csi.sock")
	// sun_path holds 108 bytes with the terminating NUL (unix(7)); a longer path fails only when the plugin
	// binds, with a bare "invalid argument". A run directory in a checkout deep in a home directory is that
	// long: the plugin's sockets (CSI, keeper) then live in a short directory of their own, removed at the end.
	// The keeper socket beside it is the longer name.
	if len(filepath.Join(filepath.Dir(b.sock), contract.KeeperSocket)) > maxSocketPath || len(b.sock) > maxSocketPath {
		dir, err := os.MkdirTemp("", "dfc-sock-")
		if err != nil {
			return fmt.Errorf("a short directory for the plugin's sockets (%s is %d bytes long, more than the %d a unix socket path allows): %w", b.sock, len(b.sock), maxSocketPath, err)
		}
		b.sockDir, b.sock = dir, filepath.Join(dir, "csi.sock")
		b.logf("the plugin's socket would be longer than a unix socket path allows below %s: it is %s", b.root, b.sock)
	}
	b.stateDir = filepath.Join(b.dir, "plugin-state")
	for _, d := range []string{b.pluginDir(), filepath.Dir(b.sock), b.stateDir} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return err
		}
	}
	if err := b.startPlugin(ctx); err != nil {
		return err
	}
	for _, p := range b.parts.All() {
		if err := p.deploy(ctx); err != nil {
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
	errs := []error{b.waitLoops(&b.bg, &b.pod.wg)}
	if b.opts.Keep && b.sc != nil {
		b.printKeep()
		b.closeLogs()
		return errors.Join(errs...)
	}

	// Delete the pod: SIGTERM, a grace period, SIGKILL (kubelet's order).
	if !b.pod.deleted {
		errs = append(errs, b.stopPod("teardown: "))
	}
	if b.plugin != nil && !b.plugin.exited() && b.csi != nil && !b.pod.deleted {
		if err := b.csi.unpublishAndUnstage(ctx, b.vol, b.logf); err != nil {
			b.logf("teardown: %v", err) // the unmount below cleans up what the plugin could not
		}
	}
	for _, p := range b.parts.All() {
		errs = append(errs, p.teardown())
	}
	if b.peers.server != nil {
		b.peers.server.stop()
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
	if b.sockDir != "" {
		// It holds sockets and the keeper's secret only: the ephemeral directory stays below the root.
		if err := os.RemoveAll(b.sockDir); err != nil {
			errs = append(errs, fmt.Errorf("remove the plugin's socket directory: %w", err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		b.logf("teardown failed: %v", err)
	}
	b.closeLogs()
	return errors.Join(errs...)
}

// loopsWait bounds how long the kubelet loops and the probe take to end once cancelled.
const loopsWait = 10 * time.Second

// waitLoops waits for the loops of wgs to end, once cancelled. A loop inside a stat of a FUSE mount that no
// server answers (a connection never initialised, or with no server left) waits in D state, as kubelet's would,
// until the connection ends: after loopsWait, the run's own FUSE connections are aborted, which ends those stats
// (ECONNABORTED), and the error says so. It gives up after a second loopsWait.
func (b *Backend) waitLoops(wgs ...*sync.WaitGroup) error {
	done := make(chan struct{})
	go func() {
		for _, wg := range wgs {
			wg.Wait()
		}
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-time.After(loopsWait):
	}
	ids, err := abortFUSEUnder(b.dir)
	b.logf("teardown: the kubelet loops or the probe still wait %s after they were stopped (a stat of a FUSE mount no server answers): aborted FUSE connections %v (%v)", loopsWait, ids, err)
	select {
	case <-done:
		return fmt.Errorf("the kubelet loops or the probe waited more than %s on a FUSE mount no server answered; the run's FUSE connections %v were aborted to end them", loopsWait, ids)
	case <-time.After(loopsWait):
		return fmt.Errorf("the kubelet loops or the probe still wait %s after the run's FUSE connections %v were aborted (%v): left behind", loopsWait, ids, err)
	}
}

// KeepNote says, after Stop with Keep, what was left running and the commands that clean it up.
func (b *Backend) KeepNote() string { return b.keepNote }

// printKeep records how to inspect and how to clean up what --keep left behind.
func (b *Backend) printKeep() {
	var w strings.Builder
	var pids []string
	fmt.Fprintf(&w, "--keep: everything is left running (the local kubelet is gone: nothing restarts any more).\n")
	for _, kp := range b.procs() {
		if !kp.p.exited() {
			fmt.Fprintf(&w, "  %s\n", kp.note)
			pids = append(pids, fmt.Sprint(kp.p.pid()))
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
	if dir, err := podcgroup.PodDir(b.pod.uid); err == nil && b.pod.uid != "" {
		fmt.Fprintf(&w, "  rmdir %s/*/ %s\n", dir, dir) // the containers' cgroups, once their processes are gone
	}
	b.keepNote = w.String()
}

func (b *Backend) closeLogs() {
	for _, l := range b.logs.all {
		_ = l.Close()
	}
}

// procs lists every process the parts started that they still know of, in the parts' order.
func (b *Backend) procs() []knownProc {
	var out []knownProc
	for _, p := range b.parts.All() {
		out = append(out, p.procs()...)
	}
	return out
}

func (b *Backend) logf(format string, args ...any) {
	b.logs.kubelet.WriteLine(time.Now().UTC().Format("15:04:05.000000"), fmt.Appendf(nil, format, args...))
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

// maxSocketPath is the longest path a unix socket can be bound at: sun_path holds 108 bytes with the NUL.
const maxSocketPath = 107

// pluginDir is the plugin's directory below the kubelet root (plugins/<driver>), where kubelet expects it; the
// plugin's inline ephemeral volumes are staged there, whatever directory its sockets are in.
func (b *Backend) pluginDir() string { return filepath.Join(b.root, "plugins", b.opts.DriverName) }
