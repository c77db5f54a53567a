// Package remediate is the opt-in remediator (command csi-remediate): on its node, it finds pods whose FUSE
// volume died and that nothing will heal, and deletes those a controller will recreate (the new pod gets a fresh
// mount); it leaves every other pod alone and says why in a Warning event on it.
//
// It looks after the volumes of dummy-fuse-csi's plugin and, named with Config.Drivers, those of any other CSI
// driver. Its evidence (csi-plugin/README.md, "Remediator"): for the plugin's volumes, the plugin's own records
// (which targets it published, for which volume, and when it last mounted each one) and its NodeGetVolumeHealth
// answer for each target over its CSI socket; for another driver's, kubelet's record of each volume beside its
// target (which driver mounted it) and a bounded statfs of the target; for both, the pods' container start
// times and the node's kubelet version. It never touches a mount.
package remediate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/version"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/klog/v2"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/restore"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/state"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/contract"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/kubeletpath"
)

// The event reasons the remediator records on pods are internal/contract's ReasonDeleted and ReasonLeftAlone,
// which observers rely on.
const (
	eventSource       = "dummy-fuse-csi-remediator"
	defaultGrace      = 2 * time.Minute
	defaultRateLimit  = 10 * time.Minute
	defaultHealthWait = 20 * time.Second
	// healthWorkers bounds the plugin's health calls in flight (the plugin bounds its own probes per mount).
	healthWorkers = 8
)

// Health asks the plugin about one of its targets.
type Health interface {
	// Problem returns "" when the plugin reports target of volumeID healthy, else its conditions in one line; an
	// error when the plugin could not say (down, restarting, no answer within the source's own bound): no
	// decision is taken on that. A pass makes several calls at once.
	Problem(ctx context.Context, volumeID, target string) (string, error)
}

// Config is what the remediator runs with.
type Config struct {
	// Client is the core/v1 API (only that: the whole clientset would add every API group's client to the
	// plugin's binary).
	Client corev1client.CoreV1Interface
	// Owners reads the metadata of a pod's controller: whether it exists, so that a pod claiming an owner that
	// does not is never taken for one that will be recreated.
	Owners     metadata.Interface
	NodeName   string
	KubeletDir string
	// StateDir is the plugin's --state-dir, read only; "" when the remediator looks after other drivers only.
	StateDir string
	// Health answers for the plugin's own targets (its NodeGetVolumeHealth); needed with StateDir.
	Health Health
	// Drivers are other CSI drivers whose volumes on the node the remediator looks after too, found from
	// kubelet's record of each pod's CSI volumes (kubeletpath.ReadVolumeData); Mounts answers for them.
	Drivers []string
	Mounts  Health
	// Strategy is the plugin's --restore-strategy: with stack, containers whose volume mount propagates from
	// the host see the re-mounted volume; with setns, the target's record says whether the running containers
	// were re-bound inside.
	Strategy restore.Strategy
	// Grace is how long a pod is given to heal on its own (its container exiting and restarting, kubelet
	// republishing) before the remediator acts. RateLimit is the least time between two actions on one pod.
	Grace, RateLimit time.Duration
	// DryRun logs what would be done and changes nothing.
	DryRun bool
	// Now is the clock (tests); nil means time.Now.
	Now func() time.Time
	// Log receives the remediator's decisions with their evidence; the zero value means klog's global logger.
	Log klog.Logger
}

// Remediator remembers, between passes, when it first saw each target unhealthy and when it last acted on each
// pod. Create it with New.
type Remediator struct {
	cfg Config

	mu             sync.Mutex
	unhealthySince map[string]time.Time    // by target path
	lastAction     map[types.UID]time.Time // by pod UID
	// deletedFor is when the remediator last deleted a pod for each dead volume (by volumeKey), until a
	// target of that volume answers again: a pod that got the volume since and is dead too shows that deleting
	// pods does not heal it.
	deletedFor map[string]time.Time
}

