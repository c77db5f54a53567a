// Package kube is the scenario backend that runs the catalog (package scenarios) on a real Kubernetes cluster,
// the current kubeconfig's: it installs chart/ with the helm library, creates the workload from manifests/,
// kills and starts each component of the scenario's topology through its part (parts.go), and records the
// evidence from watches and log streams, never from polling. scenarios/README.md ("Kubernetes backend") says
// what a run does and where the real kubelet differs from the local one.
package kube

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/kubeletpath"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// Defaults of Options.
const (
	// DefaultDriverName is the CSI driver name of scenario runs: not the chart's default, so that a run never
	// touches a release a user installed (make kind-up) and both can run on one node.
	DefaultDriverName = "scenario.dummy-fuse-csi"
	// DefaultStateDir is the plugin's mount-record dir on the node for scenario runs.
	DefaultStateDir = "/var/lib/dummy-fuse-csi-scenario"
	// DefaultKubeletDir is kubelet's --root-dir.
	DefaultKubeletDir = kubeletpath.DefaultRoot
	// DefaultReadInterval is the workload's read interval: ten reads per kubelet back-off base.
	DefaultReadInterval = time.Second

	releaseName = "dfc-scenario"
	// managedBy labels every object of a run, so that a crashed run's leftovers can be found.
	managedByLabel = "app.kubernetes.io/managed-by"
	managedBy      = "dfc-scenario"
	// offLabel is the nodeSelector key that keeps the plugin or the keeper DaemonSet off every node between
	// killing and starting the plugin or the keeper.
	offLabel        = "dummy-fuse-csi/scenario-off"
	pluginContainer = "plugin"
)

// kubelet's container restart back-off (pkg/kubelet/kubelet.go: backOffPeriod, MaxContainerBackOff).
const (
	kubeletBackoffBase = 10 * time.Second
	kubeletBackoffMax  = 5 * time.Minute
)

// Options configure the Kubernetes backend.
type Options struct {
	// Kubeconfig is the kubeconfig file ("": $KUBECONFIG, else ~/.kube/config) and Context its context ("":
	// the current one).
	Kubeconfig, Context string
	// Repo is the source tree holding chart/ and manifests/ (default: found from the working directory up).
	Repo string
	// Image is the dummy-fuse-csi image for the plugin and the workload, already on the node (default: the
	// tag of the last `make image`, _output/images/dummy-fuse-csi.ref).
	Image string
	// ChartValues are extra chart values in --set form (e.g. registrar.mode=sidecar and the sidecar images).
	ChartValues []string
	// ServerOpts are the settings of a server described in a spec file (--fuse-server-opt): the chart's
	// fuseServer.settings. Its image and files come with ChartValues (fuseServer.image, fuseServer.files).
	ServerOpts map[string]string
	// KubeletDir is kubelet's root dir on the node, the chart's kubeletDir (default /var/lib/kubelet).
	KubeletDir string
	// DriverName and StateDir are the chart's driverName and stateDir (defaults DefaultDriverName,
	// DefaultStateDir).
	DriverName, StateDir string
	// ReadInterval is the workload's read interval when a scenario sets none (default 1s).
	ReadInterval time.Duration
	// Probe says how the volume paths are stat'ed: "host" (this machine is the node: stat every 100 ms),
	// "pod" (a probe pod reads through hostPath mounts every 500 ms), "auto" or "" (host when the pod's
	// directory exists on this machine, else pod).
	Probe string
	// KubeletLog is a file holding kubelet's log, followed for causes that kubelet logs but does not put in
	// events (the cause of "failed to prepare subPath"). Default: the from-source cluster's log when it
	// exists ($DFC_CLUSTER_DIR/logs/kubelet.log); "-" turns it off.
	KubeletLog string
	// KubeletLogCommand prints kubelet's log as it grows, instead of KubeletLog (e.g. docker exec NODE
	// journalctl -u kubelet -f -o cat -n 0). Default on kind: that command when docker is in $PATH.
	KubeletLogCommand []string
	// SetupTimeout bounds each wait of Setup and of starting the plugin (default 3m).
	SetupTimeout time.Duration
	// Keep leaves the namespace, the release, the volume and the pod in place at Stop; KeepNote says how to
	// remove them. The next run removes them too.
	Keep bool
	// Driver, when set, runs the driver-agnostic rows (catalog.Drivers) against this foreign CSI driver instead
	// of installing chart/ (driver.go).
	Driver *DriverTarget
	// Progress receives a line per action of the backend (besides kube.log in the run dir); nil: none.
	Progress func(string)
}

