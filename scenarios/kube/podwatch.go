package kube

// Pod watch: the informers on the run namespace's pods and events, and the latest state of each pod.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
)

// kFailedMount is kubelet's FailedMount event (MountVolume.SetUp failed ...): not a container start failure,
// but worth seeing on the timeline.
const kFailedMount scenarios.Kind = "failed_mount"

// podWatch holds the latest state of one pod as the informer delivered it, and wakes up waiters on change.
type podWatch struct {
	mu      sync.Mutex
	pod     *corev1.Pod
	deleted bool
	ch      chan struct{}
}

func newPodWatch() *podWatch { return &podWatch{ch: make(chan struct{})} }

func (w *podWatch) set(p *corev1.Pod, deleted bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if p != nil {
		w.pod = p
	}
	w.deleted = deleted
	close(w.ch)
	w.ch = make(chan struct{})
}

func (w *podWatch) get() (*corev1.Pod, bool, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pod, w.deleted, w.ch
}

// await waits until f holds for the pod's state (timeout 0: no timeout).
func (w *podWatch) await(ctx context.Context, timeout time.Duration, f func(p *corev1.Pod, deleted bool) bool) (*corev1.Pod, error) {
	var deadline <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		deadline = t.C
	}
	for {
		p, deleted, ch := w.get()
		if f(p, deleted) {
			return p, nil
		}
		select {
		case <-ctx.Done():
			return p, ctx.Err()
		case <-deadline:
			return p, fmt.Errorf("timed out after %s", timeout)
		case <-ch:
		}
	}
}

// startInformers watches the run namespace's pods and events: the only way the backend learns about the
// cluster while a scenario runs (no polling of the API server).
func (b *Backend) startInformers() {
	b.workload = newPodWatch()
	b.pod.probe = newPodWatch()
	f := informers.NewSharedInformerFactoryWithOptions(b.cs, 0, informers.WithNamespace(b.n.namespace))
	pods := f.Core().V1().Pods().Informer()
	_, _ = pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { b.onPod(o, false) },
		UpdateFunc: func(_, o any) { b.onPod(o, false) },
		DeleteFunc: func(o any) { b.onPod(o, true) },
	})
	evs := f.Core().V1().Events().Informer()
	_, _ = evs.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { b.onEvent(o) },
		UpdateFunc: func(_, o any) { b.onEvent(o) },
	})
	f.Start(b.ctx.Done())
	f.WaitForCacheSync(b.ctx.Done())
}

func (b *Backend) onPod(o any, deleted bool) {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	p, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	b.logPodState(p, deleted)
	switch {
	case p.Name == b.n.pod+"-probe":
		b.pod.probe.set(p, deleted)
	case p.Labels[workloadLabel] == "true":
		b.onWorkloadPod(p, deleted)
	case p.Labels["app.kubernetes.io/component"] == remediatorContainer && p.Labels["app.kubernetes.io/instance"] == releaseName:
		b.onRemediatorPod(p, deleted)
	case p.Labels["app.kubernetes.io/component"] == "node" && p.Labels["app.kubernetes.io/instance"] == releaseName:
		b.onPluginPod(p, deleted)
	case p.Labels["app.kubernetes.io/component"] == keeperContainer && p.Labels["app.kubernetes.io/instance"] == releaseName:
		b.onKeeperPod(p, deleted)
	}
}

// logPodState writes a line to kube.log when a pod's phase or a container's state changes.
func (b *Backend) logPodState(p *corev1.Pod, deleted bool) {
	var s strings.Builder
	fmt.Fprintf(&s, "pod %s (%s) on %s: %s", p.Name, shortUID(string(p.UID)), p.Spec.NodeName, p.Status.Phase)
	if deleted {
		s.WriteString(" DELETED")
	} else if p.DeletionTimestamp != nil {
		s.WriteString(" terminating")
	}
	for _, cs := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
		fmt.Fprintf(&s, "; %s restarts=%d %s", cs.Name, cs.RestartCount, stateText(cs.State))
		if t := cs.LastTerminationState.Terminated; t != nil {
			fmt.Fprintf(&s, " last=exited(%d %s)", t.ExitCode, t.Reason)
		}
	}
	line := s.String()
	b.mu.Lock()
	if b.pod.states == nil {
		b.pod.states = map[string]string{}
	}
	changed := b.pod.states[string(p.UID)] != line
	b.pod.states[string(p.UID)] = line
	b.mu.Unlock()
	if changed {
		b.logf("%s", line)
	}
}

func stateText(st corev1.ContainerState) string {
	switch {
	case st.Running != nil:
		return "running"
	case st.Terminated != nil:
		return fmt.Sprintf("exited(%d %s)", st.Terminated.ExitCode, st.Terminated.Reason)
	case st.Waiting != nil:
		if st.Waiting.Message != "" {
			return fmt.Sprintf("waiting(%s: %s)", st.Waiting.Reason, st.Waiting.Message)
		}
		return "waiting(" + st.Waiting.Reason + ")"
	}
	return "unknown"
}

func shortUID(uid string) string {
	if len(uid) > 8 {
		return uid[:8]
	}
	return uid
}

// onWorkloadPod follows the workload pod. The watch holds the current one; a controller's new pod (another
// UID) becomes current once the current one is going (deleted, or its deletion begun), and is taken up like a
// pod the backend created (takeUp). A deletion the backend did not ask for (the remediator's) is recorded as
// the pod component's kill.
func (b *Backend) onWorkloadPod(p *corev1.Pod, deleted bool) {
	cur, curDeleted, _ := b.workload.get()
	// A bare pod has no successor but the one the backend itself creates after deleting it (podUp waits for its
	// UID): any pod of that name is followed, as it comes.
	if cur == nil || cur.UID == p.UID || b.sc.Pod.Controller == "" {
		b.workload.set(p, deleted)
		if cur != nil && cur.UID == p.UID && p.DeletionTimestamp != nil && cur.DeletionTimestamp == nil && !b.pod.deleting.Load() {
			// Now, not DeletionTimestamp: that is when the grace period ends.
			b.podEvent(scenarios.KKilled, time.Now(), fmt.Sprintf("pod %s (uid %s) deleted, not by this run", p.Name, shortUID(string(p.UID))))
		}
		if b.sc.VolumeHealth || b.n.foreign {
			b.observeVolumeHealth(p)
		}
		return
	}
	if deleted || (!curDeleted && cur.DeletionTimestamp == nil) {
		return
	}
	b.workload.set(p, deleted)
	b.wg.Add(1)
	go b.takeUp(p)
}

// takeUp follows a pod the workload's controller created in place of the deleted one, as podUp does for a pod
// the backend creates.
func (b *Backend) takeUp(p *corev1.Pod) {
	defer b.wg.Done()
	uid := p.UID
	b.podEvent(scenarios.KStarted, p.CreationTimestamp.Time, fmt.Sprintf("pod %s (uid %s) created by its %s", p.Name, shortUID(string(uid)), b.sc.Pod.Controller))
	b.progress("the %s created pod %s (uid %s)", b.sc.Pod.Controller, p.Name, shortUID(string(uid)))
	if err := b.followPod(b.ctx, uid, false); err != nil {
		b.logf("the %s's pod %s: %v", b.sc.Pod.Controller, p.Name, err)
		return
	}
	b.podEvent(scenarios.KReady, time.Time{}, "pod "+shortUID(string(uid))+": volume published, every container had its first start")
}
