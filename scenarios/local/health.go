package local

// Volume health and its remediation: the local kubelet's volume health probe, as the version it models does it
// (Scenario.VolumeHealth), and the remediator (Plugin.Remediation), the real one (csi-plugin/remediate) run
// against a fake API server that mirrors the local pod, with the pod's controller played honestly when it
// deletes the pod.

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/remediate"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/restore"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/volumecondition"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// The claim of the pod's volume, as manifests/ names it.
const claimName = "dummy-fuse-pvc"

// healthCallTimeout bounds each health RPC, as kubelet's CSI client does with its own timeouts.
const healthCallTimeout = 10 * time.Second

// current returns the CSI client and the pod's volume and containers of the moment (the runner's goroutine
// replaces them when the plugin restarts or the pod is created again).
func (b *Backend) current() (*csiClient, volume, []*container) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.csi, b.vol, b.pod.containers
}

// watchVolumeHealth is kubelet's volume health probe, every scenarios.HealthPeriod, the way the modelled
// version does it:
//   - up to v1.36, the stats loop calls NodeGetVolumeStats and turns an abnormal VolumeCondition (CSI spec <=
//     v1.12) into a Warning event VolumeConditionAbnormal on the pod, at every period it stays abnormal
//     (pkg/kubelet/server/stats/volume_stat_calculator.go);
//   - v1.37 calls NodeGetVolumeHealth (node capability GET_VOLUME_HEALTH) and writes the conditions into
//     pod.status.volumeHealth (pkg/kubelet/volumemanager/volumehealth/): recorded when they change.
func (b *Backend) watchVolumeHealth(ctx context.Context) {
	defer b.bg.Done()
	status := "" // v1.37: the pod's volumeHealth conditions, as last written
	statusPod := ""
	every(ctx, scenarios.HealthPeriod, func() {
		c, vol, _ := b.current()
		if c == nil || b.podGone() {
			return
		}
		callCtx, cancel := context.WithTimeout(ctx, healthCallTimeout)
		if b.kubelet.AtLeast(scenarios.MustKubeletVersion(scenarios.VolumeHealthManagerIn)) {
			conds, err := volumeHealth(callCtx, c, vol)
			if err != nil {
				b.logf("volume health: NodeGetVolumeHealth: %v", err)
			} else if conds != status || vol.podUID != statusPod {
				status, statusPod = conds, vol.podUID
				b.rec.Add(scenarios.Event{Source: scenarios.SrcKubelet, Kind: scenarios.KVolumeHealth, Message: conds})
				b.logf("volume health: pod %s status.volumeHealth[%s]: %q", vol.podUID, volumeName, conds)
			}
		} else {
			cond, err := volumeCondition(callCtx, c, vol)
			if err != nil {
				b.logf("volume health: NodeGetVolumeStats: %v", err)
			} else if cond.Abnormal {
				msg := fmt.Sprintf("Warning %s: Volume %s: %s", scenarios.ReasonVolumeConditionAbnormal, volumeName, cond.Message)
				b.rec.Add(scenarios.Event{Source: scenarios.SrcKubelet, Kind: scenarios.KPodEvent, Detail: scenarios.ReasonVolumeConditionAbnormal, Message: msg})
				b.logf("volume health: event on pod %s: %s", vol.podUID, msg)
			}
		}
		cancel()
	})
}

// every calls f every period until ctx ends.
func every(ctx context.Context, period time.Duration, f func()) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f()
		}
	}
}

// volumeCondition is kubelet v1.36's call: NodeGetVolumeStats of the target, its spec v1.12 VolumeCondition.
func volumeCondition(ctx context.Context, c *csiClient, v volume) (volumecondition.Condition, error) {
	resp, err := c.node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: v.handle, VolumePath: v.target, StagingTargetPath: v.staging})
	if err != nil {
		return volumecondition.Condition{}, err
	}
	cond, _ := volumecondition.Get(resp)
	return cond, nil
}

// volumeHealth is kubelet v1.37's call: NodeGetVolumeHealth of the target; its conditions in one line, "" when
// there are none.
func volumeHealth(ctx context.Context, c *csiClient, v volume) (string, error) {
	resp, err := c.node.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{VolumeId: v.handle, VolumePublishPath: v.target, StagingTargetPath: v.staging})
	if err != nil {
		return "", err
	}
	var parts []string
	for _, s := range resp.GetVolumeHealth().GetHealthStatuses() {
		parts = append(parts, fmt.Sprintf("%s %s: %s", s.GetStatus(), s.GetReason(), s.GetMessage()))
	}
	return strings.Join(parts, "; "), nil
}