func (o *Options) defaults() error {
	if o.Repo == "" {
		wd, err := os.Getwd()
		if err != nil {
			return err
		}
		if o.Repo, err = FindRepo(wd); err != nil {
			return err
		}
	}
	if o.Image == "" {
		ref, err := ImageRef(o.Repo)
		if err != nil {
			return err
		}
		o.Image = ref
	}
	if o.KubeletDir == "" {
		o.KubeletDir = DefaultKubeletDir
	}
	if o.DriverName == "" {
		o.DriverName = DefaultDriverName
	}
	if o.StateDir == "" {
		o.StateDir = DefaultStateDir
	}
	if o.ReadInterval <= 0 {
		o.ReadInterval = DefaultReadInterval
	}
	if o.SetupTimeout <= 0 {
		o.SetupTimeout = 3 * time.Minute
	}
	switch o.Probe {
	case "", "auto":
		o.Probe = "auto"
	case "host", "pod":
	default:
		return fmt.Errorf("probe %q: want auto, host or pod", o.Probe)
	}
	return nil
}

// Backend is the Kubernetes scenario backend. Use New; one Backend runs one scenario.
type Backend struct {
	opts   Options
	optErr error
	cs     kubernetes.Interface
	cfg    *rest.Config // for exec into the sidecar
	man    *manifests
	rec    *scenarios.Recorder
	env    *scenarios.Env

	sc    *scenarios.Scenario
	dir   string
	n     names
	helm  *helmRelease
	vols  map[string]string // path label → host path
	node  string
	local bool // the node's kubelet dir is on this machine
	// podLogsDir is the node kubelet's podLogsDir, read for RestartAllContainers scenarios (restartall.go).
	podLogsDir string
	logs       runLogs
	// sidecarName is the pod's FUSE sidecar container's name (the sidecar mode).
	sidecarName string

	mu       sync.Mutex
	workload *podWatch
	pod      podState
	plugins  map[string]*dsPod // by pod UID
	// keeper is the keeper part, which follows the keeper pods (the modes with a keeper); nil: none.
	keeper *keeperPart
	// remediators are the remediator DaemonSet's pods, by pod UID (Plugin.Remediation).
	remediators map[string]*dsPod
	watch       watchers

	ctx    context.Context // lives from Start to Stop: informers, log streams, probes
	cancel context.CancelFunc
	wg     sync.WaitGroup
	life   lifeState
	// parts are the scenario's components with their handlers (parts.go).
	parts *topology.Parts[part]
}

// runLogs are the run's logs: kube.log, the plugin's, the workload's, kubelet's own, and those of the
// components a scenario may have (nil when it has none).
type runLogs struct {
	kube, plugin, workload, kubelet *scenarios.LogFile
	sidecar, keeper, remediator     *scenarios.LogFile
}

// podState is the workload pod's, across the pods the pod component creates.
type podState struct {
	uid  string      // the current pod's UID
	uids []string    // every workload pod's UID (the pod component creates new ones)
	spec *corev1.Pod // the workload pod as created (again by the pod component)
	// uidSet: every workload pod's UID so far, for events that arrive after a successor took over
	uidSet map[string]bool
	// states: pod UID → its last state line in kube.log
	states map[string]string
	// volumeHealth: pod UID → its status.volumeHealth for the run's volume, as last recorded (VolumeHealth)
	volumeHealth map[string]string
	// deleting: the backend itself deletes the workload pod (the pod component's kill)
	deleting  atomic.Bool
	probe     *podWatch
	probeStop context.CancelFunc // ends the host probe of the current pod's paths
}

// watchers read what the cluster says besides the pods: events, kubelet's own log, the plugin's unstaging.
type watchers struct {
	events  map[string]int32 // event UID → count seen
	kubelet *kubeletLog
	unstage *unstageWatch
}

// lifeState is what Setup made that Stop undoes, and what Stop did.
type lifeState struct {
	installed bool
	nsCreated bool
	off       map[string]bool // DaemonSet name → kept off the node (in the run's namespace)
	stopped   bool
	keepNote  string
}

