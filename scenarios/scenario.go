// Package scenarios is the catalog of FUSE mount-loss scenarios and the machinery every backend shares.
//
// A Scenario is data: its setup (plugin flags, the workload pod), a list of steps (kill a component such as
// the plugin container, wait until the evidence shows X, start it again, observe for a while) and the outcomes
// it expects. A Backend (scenarios/local on this machine, scenarios/kube on a cluster) deploys the setup and
// kills and starts components; it records Evidence into the runner's Recorder: what the workload logged (with
// errno names), what the container runtime saw (exits, restarts, start failures with kubelet's messages) and
// what stat said about the volume paths. Expectations are Checks evaluated against that evidence only, never
// against what the runner believes it did. How FUSE mount loss happens is explained in
// docs/fuse-mount-loss.md.
package scenarios

import (
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/restore"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/dummy-fuse/dummyfs"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// RestartPolicy is a pod's restartPolicy.
type RestartPolicy string

// The pod restart policies of Kubernetes.
const (
	RestartAlways    RestartPolicy = "Always"
	RestartOnFailure RestartPolicy = "OnFailure"
	RestartNever     RestartPolicy = "Never"
)

// Restarts reports whether a container that exited with code is started again under policy p.
func (p RestartPolicy) Restarts(code int) bool {
	switch p {
	case RestartAlways:
		return true
	case RestartOnFailure:
		return code != 0
	}
	return false
}

// Propagation is a volume mount's mountPropagation.
type Propagation string

// The mount propagation modes a workload container can use (Bidirectional is for privileged plugins only).
const (
	PropagationNone            Propagation = "None"
	PropagationHostToContainer Propagation = "HostToContainer"
)

// The plugin's restore strategies (--restore-strategy), as the catalog names them.
const (
	StrategyRebind = string(restore.Rebind)
	StrategyStack  = string(restore.Stack)
)

// Topology is the plugin's FUSE mode, as the topology of the deployment it makes (Child when Mode is nil).
func (p Plugin) Topology() *topology.Topology {
	if p.Mode == nil {
		return topology.Child
	}
	return p.Mode
}

// FileName is the file the dummy-fuse filesystem serves at its root, and Content what it holds.
const (
	FileName = dummyfs.FileName
	Content  = dummyfs.Content
)

// Plugin is how the CSI node plugin runs.
type Plugin struct {
	// RestoreMounts passes --restore-mounts: the plugin remounts what its state dir records when it starts.
	RestoreMounts bool
	// RestoreStrategy is --restore-strategy (StrategyRebind or StrategyStack); empty means the plugin's default.
	RestoreStrategy string
	// Mode is the plugin's FUSE mode (--fuse-mode), as the topology of what it deploys; nil means the plugin's
	// default (topology.Child).
	Mode *topology.Topology
	// FuseServer is --fuse-server: the FUSE server program (internal/fuseserver: dummy-fuse, gcsfuse,
	// squashfuse); empty means dummy-fuse. A run sets it (ForServer) for the scenarios that hold for it.
	FuseServer string
	// Keeper is how the keeper runs in the modes that have one.
	Keeper Keeper
	// RelayBackendWait is --relay-backend-wait in the relay modes (the relay-keeper mode's keeper's; 0: the default, 30 s): how long the
	// relay lets requests wait for a real server that does not come back.
	RelayBackendWait time.Duration
	// Writable passes --relay-writable in the relay modes: the volume is mounted read-write and the relay
	// forwards writes, replaying what a dead real server had acknowledged but not stored; a backend gives the
	// relay-keeper mode's keeper, which runs the relays, the flag too. Writer containers (Container.Write) need it.
	Writable bool
	// SidecarKeepFD passes --sidecar-keep-fd in the sidecar mode: the plugin keeps its copy of each pod's FUSE
	// descriptor, so that a restarted sidecar takes the connection over (the pod's sidecar notices by itself).
	SidecarKeepFD bool
	// Remediation deploys the opt-in remediator (csi-remediate; chart remediation.enabled) beside the plugin;
	// nil: none.
	Remediation *Remediation
}

// Remediation is how the remediator runs (csi-plugin/remediate).
type Remediation struct {
	// Grace is how long a pod is given to heal on its own before the remediator acts (--grace), Interval the
	// time between its passes (--interval).
	Grace, Interval time.Duration
}

// ChartSets are the chart values (helm --set) that deploy the remediator this way.
func (r Remediation) ChartSets() []string {
	return []string{"remediation.enabled=true", "remediation.grace=" + r.Grace.String(), "remediation.interval=" + r.Interval.String()}
}

// Keeper is how `csi-plugin keeper` runs its FUSE servers.
type Keeper struct {
	// ReadLatency makes every read take this long inside a server (--read-latency), like a remote backend:
	// long enough for a server to die while a read is inside it.
	ReadLatency time.Duration
	// DirectIO passes --fuse-direct-io: every read reaches a server, so a gap between servers shows in the
	// workload's read latency instead of being hidden by the page cache.
	DirectIO bool
}

// Args returns the keeper's flags for this setup (besides its sockets and paths).
func (k Keeper) Args() []string {
	var args []string
	if k.DirectIO {
		args = append(args, "--fuse-direct-io")
	}
	if k.ReadLatency > 0 {
		args = append(args, "--read-latency="+k.ReadLatency.String())
	}
	return args
}

// Args returns the plugin's command-line flags for this setup (besides endpoint, node ID and paths).
func (p Plugin) Args() []string {
	var args []string
	if p.RestoreMounts {
		args = append(args, "--restore-mounts")
	}
	if p.RestoreStrategy != "" {
		args = append(args, "--restore-strategy="+p.RestoreStrategy)
	}
	if p.Mode != nil {
		args = append(args, "--fuse-mode="+p.Mode.Mode)
	}
	if p.SidecarKeepFD {
		args = append(args, "--sidecar-keep-fd")
	}
	if p.RelayBackendWait > 0 {
		args = append(args, "--relay-backend-wait="+p.RelayBackendWait.String())
	}
	if p.Writable {
		args = append(args, "--relay-writable")
	}
	if p.FuseServer != "" && p.FuseServer != fuseserver.DummyFuse {
		args = append(args, "--fuse-server="+p.FuseServer)
	}
	return args
}

// Server returns the FUSE server's name (FuseServer, or dummy-fuse when empty).
func (p Plugin) Server() string {
	if p.FuseServer == "" {
		return fuseserver.DummyFuse
	}
	return p.FuseServer
}

// ChartSets returns the chart's values (helm --set form) that deploy this setup, only those that differ from
// the chart's defaults (chart/values.yaml): the Kubernetes backend installs with them and the labelled
// manifests name them (manifests/README.md).
func (p Plugin) ChartSets() []string {
	var sets []string
	if !p.RestoreMounts {
		sets = append(sets, "csi.plugin.restoreMounts=false")
	}
	if p.RestoreStrategy != "" && p.RestoreStrategy != StrategyRebind {
		sets = append(sets, "csi.plugin.restoreStrategy="+p.RestoreStrategy)
	}
	if p.Mode != nil && p.Mode != topology.Child {
		sets = append(sets, "csi.plugin.fuseMode="+p.Mode.Mode)
	}
	if p.SidecarKeepFD {
		sets = append(sets, "sidecar.keepFd=true")
	}
	if p.Server() != fuseserver.DummyFuse && !fuseserver.IsSpecFile(p.Server()) {
		sets = append(sets, "csi.plugin.fuseServer="+p.Server()) // a spec file is the backend's to hand over
	}
	if p.Keeper.DirectIO {
		sets = append(sets, "csi.plugin.directIO=true")
	}
	if d := p.Keeper.ReadLatency; d > 0 {
		sets = append(sets, "keeper.readLatency="+d.String())
	}
	if p.Writable {
		sets = append(sets, "relay.writable=true")
	}
	if p.Topology().Has(topology.RelayProcess) && p.RelayBackendWait > 0 {
		sets = append(sets, "relay.backendWait="+p.RelayBackendWait.String())
	}
	if r := p.Remediation; r != nil {
		sets = append(sets, r.ChartSets()...)
	}
	return sets
}

// Pod is the workload pod: one volume (the dummy-fuse CSI volume) used by one or more containers.
type Pod struct {
	RestartPolicy RestartPolicy
	// Controller is the kind of the pod's controller: "" for a bare pod, ControllerReplicaSet for a
	// Deployment's pod, which the ReplicaSet creates anew (a new pod UID) when it is deleted.
	Controller string
	Containers []Container
	// Sidecar is the pod's FUSE sidecar, required by the plugin's sidecar mode; nil means none.
	Sidecar *Sidecar
}

// ControllerReplicaSet is Pod.Controller for a Deployment's pod.
const ControllerReplicaSet = "ReplicaSet"

// Sidecar is the pod's native sidecar container (an init container with restartPolicy: Always, as
// manifests/pod-sidecar.yaml has it): `csi-plugin sidecar` running as an unprivileged user without
// capabilities, with the pod's dfc-sidecar emptyDir, where the plugin serves the volume's /dev/fuse descriptor.
// Kubelet starts it before the workload containers and restarts it whenever it exits.
type Sidecar struct {
	// Delay is the sidecar's --delay: it waits this long before it connects to the plugin's socket.
	Delay time.Duration
}

// Args returns `csi-plugin sidecar`'s arguments for the volume whose socket is socket.
func (s Sidecar) Args(socket string) []string {
	args := []string{"sidecar", "--socket=" + socket}
	if s.Delay > 0 {
		args = append(args, "--delay="+s.Delay.String())
	}
	return args
}

// Container is one workload container: dummy-fuse-workload reading the volume's file.
type Container struct {
	Name string
	// ExitOnError passes --exit-on-error: the workload exits with code 1 on its first I/O error.
	ExitOnError bool
	// KeepOpen keeps one fd open for all reads (--keep-open=true); false opens the file for every read.
	KeepOpen bool
	// ReadInterval is --read-interval; zero means the backend's default (see Timing).
	ReadInterval time.Duration
	// MountPath is where the volume (or its SubPath) appears in the container; empty means /mnt.
	MountPath string
	// SubPath mounts this path inside the volume instead of the whole volume (kubelet's subPath).
	SubPath string
	// Propagation is the volume mount's mountPropagation; empty means None.
	Propagation Propagation
	// DirectIO passes --direct-io: every read reaches the FUSE server (O_DIRECT), so that a pause of the server
	// shows as the read's latency even where the server itself lets the page cache answer.
	DirectIO bool
	// RestartAllContainers gives the container a restart rule (KEP-5532; restartPolicy Always, and
	// restartPolicyRules [{action: RestartAllContainers, exitCodes: {operator: In, values: [1]}}]): its exit
	// with code 1, the workload's --exit-on-error, makes kubelet restart every container of the pod in place
	// (RestartAllContainersIn).
	RestartAllContainers bool
	// Write runs the workload's writer (--write) instead of a reader, as a training job does: it appends pieces
	// to its own file (WrittenObject) and checkpoints (write.go). ExitOnError is its own too; KeepOpen, DirectIO and
	// SubPath are the reader's. At the end of the run the runner has the backend stop it and read what it
	// wrote from the storage (StorageReader), which WritesKept compares with its log.
	Write bool
	// SyncEvery is a writer's --sync-every: it fsyncs its file every SyncEvery pieces; zero never (the rows
	// that keep writes, see WriteSize). The limit rows fsync, so that what a loss may take ends at a durable point.
	SyncEvery int
}

// RestartAllExitCode is the exit code a RestartAllContainers container's rule matches: the workload's on its
// first I/O error (--exit-on-error).
const RestartAllExitCode = 1

// Mount returns the container's mount path (default /mnt).
func (c Container) Mount() string {
	if c.MountPath == "" {
		return "/mnt"
	}
	return c.MountPath
}

// Prop returns the container's mount propagation (default None).
func (c Container) Prop() Propagation {
	if c.Propagation == "" {
		return PropagationNone
	}
	return c.Propagation
}

// File is the path inside the container that the workload reads (or, a writer, writes).
func (c Container) File() string {
	if c.Write {
		return path.Join(c.Mount(), c.WrittenObject())
	}
	if c.SubPath != "" && path.Base(c.SubPath) == FileName {
		return c.Mount() // a file subPath is mounted as the file itself
	}
	return path.Join(c.Mount(), FileName)
}

// WorkloadArgs returns dummy-fuse-workload's arguments for this container; its own ReadInterval wins over the
// backend's default.
func (c Container) WorkloadArgs(defaultInterval time.Duration) []string {
	interval := c.ReadInterval
	if interval <= 0 {
		interval = defaultInterval
	}
	if c.Write {
		return c.writerArgs(interval)
	}
	args := []string{
		"--file=" + c.File(),
		"--log-format=json",
		"--read-interval=" + interval.String(),
		fmt.Sprintf("--keep-open=%t", c.KeepOpen),
	}
	if c.ExitOnError {
		args = append(args, "--exit-on-error")
	}
	if c.DirectIO {
		args = append(args, "--direct-io")
	}
	return args
}

// Action is what a step does.
type Action string

// The step actions every backend implements.
const (
	// ActKill kills the step's Component abruptly (the plugin's FUSE servers die with it).
	ActKill Action = "kill"
	// ActStart starts the step's Component again (same configuration, same state) and waits until it serves.
	ActStart Action = "start"
	// ActWaitFor polls the evidence until Until holds or Timeout passes (a timeout is recorded, not fatal).
	ActWaitFor Action = "wait-for"
	// ActObserve lets time pass (For) while evidence accumulates.
	ActObserve Action = "observe"
	// ActUpgrade replaces the step's Component by a new build of it, as a rolling update does: the new one
	// starts beside the old one, which is then stopped.
	ActUpgrade Action = "upgrade"
)

// Step is one step of a scenario.
type Step struct {
	Action    Action
	Component topology.Component // ActKill, ActStart
	Until     Check              // ActWaitFor
	Timeout   Dur                // ActWaitFor
	For       Dur                // ActObserve
}

// Kill returns a step that kills component c.
func Kill(c topology.Component) Step { return Step{Action: ActKill, Component: c} }

// Start returns a step that starts component c again.
func Start(c topology.Component) Step { return Step{Action: ActStart, Component: c} }

// Upgrade returns a step that replaces component c by a new build of it.
func Upgrade(c topology.Component) Step { return Step{Action: ActUpgrade, Component: c} }

// KillPlugin returns a step that kills the plugin container.
func KillPlugin() Step { return Kill(topology.PluginContainer) }

// StartPlugin returns a step that starts the plugin container again.
func StartPlugin() Step { return Start(topology.PluginContainer) }

// WaitFor returns a step that waits until c holds, at most timeout.
func WaitFor(c Check, timeout Dur) Step {
	return Step{Action: ActWaitFor, Until: c, Timeout: timeout}
}

// Observe returns a step that lets d pass.
func Observe(d Dur) Step { return Step{Action: ActObserve, For: d} }

// Describe says what the step does, resolved with t.
func (s Step) Describe(t Timing) string {
	switch s.Action {
	case ActKill, ActStart, ActUpgrade:
		return s.Component.Says(topology.Verb(s.Action))
	case ActWaitFor:
		return fmt.Sprintf("wait until %s (at most %s)", s.Until.Describe(), s.Timeout.Explain(t))
	case ActObserve:
		return fmt.Sprintf("observe for %s", s.For.Explain(t))
	}
	return string(s.Action)
}

// Label is a few words for the step, used in the timeline picture.
func (s Step) Label() string {
	switch s.Action {
	case ActKill:
		return string(s.Component) + " killed"
	case ActStart:
		return string(s.Component) + " started"
	case ActUpgrade:
		return string(s.Component) + " upgraded"
	case ActWaitFor:
		return s.Until.Label()
	case ActObserve:
		return "observe"
	}
	return string(s.Action)
}

// Expectation is an outcome a scenario expects, checked against the evidence at the end of the run.
type Expectation struct {
	Check Check
	// Kubelet is the range of kubelet versions the outcome is expected on; the zero range means every version.
	// A run is judged by the expectations whose range holds the kubelet version it ran on.
	Kubelet KubeletRange
	// Source says where the expected outcome comes from: the kubelet code and change behind a version-dependent
	// outcome, or how sure we are of one not (yet) measured on a real kubelet.
	Source string
}

// Describe is the check's sentence, prefixed with the kubelet range when the outcome depends on the version.
func (e Expectation) Describe() string {
	if e.Kubelet.All() {
		return e.Check.Describe()
	}
	return e.Kubelet.String() + ": " + e.Check.Describe()
}

// Scenario is one FUSE mount-loss scenario, defined once and run by any backend.
type Scenario struct {
	Name  string
	Title string
	// Shows says in a sentence or two what the scenario demonstrates.
	Shows  string
	Plugin Plugin
	Pod    Pod
	Steps  []Step
	Expect []Expectation
	// Note is shown in the report (e.g. how sure we are about an expected outcome).
	Note string
	// VolumeHealth runs kubelet with the CSIVolumeHealth gate and a volumeStatsAggPeriod of HealthPeriod: it
	// asks the plugin for the volume's health and reports it the way its version does (a VolumeConditionAbnormal
	// event up to v1.36, pod.status.volumeHealth from v1.37).
	VolumeHealth bool
	// EveryRelease says why the scenario is to be checked on every kubelet release CI covers although its
	// expected outcome is the same on all: the kubelet code it goes through differs between them. Empty: the
	// newest release is enough, unless the outcome depends on the version (VersionDependent).
	EveryRelease string
	// EveryServer says why CI runs the scenario on the kube backend with each real FUSE server too (the
	// gcsfuse pass of make ci-kube), not only with dummy-fuse: its outcome is about what the server does. Empty:
	// the local backend's runs with every server and dummy-fuse's on the real kubelet are enough. Only a
	// scenario whose Servers include the real ones may say so.
	EveryServer string
	// Backends names the backends (Backend.Name) that can deploy the setup; empty means every backend.
	// BackendsWhy says why the others cannot (yet).
	Backends    []string
	BackendsWhy string
	// Servers names the FUSE servers (internal/fuseserver) its expectations hold for, besides dummy-fuse, which
	// every scenario runs with: a row whose outcome does not depend on what the server is lists them all
	// (AllServers). Where a server behaves differently, the row's expectations say so from evidence.
	Servers []string
	// ServersWhy says why the row runs with the built-in servers Servers names and no other, not even dummy-fuse
	// (unless Servers names it): its checks need what only those give. A server described in a spec file runs it
	// when its spec gives that (the rows that write: the objectURL their check reads the storage through).
	// Empty: Servers as above.
	ServersWhy string
	// Measured: the row runs against a driver the catalog knows nothing of (a driver-agnostic run), so its
	// outcome is measured, not expected: its expectations only say that the evidence was collected, and a run
	// whose expectations hold is MEASURED, not PASS.
	Measured bool
	// Driver is the CSI driver a Measured row ran against (set by the run, not the catalog), DriverPlacement
	// where that driver keeps its FUSE servers as the operator says it (dfc-scenario --placement; "" unknown),
	// and DriverServer its FUSE server's process name (--fuse-process; "" unknown).
	Driver, DriverPlacement, DriverServer string
}

// AllServers are the FUSE servers a server-independent scenario runs with.
var AllServers = fuseserver.Names()

// ForServer returns the scenario set up for the FUSE server called server (empty: dummy-fuse; or the path of a
// server spec file), or an error saying why it does not hold for it.
func (s Scenario) ForServer(server string) (Scenario, error) {
	if server == "" || server == fuseserver.DummyFuse {
		if !s.RunsWithDummyFuse() {
			return s, s.onlyServers(fuseserver.DummyFuse)
		}
		return s, nil
	}
	k, err := fuseserver.Lookup(server)
	if err != nil {
		return s, err
	}
	if len(s.Writers()) > 0 && !k.StoresObjects() {
		return s, fmt.Errorf("scenario %s holds the storage behind the server to what its writers were told was written, read "+
			"through the objectURL of the server's spec, and the spec of %s gives none (docs/server-spec.md)", s.Name, server)
	}
	if len(s.Writers()) > 0 && k.DurableLater() {
		return s, fmt.Errorf("scenario %s holds the storage to every close and fsync that returned 0, and the spec of %s says what it "+
			"writes reaches its storage only later, in the background (durableAt: later): the relay cannot promise that for it", s.Name, server)
	}
	if s.ServersWhy != "" && !slices.Contains(s.Servers, server) && !fuseserver.IsSpecFile(server) {
		return s, s.onlyServers(server)
	}
	// A server described in a spec file runs the rows that hold for every server.
	if !slices.Contains(s.Servers, server) && (!fuseserver.IsSpecFile(server) || len(s.Servers) == 0) {
		return s, fmt.Errorf("scenario %s runs with dummy-fuse only, not %s: its outcome depends on the server (runs with: %s)", s.Name, server, strings.Join(append([]string{fuseserver.DummyFuse}, s.Servers...), ", "))
	}
	if t := s.Plugin.Topology(); t.ServerGetsFD && !k.ServesFD() && !(t.Fusermount && k.Fusermount()) {
		cannot := "servesFD: false"
		if t.Fusermount {
			cannot += ", fusermount: false"
		}
		return s, fmt.Errorf("scenario %s has the server serve a connection the plugin mounted (%s mode), and the spec of %s says it cannot (%s): it runs where the server mounts its directory itself", s.Name, t, server, cannot)
	}
	if s.upgradesServer() && k.UpgradeArg() == "" {
		return s, fmt.Errorf("scenario %s gives the server a next build, which needs the upgradeArg of its spec, and %s has none", s.Name, server)
	}
	s.Plugin.FuseServer = server
	return s, nil
}

// RunsWithDummyFuse reports whether the scenario runs with dummy-fuse as its FUSE server: every one does but
// those whose ServersWhy names the servers they need without it.
func (s Scenario) RunsWithDummyFuse() bool {
	return s.ServersWhy == "" || slices.Contains(s.Servers, fuseserver.DummyFuse)
}

// onlyServers is the error of a scenario that runs with its Servers only, asked to run with server.
func (s Scenario) onlyServers(server string) error {
	return fmt.Errorf("scenario %s runs with %s only, not %s: %s", s.Name, strings.Join(s.Servers, ", "), server, s.ServersWhy)
}

// upgradesServer reports whether a step upgrades the real server behind the relay.
func (s Scenario) upgradesServer() bool {
	return slices.ContainsFunc(s.Steps, func(st Step) bool { return st.Action == ActUpgrade && st.Component == topology.RelayServer })
}

// RunsOn returns nil when the backend called backend can deploy the scenario, else an error saying why not.
func (s *Scenario) RunsOn(backend string) error {
	if len(s.Backends) == 0 || slices.Contains(s.Backends, backend) {
		return nil
	}
	return fmt.Errorf("scenario %s cannot run on the %s backend (it runs on: %s): %s", s.Name, backend,
		strings.Join(s.Backends, ", "), s.BackendsWhy)
}

// VersionDependent reports whether the scenario expects different outcomes on different kubelet versions.
func (s *Scenario) VersionDependent() bool {
	for _, e := range s.Expect {
		if !e.Kubelet.All() {
			return true
		}
	}
	return false
}

// OnEveryRelease reports whether the scenario is to be run on every kubelet release CI covers: its outcome
// depends on the version, or the kubelet code it goes through changed between releases (EveryRelease).
func (s *Scenario) OnEveryRelease() bool {
	return s.VersionDependent() || s.EveryRelease != ""
}

// OnEveryServer reports whether CI runs the scenario with each real FUSE server on the kube backend
// (EveryServer).
func (s *Scenario) OnEveryServer() bool { return s.EveryServer != "" }

// ExpectFor returns the expectations that apply to a run on kubelet v.
func (s *Scenario) ExpectFor(v KubeletVersion) []Expectation {
	var out []Expectation
	for _, e := range s.Expect {
		if e.Kubelet.Contains(v) {
			out = append(out, e)
		}
	}
	return out
}

// Container returns the named container of the scenario's pod.
func (s *Scenario) Container(name string) (Container, bool) {
	for _, c := range s.Pod.Containers {
		if c.Name == name {
			return c, true
		}
	}
	return Container{}, false
}

// Kills reports whether a step kills (or replaces) a component: the measures from the kill mean nothing
// otherwise.
func (s *Scenario) Kills() bool {
	return slices.ContainsFunc(s.Steps, func(st Step) bool { return st.Action == ActKill || st.Action == ActUpgrade })
}

// Components lists the components the steps kill or start, in the order the steps first name them.
func (s *Scenario) Components() []topology.Component {
	var out []topology.Component
	for _, st := range s.Steps {
		if (st.Action == ActKill || st.Action == ActStart || st.Action == ActUpgrade) && !slices.Contains(out, st.Component) {
			out = append(out, st.Component)
		}
	}
	return out
}

// Validate checks that the scenario is complete and consistent.
func (s *Scenario) Validate() error {
	if s.Name == "" || s.Title == "" {
		return fmt.Errorf("scenario %q: name and title are required", s.Name)
	}
	switch s.Plugin.RestoreStrategy {
	case "", StrategyRebind, StrategyStack, string(restore.Setns):
	default:
		return fmt.Errorf("scenario %s: unknown restore strategy %q", s.Name, s.Plugin.RestoreStrategy)
	}
	t := s.Plugin.Topology()
	if t.Has(topology.SidecarContainer) != (s.Pod.Sidecar != nil) {
		return fmt.Errorf("scenario %s: the plugin's FUSE mode is %s: a pod sidecar goes with the %s mode and only with it", s.Name, t, topology.Sidecar)
	}
	if s.Pod.Sidecar != nil && s.Pod.Sidecar.Delay < 0 {
		return fmt.Errorf("scenario %s: negative sidecar delay %s", s.Name, s.Pod.Sidecar.Delay)
	}
	if s.Plugin.Keeper.ReadLatency < 0 {
		return fmt.Errorf("scenario %s: negative keeper read latency %s", s.Name, s.Plugin.Keeper.ReadLatency)
	}
	if s.Plugin.SidecarKeepFD && !t.Has(topology.SidecarContainer) {
		return fmt.Errorf("scenario %s: keeping the sidecar's descriptor without the sidecar FUSE mode", s.Name)
	}
	if !t.Has(topology.KeeperContainer) && s.Plugin.Keeper != (Keeper{}) {
		return fmt.Errorf("scenario %s: keeper settings without a keeper (the %s mode has none)", s.Name, t)
	}
	if s.Measured != (t == topology.ForeignDriver) {
		return fmt.Errorf("scenario %s: a measured row runs against a foreign driver (topology.ForeignDriver), and only it", s.Name)
	}
	if s.EveryServer != "" && (len(s.Servers) == 0 || s.RunsOn(BackendKube) != nil) {
		return fmt.Errorf("scenario %s: run with every real server on the kube backend, but it holds for no real server or cannot run there", s.Name)
	}
	if s.ServersWhy != "" && len(s.Servers) == 0 {
		return fmt.Errorf("scenario %s: it says why it runs with some servers only, but names none", s.Name)
	}
	if len(s.Backends) > 0 && s.BackendsWhy == "" {
		return fmt.Errorf("scenario %s: it names the backends that can run it, but not why the others cannot", s.Name)
	}
	switch s.Pod.RestartPolicy {
	case RestartAlways, RestartOnFailure, RestartNever:
	default:
		return fmt.Errorf("scenario %s: unknown restart policy %q", s.Name, s.Pod.RestartPolicy)
	}
	if len(s.Pod.Containers) == 0 {
		return fmt.Errorf("scenario %s: the pod has no containers", s.Name)
	}
	seen := map[string]bool{}
	for _, c := range s.Pod.Containers {
		if c.Name == "" || seen[c.Name] {
			return fmt.Errorf("scenario %s: container names must be unique and non-empty (%q)", s.Name, c.Name)
		}
		seen[c.Name] = true
		if !path.IsAbs(c.Mount()) {
			return fmt.Errorf("scenario %s: container %s: mount path %q is not absolute", s.Name, c.Name, c.Mount())
		}
		if c.SubPath != "" && (path.IsAbs(c.SubPath) || strings.HasPrefix(path.Clean(c.SubPath), "..")) {
			return fmt.Errorf("scenario %s: container %s: subPath %q must be relative and stay in the volume", s.Name, c.Name, c.SubPath)
		}
		switch c.Prop() {
		case PropagationNone, PropagationHostToContainer:
		default:
			return fmt.Errorf("scenario %s: container %s: unknown propagation %q", s.Name, c.Name, c.Propagation)
		}
	}
	if err := s.validateWrites(); err != nil {
		return fmt.Errorf("scenario %s: %w", s.Name, err)
	}
	if len(s.Steps) == 0 {
		return fmt.Errorf("scenario %s: no steps", s.Name)
	}
	for i, st := range s.Steps {
		switch st.Action {
		case ActKill, ActStart, ActUpgrade:
			if err := t.Check(st.Component, topology.Verb(st.Action)); err != nil {
				return fmt.Errorf("scenario %s: step %d: %w", s.Name, i+1, err)
			}
		case ActObserve:
		case ActWaitFor:
			if st.Until == nil {
				return fmt.Errorf("scenario %s: step %d waits for nothing", s.Name, i+1)
			}
		default:
			return fmt.Errorf("scenario %s: step %d: unknown action %q", s.Name, i+1, st.Action)
		}
		if err := checkContainers(s, st.Until); err != nil {
			return fmt.Errorf("scenario %s: step %d: %w", s.Name, i+1, err)
		}
	}
	if len(s.Expect) == 0 {
		return fmt.Errorf("scenario %s: expects nothing", s.Name)
	}
	for _, e := range s.Expect {
		if e.Check == nil {
			return fmt.Errorf("scenario %s: an expectation has no check", s.Name)
		}
		if err := checkContainers(s, e.Check); err != nil {
			return fmt.Errorf("scenario %s: %w", s.Name, err)
		}
		if err := e.Kubelet.validate(); err != nil {
			return fmt.Errorf("scenario %s: %q: %w", s.Name, e.Check.Describe(), err)
		}
	}
	return nil
}

func checkContainers(s *Scenario, c Check) error {
	if c == nil {
		return nil
	}
	for _, name := range c.Containers() {
		if _, ok := s.Container(name); !ok {
			return fmt.Errorf("check %q names container %q that the pod does not have", c.Describe(), name)
		}
	}
	return nil
}

// Timing is what a backend's clock looks like: the defaults that scale the scenarios' waits.
type Timing struct {
	// ReadInterval is the workload's read interval when a container does not set one.
	ReadInterval time.Duration
	// BackoffBase and BackoffMax are the container restart back-off (kubelet: 10s doubling up to 5m).
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// Teardown bounds the backend's Stop (default 60s): a cluster waits for kubelet to unmount, helm and the
	// namespace.
	Teardown time.Duration
}

// Dur is a duration that scales with the backend: Fixed + Reads read intervals + Backoffs back-off bases.
// A scenario written with Dur waits long enough on a real kubelet (10 s back-off) and briefly locally.
type Dur struct {
	Fixed    time.Duration
	Reads    float64
	Backoffs float64
}

// Resolve returns the duration under timing t.
func (d Dur) Resolve(t Timing) time.Duration {
	return d.Fixed + time.Duration(d.Reads*float64(t.ReadInterval)) + time.Duration(d.Backoffs*float64(t.BackoffBase))
}

// String describes d symbolically ("2s + 4 back-offs").
func (d Dur) String() string {
	var parts []string
	if d.Fixed != 0 {
		parts = append(parts, d.Fixed.String())
	}
	if d.Reads != 0 {
		parts = append(parts, fmt.Sprintf("%g read intervals", d.Reads))
	}
	if d.Backoffs != 0 {
		parts = append(parts, fmt.Sprintf("%g back-offs", d.Backoffs))
	}
	if len(parts) == 0 {
		return "0s"
	}
	return strings.Join(parts, " + ")
}

// Explain is String plus the resolved value when it scales ("3s (1s + 4 back-offs)").
func (d Dur) Explain(t Timing) string {
	r := d.Resolve(t).Round(10 * time.Millisecond).String()
	if d.Reads == 0 && d.Backoffs == 0 {
		return r
	}
	return fmt.Sprintf("%s (%s)", r, d)
}