// New checks cfg and returns a Remediator.
func New(cfg Config) (*Remediator, error) {
	switch {
	case cfg.Client == nil || cfg.Owners == nil:
		return nil, errors.New("remediator needs a Kubernetes client and a metadata client")
	case cfg.NodeName == "":
		return nil, errors.New("node name is required")
	case cfg.StateDir == "" && len(cfg.Drivers) == 0:
		return nil, errors.New("nothing to look after: give the plugin's state directory (its own volumes) or drivers whose volumes to watch")
	case cfg.StateDir != "" && cfg.Health == nil:
		return nil, errors.New("the plugin's volumes need a health source (its CSI socket)")
	case len(cfg.Drivers) > 0 && cfg.Mounts == nil:
		return nil, errors.New("other drivers' volumes need a mount health source")
	case slices.Contains(cfg.Drivers, ""):
		return nil, errors.New("a driver name is empty")
	case cfg.Grace < 0 || cfg.RateLimit < 0:
		return nil, errors.New("grace period and rate limit must not be negative")
	}
	if cfg.KubeletDir == "" {
		cfg.KubeletDir = kubeletpath.DefaultRoot
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log.GetSink() == nil {
		cfg.Log = klog.Background()
	}
	return &Remediator{cfg: cfg, unhealthySince: map[string]time.Time{}, lastAction: map[types.UID]time.Time{}, deletedFor: map[string]time.Time{}}, nil
}

// Run makes a pass every interval until ctx ends. A failed pass is logged; the next one starts afresh.
func (r *Remediator) Run(ctx context.Context, interval time.Duration) error {
	r.cfg.Log.Info("Starting remediator", "node", r.cfg.NodeName, "interval", interval, "grace", r.cfg.Grace, "rateLimit", r.cfg.RateLimit,
		"dryRun", r.cfg.DryRun, "strategy", r.cfg.Strategy, "stateDir", r.cfg.StateDir, "drivers", r.cfg.Drivers)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := r.Pass(ctx); err != nil && ctx.Err() == nil {
			r.cfg.Log.Error(err, "Remediation pass failed")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Pass looks at every target it looks after on the node, once: the plugin's recorded targets and the volumes of
// Config.Drivers in the node's pods.
func (r *Remediator) Pass(ctx context.Context) error {
	own, err := r.ownTargets()
	if err != nil {
		return err
	}
	if len(own) == 0 && len(r.cfg.Drivers) == 0 {
		r.forgetTargets(nil)
		return nil
	}
	pods, err := r.cfg.Client.Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", r.cfg.NodeName).String()})
	if err != nil {
		return fmt.Errorf("listing the pods of node %s: %w", r.cfg.NodeName, err)
	}
	var work [][]check // the targets of each pod to look at
	seen := map[string]bool{}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if pod.Spec.NodeName != r.cfg.NodeName || pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		targets := slices.Concat(own[string(pod.UID)], r.driverTargets(pod, own[string(pod.UID)]))
		if len(targets) == 0 {
			continue
		}
		checks := make([]check, len(targets))
		for j, t := range targets {
			checks[j] = check{pod: pod, t: t}
			seen[t.Path] = true
		}
		work = append(work, checks)
	}
	r.forgetTargets(seen)
	if len(work) == 0 {
		return nil
	}
	kubelet := r.kubeletVersion(ctx)
	r.askHealth(ctx, work)
	claims := claimVolumes{client: r.cfg.Client, pv: map[types.NamespacedName]string{}}
	var errs []error
	for _, checks := range work {
		pod := checks[0].pod
		vols, err := r.volumes(ctx, pod, checks, claims)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := r.decide(ctx, pod, vols, kubelet); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// target is a pod's CSI volume mount that the remediator looks after, and who answers for its health.
type target struct {
	// Driver is the CSI driver that mounted it, "" for the plugin's own.
	Driver         string
	VolumeID, Path string
	// MountedAt is when the plugin made the target's current mount (its publish record's time); zero for
	// another driver's volume, whose history the remediator does not know.
	MountedAt time.Time
	// ReboundInside: see volumeState.
	ReboundInside bool
	health        Health
}

// ownTargets returns the targets the plugin recorded under the kubelet pods dir, by pod UID (none without
// Config.StateDir).
func (r *Remediator) ownTargets() (map[string][]target, error) {
	if r.cfg.StateDir == "" {
		return nil, nil
	}
	store, err := state.Open(r.cfg.StateDir)
	if err != nil {
		return nil, fmt.Errorf("opening the plugin's records: %w", err)
	}
	_, pubs, bad := store.Load()
	for _, err := range bad {
		r.cfg.Log.Error(err, "Skipping unusable mount record")
	}
	byPod := map[string][]target{}
	for _, p := range pubs {
		if uid, _, ok := kubeletpath.ParseTarget(r.cfg.KubeletDir, p.TargetPath); ok {
			byPod[uid] = append(byPod[uid], target{VolumeID: p.VolumeID, Path: p.TargetPath, MountedAt: p.Time,
				ReboundInside: p.Reattached.Complete(), health: r.cfg.Health})
		}
	}
	return byPod, nil
}

// driverTargets returns the pod's CSI volumes that a driver of Config.Drivers mounted, from kubelet's record
// beside each target: no API request per volume, and only kubelet writes it. A target the plugin recorded
// (own) is the plugin's to answer for.
func (r *Remediator) driverTargets(pod *corev1.Pod, own []target) []target {
	if len(r.cfg.Drivers) == 0 {
		return nil
	}
	uid := string(pod.UID)
	dir := kubeletpath.CSIVolumes(r.cfg.KubeletDir, uid)
	entries, err := os.ReadDir(dir)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			r.cfg.Log.Error(err, "Reading the pod's CSI volumes; none of them is looked at this pass", "pod", klog.KObj(pod))
		}
		return nil
	}
	var out []target
	for _, e := range entries {
		path := kubeletpath.Target(r.cfg.KubeletDir, uid, e.Name())
		if !e.IsDir() || slices.ContainsFunc(own, func(t target) bool { return t.Path == path }) {
			continue
		}
		d, err := kubeletpath.ReadVolumeData(r.cfg.KubeletDir, uid, e.Name())
		if err != nil {
			// kubelet writes the record just before it asks the driver to publish, and removes the directory
			// after unpublishing: a missing record is a volume coming or going.
			if !errors.Is(err, os.ErrNotExist) {
				r.cfg.Log.Error(err, "Skipping a CSI volume whose kubelet record is unusable", "pod", klog.KObj(pod), "volume", e.Name())
			}
			continue
		}
		if slices.Contains(r.cfg.Drivers, d.Driver) {
			out = append(out, target{Driver: d.Driver, VolumeID: d.VolumeHandle, Path: path, health: r.cfg.Mounts})
		}
	}
	return out
}

// check is one target of a pod, with the answer on its health.
type check struct {
	pod     *corev1.Pod
	t       target
	problem string
	err     error
}

// askHealth asks about every target of the pass at once, healthWorkers calls at a time: each call has its own
// bound (the health source's timeout), so that stuck targets cost a pass about one timeout, not one each.
func (r *Remediator) askHealth(ctx context.Context, work [][]check) {
	var g errgroup.Group
	g.SetLimit(healthWorkers)
	for _, checks := range work {
		for i := range checks {
			c := &checks[i]
			g.Go(func() error {
				c.problem, c.err = c.t.health.Problem(ctx, c.t.VolumeID, c.t.Path)
				return nil
			})
		}
	}
	_ = g.Wait() // the calls return no error to the group: each answer is the check's own
}

// kubeletVersion reads the node's kubelet version; nil (and logged) when it cannot be read or parsed.
func (r *Remediator) kubeletVersion(ctx context.Context) *version.Version {
	node, err := r.cfg.Client.Nodes().Get(ctx, r.cfg.NodeName, metav1.GetOptions{})
	if err != nil {
		r.cfg.Log.Error(err, "Reading the node's kubelet version; the subPath rule is off for this pass", "node", r.cfg.NodeName)
		return nil
	}
	v, err := version.ParseGeneric(node.Status.NodeInfo.KubeletVersion)
	if err != nil {
		r.cfg.Log.Error(err, "Parsing the node's kubelet version; the subPath rule is off for this pass", "node", r.cfg.NodeName)
		return nil
	}
	return v
}

// volumes gathers the evidence on each of the pod's targets. A target the plugin could not answer for is left
// out: the remediator never acts on what it does not know.
func (r *Remediator) volumes(ctx context.Context, pod *corev1.Pod, checks []check, claims claimVolumes) ([]volumeState, error) {
	var out []volumeState
	for _, c := range checks {
		t := c.t
		if c.err != nil {
			r.cfg.Log.Error(c.err, "Could not tell whether the volume is healthy; no decision on it this pass", "pod", klog.KObj(pod), "volumeID", t.VolumeID, "target", t.Path)
			continue
		}
		v := volumeState{VolumeID: t.VolumeID, Key: t.Driver + "/" + t.VolumeID, Target: t.Path, MountedAt: t.MountedAt, Problem: c.problem, ReboundInside: t.ReboundInside}
		if !t.MountedAt.IsZero() && olderContainer(pod, t.MountedAt) {
			_, specName, _ := kubeletpath.ParseTarget(r.cfg.KubeletDir, t.Path)
			names, err := podVolumes(ctx, pod, specName, claims)
			if err != nil {
				return nil, err
			}
			v.PodVolumes = names
		}
		r.mu.Lock()
		if c.problem == "" {
			delete(r.unhealthySince, t.Path)
			delete(r.deletedFor, v.Key) // healed
		} else if _, seen := r.unhealthySince[t.Path]; !seen {
			r.unhealthySince[t.Path] = r.cfg.Now()
		}
		v.UnhealthySince = r.unhealthySince[t.Path]
		v.DeletedFor = r.deletedFor[v.Key]
		r.mu.Unlock()
		out = append(out, v)
	}
	return out, nil
}

// podVolumes returns the names of the pod's volumes that kubelet mounts at the target named specName: an inline
// CSI volume of that name, or a claim (persistent or generic ephemeral) bound to the persistent volume of that
// name.
func podVolumes(ctx context.Context, pod *corev1.Pod, specName string, claims claimVolumes) ([]string, error) {
	var names []string
	for _, v := range pod.Spec.Volumes {
		claim := ""
		switch {
		case v.CSI != nil && v.Name == specName:
			names = append(names, v.Name)
		case v.PersistentVolumeClaim != nil:
			claim = v.PersistentVolumeClaim.ClaimName
		case v.Ephemeral != nil:
			claim = pod.Name + "-" + v.Name // pkg/volume/util/ephemeral: <pod name>-<volume name>
		}
		if claim == "" {
			continue
		}
		pv, err := claims.volume(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: claim})
		if err != nil {
			return nil, fmt.Errorf("reading claim %s/%s of pod %s: %w", pod.Namespace, claim, pod.Name, err)
		}
		if pv == specName {
			names = append(names, v.Name)
		}
	}
	return names, nil
}

// claimVolumes reads each claim at most once per pass, however many targets of its pods it is matched against.
type claimVolumes struct {
	client corev1client.CoreV1Interface
	pv     map[types.NamespacedName]string // the persistent volume of each claim read, "" when it does not exist
}

// volume returns the name of the persistent volume the claim is bound to ("" when there is none).
func (c claimVolumes) volume(ctx context.Context, claim types.NamespacedName) (string, error) {
	if pv, ok := c.pv[claim]; ok {
		return pv, nil
	}
	pvc, err := c.client.PersistentVolumeClaims(claim.Namespace).Get(ctx, claim.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		c.pv[claim] = ""
	case err != nil:
		return "", err
	default:
		c.pv[claim] = pvc.Spec.VolumeName
	}
	return c.pv[claim], nil
}

// forgetTargets drops the memory of targets the pass did not look at (gone with their pods or records).
func (r *Remediator) forgetTargets(live map[string]bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for t := range r.unhealthySince {
		if !live[t] {
			delete(r.unhealthySince, t)
		}
	}
}

// decide acts on one pod and logs the decision with its evidence.
func (r *Remediator) decide(ctx context.Context, pod *corev1.Pod, vols []volumeState, kubelet *version.Version) error {
	found := findings(pod, vols, kubelet, r.cfg.Strategy)
	if len(found) == 0 {
		return nil
	}
	now := r.cfg.Now()
	whys := make([]string, len(found))
	due := false
	for i, f := range found {
		whys[i] = f.Why
		if !now.Before(f.Since.Add(r.cfg.Grace)) {
			due = true
		}
	}
	why := strings.Join(whys, "; ")
	kubeletVersion := "unknown"
	if kubelet != nil {
		kubeletVersion = kubelet.String()
	}
	evidence := []any{"pod", klog.KObj(pod), "podUID", pod.UID, "kubelet", kubeletVersion, "evidence", why}
	if !due {
		r.cfg.Log.Info("Remediation: waiting out the grace period", append(evidence, "owner", ownerName(pod), "grace", r.cfg.Grace)...)
		return nil
	}
	r.mu.Lock()
	last, acted := r.lastAction[pod.UID]
	r.mu.Unlock()
	if acted && now.Sub(last) < r.cfg.RateLimit {
		r.cfg.Log.Info("Remediation: rate limited", append(evidence, "owner", ownerName(pod), "lastAction", last, "rateLimit", r.cfg.RateLimit)...)
		return nil
	}
	recreated, owner, err := r.recreatedBy(ctx, pod)
	if err != nil {
		return err
	}
	log := append(evidence, "owner", owner)
	futile := ""
	if recreated {
		futile = deletionDidNotHeal(pod, vols)
	}
	r.mu.Lock()
	r.lastAction[pod.UID] = now
	if recreated && futile == "" && !r.cfg.DryRun {
		for _, v := range vols {
			if v.Problem != "" {
				r.deletedFor[v.Key] = now
			}
		}
	}
	r.mu.Unlock()

	switch {
	case futile != "" && r.cfg.DryRun:
		r.cfg.Log.Info("Remediation: would leave the pod alone, deleting pods did not heal its volume (dry run)", append(log, "why", futile)...)
	case futile != "":
		r.cfg.Log.Info("Remediation: leaving the pod alone, deleting pods did not heal its volume", append(log, "why", futile)...)
		r.event(ctx, pod, corev1.EventTypeWarning, contract.ReasonLeftAlone, fmt.Sprintf("Left alone: %s. %s", futile, why))
	case recreated && r.cfg.DryRun:
		r.cfg.Log.Info("Remediation: would delete the pod (dry run)", log...)
	case recreated:
		r.cfg.Log.Info("Remediation: deleting the pod so that its controller recreates it", log...)
		r.event(ctx, pod, corev1.EventTypeNormal, contract.ReasonDeleted, fmt.Sprintf("Deleting the pod so that %s recreates it with a fresh mount: %s", owner, why))
		uid := pod.UID
		err := r.cfg.Client.Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("deleting pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
	case r.cfg.DryRun:
		r.cfg.Log.Info("Remediation: would leave the pod alone and record a warning (dry run)", log...)
	default:
		r.cfg.Log.Info("Remediation: leaving the pod alone, nothing would recreate it", log...)
		r.event(ctx, pod, corev1.EventTypeWarning, contract.ReasonLeftAlone, fmt.Sprintf("Left alone: %s, so deleting it would lose it; delete it yourself to get a fresh mount. %s", owner, why))
	}
	return nil
}

// event records an event on pod (core/v1, what `kubectl describe pod` shows). A failure is logged, not fatal.
func (r *Remediator) event(ctx context.Context, pod *corev1.Pod, typ, reason, msg string) {
	now := metav1.NewTime(r.cfg.Now())
	if len(msg) > 1024 { // the API server refuses longer messages
		msg = strings.ToValidUTF8(msg[:1021], "") + "..."
	}
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", pod.Name, now.UnixNano()), Namespace: pod.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name,
			UID: pod.UID, ResourceVersion: pod.ResourceVersion},
		Reason: reason, Message: msg, Type: typ, Count: 1, FirstTimestamp: now, LastTimestamp: now,
		Source:              corev1.EventSource{Component: eventSource, Host: r.cfg.NodeName},
		ReportingController: "dummy-fuse-csi.io/remediator", ReportingInstance: r.cfg.NodeName,
	}
	if _, err := r.cfg.Client.Events(pod.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		r.cfg.Log.Error(err, "Recording an event", "pod", klog.KObj(pod), "reason", reason)
	}
}