var _ scenarios.Backend = (*Backend)(nil)

// New returns a Kubernetes backend; configuration errors are reported by Start.
func New(opts Options) *Backend {
	b := &Backend{opts: opts, plugins: map[string]*dsPod{}, remediators: map[string]*dsPod{}, life: lifeState{off: map[string]bool{}},
		watch: watchers{events: map[string]int32{}, unstage: newUnstageWatch()}, pod: podState{uidSet: map[string]bool{}}}
	b.optErr = b.opts.defaults()
	return b
}

// Name implements scenarios.Backend.
func (b *Backend) Name() string { return scenarios.BackendKube }

// Timing implements scenarios.Backend: kubelet's real restart back-off, and a read interval of a tenth of it.
// Teardown waits for kubelet to unpublish and unstage, for helm and for the namespace.
func (b *Backend) Timing() scenarios.Timing {
	iv := b.opts.ReadInterval
	if iv <= 0 {
		iv = DefaultReadInterval
	}
	return scenarios.Timing{ReadInterval: iv, BackoffBase: kubeletBackoffBase, BackoffMax: kubeletBackoffMax,
		Teardown: 10 * time.Minute}
}

// Describe implements scenarios.Backend.
func (b *Backend) Describe() string {
	t := b.Timing()
	return fmt.Sprintf("backend kube: read interval %s, kubelet's own restart back-off (%s doubling to %s), image %s",
		t.ReadInterval, t.BackoffBase, t.BackoffMax, b.opts.Image)
}

// KeepNote says, after Stop with Keep, what was left and how to remove it.
func (b *Backend) KeepNote() string { return b.life.keepNote }

// RESTClientGetter returns the kubeconfig loader of opts (for helm and client-go alike).
func RESTClientGetter(opts Options, namespace string) genericclioptions.RESTClientGetter {
	f := genericclioptions.NewConfigFlags(false)
	if opts.Kubeconfig != "" {
		f.KubeConfig = &opts.Kubeconfig
	}
	if opts.Context != "" {
		f.Context = &opts.Context
	}
	if namespace != "" {
		f.Namespace = &namespace
	}
	return f
}

// RESTConfig is the client configuration of opts' kubeconfig.
func RESTConfig(opts Options) (*rest.Config, error) {
	cfg, err := RESTClientGetter(opts, "").ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return cfg, nil
}