// pluginHealth is the remediator's health source: the plugin's NodeGetVolumeHealth through the CSI client of
// the moment.
type pluginHealth struct{ b *Backend }

func (h pluginHealth) Problem(ctx context.Context, volumeID, target string) (string, error) {
	c, _, _ := h.b.current()
	if c == nil {
		return "", fmt.Errorf("the plugin is not running")
	}
	return remediate.PluginHealth{Node: c.node, Timeout: healthCallTimeout}.Problem(ctx, volumeID, target)
}

// runRemediator runs the remediator: every interval, the fake API server is brought up to date with the local
// pod (mirrorPod), then the remediator makes a pass. Its events on the pod become evidence; its deletion of a
// pod that a controller owns makes the controller create a new one (recreatePod).
func (b *Backend) runRemediator(ctx context.Context, cfg scenarios.Remediation) {
	defer b.bg.Done()
	strategy, err := restore.ParseStrategy(b.sc.Plugin.RestoreStrategy)
	if err != nil {
		strategy = restore.Rebind
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeID},
		Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{KubeletVersion: b.kubelet.String()}}}
	claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: claimName, Namespace: podNamespace},
		Spec: corev1.PersistentVolumeClaimSpec{VolumeName: pvName}}
	cs := fake.NewClientset(node, claim)
	// The pod's controller exists (the remediator reads it before it deletes a pod that claims one).
	scheme := metadatafake.NewTestScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		b.logf("remediator: %v", err)
		return
	}
	owners := metadatafake.NewSimpleMetadataClient(scheme)
	if ref := b.podOwner(); ref != nil {
		if err := owners.Tracker().Add(&metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: ref.APIVersion, Kind: ref.Kind},
			ObjectMeta: metav1.ObjectMeta{Name: ref.Name, Namespace: podNamespace, UID: ref.UID}}); err != nil {
			b.logf("remediator: %v", err)
			return
		}
	}
	cs.PrependReactor("create", "events", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if ev, ok := a.(k8stesting.CreateAction).GetObject().(*corev1.Event); ok {
			b.rec.Add(scenarios.Event{Source: scenarios.SrcRemediator, Kind: scenarios.KPodEvent, Detail: ev.Reason,
				Message: ev.Type + " " + ev.Reason + ": " + ev.Message})
			b.logf("remediator: event on pod %s (uid %s): %s %s: %s", ev.InvolvedObject.Name, ev.InvolvedObject.UID, ev.Type, ev.Reason, ev.Message)
		}
		return false, nil, nil
	})
	cs.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		name := a.(k8stesting.DeleteAction).GetName()
		b.logf("remediator: deletes pod %s", name)
		if err := b.recreatePod(ctx, name); err != nil {
			b.logf("remediator: the pod's recreation failed: %v", err)
		}
		return false, nil, nil // the tracker deletes the object
	})
	log := funcr.New(func(prefix, args string) {
		b.logs.remediator.WriteLine(time.Now().UTC().Format("15:04:05.000000"), []byte(strings.TrimSpace(prefix+" "+args)))
	}, funcr.Options{})
	r, err := remediate.New(remediate.Config{Client: cs.CoreV1(), Owners: owners, NodeName: nodeID, KubeletDir: b.root, StateDir: b.stateDir,
		Health: pluginHealth{b}, Strategy: strategy, Grace: cfg.Grace, RateLimit: time.Minute, Log: log})
	if err != nil {
		b.logf("remediator: %v", err)
		return
	}
	b.logf("remediator: grace %s, interval %s, strategy %s", cfg.Grace, cfg.Interval, strategy)
	every(ctx, cfg.Interval, func() {
		if err := b.mirrorPod(ctx, cs); err != nil {
			b.logf("remediator: mirroring the pod: %v", err)
			return
		}
		if err := r.Pass(ctx); err != nil && ctx.Err() == nil {
			b.logf("remediator: pass: %v", err)
		}
	})
}