// Setup implements scenarios.Backend.
func (b *Backend) Setup(ctx context.Context, sc *scenarios.Scenario, env *scenarios.Env) error {
	if b.sc != nil {
		return errors.New("kube backend: Setup called twice")
	}
	b.sc, b.env, b.rec, b.dir = sc, env, env.Rec, env.Dir
	if b.optErr != nil {
		return b.optErr
	}
	logs, err := env.Logs("plugin.log", "workload.log", "kube.log")
	if err != nil {
		return err
	}
	b.logs.plugin, b.logs.workload, b.logs.kube = logs[0], logs[1], logs[2]
	cfg, err := RESTConfig(b.opts)
	if err != nil {
		return err
	}
	cfg.UserAgent = "dfc-scenario"
	if b.cs, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	b.cfg = cfg
	if b.opts.Driver != nil {
		return b.setupDriver(ctx, sc, env)
	}
	if err := b.makeParts(env); err != nil {
		return err
	}
	if sc.Plugin.Remediation != nil {
		if b.logs.remediator, err = env.Log("remediator.log"); err != nil {
			return err
		}
	}
	if b.man, err = loadManifests(filepath.Join(b.opts.Repo, "manifests")); err != nil {
		return err
	}
	b.ctx, b.cancel = context.WithCancel(context.WithoutCancel(ctx))

	ver, err := b.cs.Discovery().ServerVersion()
	if err != nil {
		return fmt.Errorf("cluster unreachable: %w", err)
	}
	b.logf("cluster %s (Kubernetes %s), image %s, driver %s, kubelet dir %s", cfg.Host, ver.GitVersion, b.opts.Image, b.opts.DriverName, b.opts.KubeletDir)
	if err := b.removeStale(ctx); err != nil {
		return err
	}

	b.n = runNames(sc.Name)
	b.helm = b.release()

	// Namespace: privileged Pod Security (the plugin is privileged), labelled as a run's.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: b.n.namespace, Labels: map[string]string{
		managedByLabel: managedBy, scenarioLabel: sc.Name,
		"pod-security.kubernetes.io/enforce": "privileged",
	}}}
	if _, err := b.cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create namespace: %w", err)
	}
	b.life.nsCreated = true
	b.progress("namespace %s", b.n.namespace)
	b.startInformers()

	vals, err := b.chartValues()
	if err != nil {
		return err
	}
	b.progress("helm install %s (restoreMounts=%t, restoreStrategy=%s, fuseMode=%s, FUSE server %s, image %s)", releaseName,
		sc.Plugin.RestoreMounts, strategyOf(sc.Plugin), sc.Plugin.Topology(), sc.Plugin.Server(), b.opts.Image)
	b.life.installed = true // a failed install may have created objects: uninstall in Stop either way
	if err := b.helm.install(ctx, vals, b.opts.SetupTimeout); err != nil {
		return err
	}
	pluginNode, err := b.waitPluginReady(ctx, time.Time{})
	if err != nil {
		return err
	}
	if err := b.waitRegistered(ctx, pluginNode); err != nil {
		return err
	}
	for _, p := range b.parts.All() {
		if err := p.ready(ctx); err != nil {
			return err
		}
	}

	labels := map[string]string{managedByLabel: managedBy}
	pv, claim := b.man.persistentVolume(b.n, b.opts.DriverName, labels), b.man.claim(b.n, labels)
	if sc.Plugin.Writable {
		writable(pv, claim)
	}
	if _, err := b.cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create PV: %w", err)
	}
	// The PV controller binds a claim when it syncs the claim and finds its volume in its cache; a claim
	// created before that waits for the controller's periodic resync (15 s). The volume's phase Available
	// says the controller has seen it. Then the claim is usually bound 0.6 s after its creation; sometimes
	// the controller's update of the claim fails and it is bound only at the resync (kube-controller-manager
	// v1.33, seen in about a third of the runs).
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, b.opts.SetupTimeout, true, func(ctx context.Context) (bool, error) {
		v, err := b.cs.CoreV1().PersistentVolumes().Get(ctx, b.n.pv, metav1.GetOptions{})
		return err == nil && v.Status.Phase == corev1.VolumeAvailable, nil
	}); err != nil {
		return fmt.Errorf("PV %s not available: %w", b.n.pv, err)
	}
	b.logf("PV %s available", b.n.pv)
	if _, err := b.cs.CoreV1().PersistentVolumeClaims(b.n.namespace).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create PVC: %w", err)
	}
	// A pod whose claim is not bound yet is unschedulable, and the scheduler retries it only after a
	// back-off: create the pod once the claim is bound.
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, b.opts.SetupTimeout, true, func(ctx context.Context) (bool, error) {
		c, err := b.cs.CoreV1().PersistentVolumeClaims(b.n.namespace).Get(ctx, b.n.pvc, metav1.GetOptions{})
		return err == nil && c.Status.Phase == corev1.ClaimBound, nil
	}); err != nil {
		return fmt.Errorf("PVC %s not bound to PV %s: %w", b.n.pvc, b.n.pv, err)
	}
	b.logf("PVC %s bound", b.n.pvc)
	var server podServer
	if sc.Pod.Sidecar != nil {
		if server, err = b.pluginServer(ctx); err != nil {
			return err
		}
	}
	pod, err := b.man.workloadPod(sc, b.n, b.opts.Image, b.opts.ReadInterval, labels, server)
	if err != nil {
		return err
	}
	writeYAML(filepath.Join(b.dir, "workload-pod.yaml"), pod)
	b.pod.spec = pod
	if i := fuseSidecar(&pod.Spec); i >= 0 {
		b.sidecarName = pod.Spec.InitContainers[i].Name
	}
	return b.podUp(ctx, true)
}

// podUp creates the workload pod (again: a new pod UID) and follows it (followPod); the first time also the
// node's kubelet (version, back-off, log). It returns once every container has had its first start attempt.
func (b *Backend) podUp(ctx context.Context, first bool) error {
	uid, err := b.createWorkload(ctx)
	if err != nil {
		return err
	}
	return b.followPod(ctx, uid, first)
}

// followPod follows workload pod uid, created by the backend or by the workload's controller: its node, its
// host paths, its containers and FUSE sidecar, its probe (the previous pod's probe stops once it is scheduled).
// It returns once every container has had its first start attempt.
func (b *Backend) followPod(ctx context.Context, uid types.UID, first bool) error {
	ours := func(p *corev1.Pod) bool { return p != nil && p.UID == uid }

	// Scheduled: now the node and the pod's host paths are known.
	p, err := b.workload.await(ctx, b.opts.SetupTimeout, func(p *corev1.Pod, _ bool) bool { return ours(p) && p.Spec.NodeName != "" })
	if err != nil {
		return fmt.Errorf("pod (uid %s) not scheduled: %w", shortUID(string(uid)), err)
	}
	if first {
		b.node = p.Spec.NodeName
		if err := b.readKubeletVersion(ctx); err != nil {
			return err
		}
		b.readRestartBackoffMax(ctx)
		if b.sc.VolumeHealth {
			if err := b.checkVolumeHealthConfig(ctx); err != nil {
				return err
			}
		}
		if usesRestartAll(b.sc) {
			if err := b.checkRestartAllFeature(ctx); err != nil {
				return err
			}
		}
	}
	if err := b.stopProbe(ctx); err != nil {
		return fmt.Errorf("stop the previous pod's probe: %w", err)
	}
	b.setPaths(string(uid))
	if first {
		if err := b.startKubeletLog(ctx); err != nil {
			return err
		}
	}
	for _, c := range b.sc.Pod.Containers {
		// A new pod's instances are numbered on from the old pod's (kubelet counts from 0 again), as the local
		// backend does, so that the evidence tells them apart.
		b.trackContainer(c.Name, b.starts(c.Name))
	}
	if b.sc.Pod.Sidecar != nil {
		b.trackSidecar()
	}

	// "Every container has had its first start attempt": it runs, ran, or failed to start.
	if _, err := b.workload.await(ctx, b.opts.SetupTimeout, func(p *corev1.Pod, _ bool) bool {
		return ours(p) && allAttempted(p, b.sc)
	}); err != nil {
		return fmt.Errorf("pod %s: its containers did not start (see kube.log): %w", p.Name, err)
	}
	b.rec.Add(scenarios.Event{Source: scenarios.SrcKubelet, Kind: scenarios.KVolumeMounted,
		Message: fmt.Sprintf("kubelet staged and published the volume (NodeStageVolume, NodePublishVolume) on node %s", b.node)})
	return b.startProbe(ctx)
}

// createWorkload creates the workload pod, or for a controller's pod (Scenario.Pod.Controller) a Deployment of
// it and waits for the pod its ReplicaSet creates; it returns the pod's UID.
func (b *Backend) createWorkload(ctx context.Context) (types.UID, error) {
	if b.sc.Pod.Controller == "" {
		created, err := b.cs.CoreV1().Pods(b.n.namespace).Create(ctx, b.pod.spec.DeepCopy(), metav1.CreateOptions{})
		if err != nil {
			return "", b.refusedRule(ctx, fmt.Errorf("create pod: %w", err))
		}
		b.progress("pod %s/%s created (uid %s, PV %s, PVC %s)", b.n.namespace, b.n.pod, shortUID(string(created.UID)), b.n.pv, b.n.pvc)
		return created.UID, nil
	}
	d := workloadDeployment(b.pod.spec)
	writeYAML(filepath.Join(b.dir, "workload-deployment.yaml"), d)
	if _, err := b.cs.AppsV1().Deployments(b.n.namespace).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		return "", b.refusedRule(ctx, fmt.Errorf("create Deployment: %w", err))
	}
	p, err := b.workload.await(ctx, b.opts.SetupTimeout, func(p *corev1.Pod, deleted bool) bool { return p != nil && !deleted })
	if err != nil {
		return "", fmt.Errorf("no pod of Deployment %s: %w", d.Name, err)
	}
	b.progress("Deployment %s/%s created; its pod %s (uid %s, PV %s, PVC %s)", b.n.namespace, d.Name, p.Name, shortUID(string(p.UID)), b.n.pv, b.n.pvc)
	return p.UID, nil
}