// recreatePod is what the pod's controller and kubelet do when the remediator deletes pod name: the pod is torn
// down (containers stopped, NodeUnpublishVolume, NodeUnstageVolume) and, when a controller owns it, a new pod
// (a new UID) is created and set up (NodeStageVolume, NodePublishVolume, its containers). A bare pod is gone
// for good; the remediator never deletes one.
func (b *Backend) recreatePod(ctx context.Context, name string) error {
	_, vol, _ := b.current()
	if b.podGone() || name != mirrorName(vol.podUID) {
		return fmt.Errorf("pod %s is not the current pod", name)
	}
	if err := b.Kill(ctx, topology.WorkloadPod); err != nil {
		return err
	}
	if b.sc.Pod.Controller == "" {
		return nil
	}
	b.logf("%s: creates a new pod for the deleted %s", b.sc.Pod.Controller, name)
	return b.Start(ctx, topology.WorkloadPod)
}

// podGone reports whether the pod is deleted (and not created again).
func (b *Backend) podGone() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.pod.deleted
}

func (b *Backend) setPodDeleted(deleted bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pod.deleted = deleted
}

// mirrorName is the name of the pod of UID uid in the fake API server: a ReplicaSet's pods are named after it
// with a suffix of their own.
func mirrorName(uid string) string { return podName + "-" + uid[:5] }

// mirrorPod puts the local pod into the fake API server as the real one would show it: its UID, owner, node,
// volumes and containers, and its containers' states with start times to the second (as the API keeps them).
// The pods of earlier UIDs are gone.
func (b *Backend) mirrorPod(ctx context.Context, cs *fake.Clientset) error {
	_, vol, containers := b.current()
	pods := cs.CoreV1().Pods(podNamespace)
	list, err := pods.List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, p := range list.Items {
		if string(p.UID) != vol.podUID {
			if err := cs.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), podNamespace, p.Name); err != nil {
				return err
			}
		}
	}
	if b.podGone() {
		return nil
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: mirrorName(vol.podUID), Namespace: podNamespace, UID: types.UID(vol.podUID)},
		Spec: corev1.PodSpec{NodeName: nodeID, Volumes: []corev1.Volume{{Name: volumeName,
			VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claimName}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if ref := b.podOwner(); ref != nil {
		pod.OwnerReferences = []metav1.OwnerReference{*ref}
	}
	for _, c := range containers {
		m := corev1.VolumeMount{Name: volumeName, MountPath: c.spec.Mount(), SubPath: c.spec.SubPath}
		if c.spec.Prop() == scenarios.PropagationHostToContainer {
			hc := corev1.MountPropagationHostToContainer
			m.MountPropagation = &hc
		}
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: c.spec.Name, VolumeMounts: []corev1.VolumeMount{m}})
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, c.status())
	}
	if _, err := pods.Get(ctx, pod.Name, metav1.GetOptions{}); err == nil {
		_, err = pods.Update(ctx, pod, metav1.UpdateOptions{})
		return err
	}
	_, err = pods.Create(ctx, pod, metav1.CreateOptions{})
	return err
}

// podOwner is the controller reference of the pod, nil for a bare pod.
func (b *Backend) podOwner() *metav1.OwnerReference {
	if b.sc.Pod.Controller == "" {
		return nil
	}
	yes := true
	return &metav1.OwnerReference{APIVersion: "apps/v1", Kind: b.sc.Pod.Controller, Name: podName + "-rs", UID: "rs-" + types.UID(podName), Controller: &yes}
}

// status is the container's status as kubelet reports it: running, or waiting to be restarted with the last
// instance's termination.
func (c *container) status() corev1.ContainerStatus {
	c.mu.Lock()
	cur, prev := c.cur, c.prev
	c.mu.Unlock()
	st := corev1.ContainerStatus{Name: c.spec.Name}
	term := func(p *proc) *corev1.ContainerStateTerminated {
		return &corev1.ContainerStateTerminated{ExitCode: int32(p.exitCode()), StartedAt: apiTime(p.started), FinishedAt: apiTime(p.exitTime)}
	}
	switch {
	case cur == nil:
		st.State.Waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
	case !cur.exited():
		st.State.Running = &corev1.ContainerStateRunning{StartedAt: apiTime(cur.started)}
		if prev != nil {
			st.LastTerminationState.Terminated = term(prev)
		}
	default:
		st.State.Waiting = &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}
		st.LastTerminationState.Terminated = term(cur)
	}
	return st
}

// apiTime is t as the API server keeps it: to the second.
func apiTime(t time.Time) metav1.Time { return metav1.NewTime(t.Truncate(time.Second)) }