// readKubeletVersion records the version of the kubelet on the pod's node (Node.status.nodeInfo.kubeletVersion):
// the expectations the run is judged by depend on it.
func (b *Backend) readKubeletVersion(ctx context.Context) error {
	node, err := b.cs.CoreV1().Nodes().Get(ctx, b.node, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("read the kubelet version of node %s: %w", b.node, err)
	}
	v, err := scenarios.ParseKubeletVersion(node.Status.NodeInfo.KubeletVersion)
	if err != nil {
		return fmt.Errorf("node %s: %w", b.node, err)
	}
	b.rec.SetKubelet(v)
	b.progress("node %s runs kubelet %s, container runtime %s", b.node, v, node.Status.NodeInfo.ContainerRuntimeVersion)
	return nil
}

// readRestartBackoffMax logs the cap of the node kubelet's container restart back-off. Since v1.35
// (KubeletCrashLoopBackOffMax, beta and on) it is the kubelet config's crashLoopBackOff.maxContainerRestartPeriod
// (pkg/kubelet/kubelet.go newCrashLoopBackOff), while Timing assumes the default 5m; the scenarios' waits only
// scale with the 10 s base, which a cap below it would lower. Best effort: /configz needs nodes/proxy rights.
func (b *Backend) readRestartBackoffMax(ctx context.Context) {
	raw, err := b.cs.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", b.node, "proxy", "configz").DoRaw(ctx)
	if err != nil {
		b.logf("kubelet config of node %s not readable (%v): assuming its restart back-off is %s doubling to %s",
			b.node, err, kubeletBackoffBase, kubeletBackoffMax)
		return
	}
	limit, set, err := restartBackoffMax(raw)
	switch {
	case err != nil:
		b.logf("kubelet config of node %s: %v", b.node, err)
	case !set || limit == kubeletBackoffMax:
		b.logf("kubelet restart back-off on node %s: %s doubling to %s", b.node, kubeletBackoffBase, kubeletBackoffMax)
	default:
		b.progress("warning: kubelet on node %s caps its restart back-off at %s (crashLoopBackOff.maxContainerRestartPeriod), "+
			"not the %s this run's report assumes", b.node, limit, kubeletBackoffMax)
	}
}

// restartBackoffMax reads crashLoopBackOff.maxContainerRestartPeriod from kubelet's /configz answer; set is
// false when the kubelet has no such setting (before v1.32).
func restartBackoffMax(configz []byte) (limit time.Duration, set bool, err error) {
	var c struct {
		KubeletConfig struct {
			CrashLoopBackOff struct {
				MaxContainerRestartPeriod *metav1.Duration `json:"maxContainerRestartPeriod"`
			} `json:"crashLoopBackOff"`
		} `json:"kubeletconfig"`
	}
	if err := json.Unmarshal(configz, &c); err != nil {
		return 0, false, fmt.Errorf("parse /configz: %w", err)
	}
	if d := c.KubeletConfig.CrashLoopBackOff.MaxContainerRestartPeriod; d != nil {
		return d.Duration, true, nil
	}
	return 0, false, nil
}

// runNames are the names of one run: a fresh namespace, and a PV name and volume handle of its own.
func runNames(scenario string) names {
	var r [3]byte
	_, _ = rand.Read(r[:])
	s := scenario
	if len(s) > 40 {
		s = s[:40]
	}
	ns := "dfc-" + strings.Trim(s, "-") + "-" + hex.EncodeToString(r[:])
	return names{namespace: ns, pv: ns, pvc: "dummy-fuse-pvc", pod: "workload", volumeHandle: ns}
}

func strategyOf(p scenarios.Plugin) string {
	if p.RestoreStrategy == "" {
		return "chart default"
	}
	return p.RestoreStrategy
}

// release is the run's helm release of the chart, in the run's namespace.
func (b *Backend) release() *helmRelease {
	return &helmRelease{getter: RESTClientGetter(b.opts, b.n.namespace), chartDir: filepath.Join(b.opts.Repo, "chart"),
		name: releaseName, namespace: b.n.namespace, logf: func(f string, a ...any) { b.logf("helm: "+f, a...) }}
}

// releaseValues are the chart values of every release a run installs: its names, the run's image and kubelet.
func (b *Backend) releaseValues() map[string]any {
	repo, tag := splitImage(b.opts.Image)
	return map[string]any{
		"fullnameOverride": releaseName,
		"image":            map[string]any{"repository": repo, "tag": tag, "pullPolicy": "IfNotPresent"},
		"kubeletDir":       b.opts.KubeletDir,
		"logVerbosity":     5, // every GRPC call with request and response, as the local backend logs
	}
}

// chartValues are the chart's values for the scenario's plugin setup.
func (b *Backend) chartValues() (map[string]any, error) {
	vals := b.releaseValues()
	vals["driverName"], vals["stateDir"] = b.opts.DriverName, b.opts.StateDir
	if b.parts.Has(topology.SidecarContainer) {
		// The plugin finds the pod's socket volume by the pod UID that kubelet puts in the volume context.
		vals["csiDriver"] = map[string]any{"podInfoOnMount": true}
	}
	if err := mergeSets(vals, b.sc.Plugin.ChartSets()); err != nil {
		return nil, err
	}
	if spec := b.sc.Plugin.Server(); fuseserver.IsSpecFile(spec) {
		// An operator's server: its spec and settings are the chart's fuseServer (chart/README.md).
		text, err := os.ReadFile(spec)
		if err != nil {
			return nil, fmt.Errorf("FUSE server spec: %w", err)
		}
		settings := map[string]any{}
		for k, v := range b.opts.ServerOpts {
			settings[k] = v
		}
		vals["fuseServer"] = map[string]any{"spec": string(text), "settings": settings}
	}
	if err := mergeSets(vals, b.opts.ChartValues); err != nil {
		return nil, err
	}
	writeYAML(filepath.Join(b.dir, "chart-values.yaml"), vals)
	return vals, nil
}

// setPaths sets the host paths of the pod's volume as kubelet lays them out.
func (b *Backend) setPaths(uid string) {
	b.pod.uid = uid
	b.pod.uids = append(b.pod.uids, uid)
	b.mu.Lock()
	b.pod.uidSet[uid] = true
	b.mu.Unlock()
	root := b.opts.KubeletDir
	b.vols = map[string]string{
		scenarios.PathRoot:    root,
		scenarios.PathVolume:  kubeletpath.Target(root, uid, b.n.pv),
		scenarios.PathStaging: kubeletpath.Staging(root, b.opts.DriverName, b.n.volumeHandle),
	}
	if b.n.foreign {
		b.vols = b.foreignPaths(uid)
	}
	b.rec.SetPaths(b.vols)
	b.logf("volume dir %s, staging dir %s", b.vols[scenarios.PathVolume], b.vols[scenarios.PathStaging])
}

// allAttempted reports whether every container of sc has run or failed to start at least once.
func allAttempted(p *corev1.Pod, sc *scenarios.Scenario) bool {
	for _, c := range sc.Pod.Containers {
		cs, ok := containerStatus(p, c.Name)
		if !ok {
			return false
		}
		if cs.State.Running == nil && cs.State.Terminated == nil && cs.LastTerminationState.Terminated == nil {
			w := cs.State.Waiting
			if w == nil || w.Reason == "ContainerCreating" || w.Reason == "PodInitializing" || w.Reason == "" {
				return false
			}
		}
	}
	return true
}

// containerStatus returns the status of the pod's container name, or of its init container name (a native
// sidecar's restarts are in initContainerStatuses).
func containerStatus(p *corev1.Pod, name string) (corev1.ContainerStatus, bool) {
	for _, list := range [][]corev1.ContainerStatus{p.Status.ContainerStatuses, p.Status.InitContainerStatuses} {
		for _, cs := range list {
			if cs.Name == name {
				return cs, true
			}
		}
	}
	return corev1.ContainerStatus{}, false
}

func (b *Backend) logf(format string, args ...any) {
	if b.logs.kube == nil {
		return
	}
	b.logs.kube.WriteLine(time.Now().UTC().Format("15:04:05.000000"), []byte(fmt.Sprintf(format, args...)))
}

// progress logs an action and reports it to Options.Progress.
func (b *Backend) progress(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	b.logf("%s", msg)
	if b.opts.Progress != nil {
		b.opts.Progress(msg)
	}
}

func typeMeta(kind string) metav1.TypeMeta { return metav1.TypeMeta{APIVersion: "v1", Kind: kind} }

func objectMeta(name, namespace string, labels map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels}
}
