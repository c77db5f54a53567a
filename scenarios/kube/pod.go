package kube

// The pod component: the workload pod deleted and created again, as its controller would.

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

func (b *Backend) podEvent(kind scenarios.Kind, t time.Time, msg string) {
	b.rec.Add(scenarios.Event{Time: t, Source: scenarios.SrcComponent, Component: topology.WorkloadPod, Kind: kind, Message: msg})
}

// killPod deletes the workload pod as `kubectl delete pod` does, with its own grace period: kubelet stops its
// containers and sidecar, unmounts its volumes (NodeUnpublishVolume) and only then lets the pod object go
// (SyncTerminatedPod waits for the unmount: pkg/kubelet/kubelet.go, volumeManager.WaitForUnmount); then, as no
// other pod uses the volume, NodeUnstageVolume, awaited in the plugin's log. The probe of the pod's paths
// ends first: they go with the pod.
func (b *Backend) killPod(ctx context.Context) error {
	p, deleted, _ := b.workload.get()
	if p == nil || deleted {
		return errors.New("the pod is deleted already")
	}
	if err := b.stopProbe(ctx); err != nil {
		return err
	}
	if b.sc.Pod.Controller != "" {
		return fmt.Errorf("the pod's %s would replace it at once: the pod component is for a bare pod", b.sc.Pod.Controller)
	}
	b.pod.deleting.Store(true)
	defer b.pod.deleting.Store(false)
	uid := p.UID
	b.podEvent(scenarios.KKilled, time.Time{}, fmt.Sprintf("kubectl delete pod %s (uid %s)", p.Name, shortUID(string(uid))))
	err := b.cs.CoreV1().Pods(b.n.namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: metav1.NewUIDPreconditions(string(uid))})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete pod %s: %w", p.Name, err)
	}
	if _, err := b.workload.await(ctx, 2*time.Minute, func(p *corev1.Pod, deleted bool) bool { return deleted || p.UID != uid }); err != nil {
		return fmt.Errorf("pod %s not gone (kubelet could not unpublish its volume? see plugin.log): %w", p.Name, err)
	}
	b.podEvent(scenarios.KExited, time.Time{}, fmt.Sprintf("pod %s gone: containers stopped, volume unpublished", shortUID(string(uid))))
	b.progress("pod %s (uid %s) deleted", p.Name, shortUID(string(uid)))
	if err := b.watch.unstage.wait(ctx, 2*time.Minute); err != nil {
		return fmt.Errorf("volume %s not unstaged after the pod's deletion: %w", b.n.volumeHandle, err)
	}
	b.watch.unstage.reset() // the next NodeUnstageVolume is the new pod's, at teardown
	b.logf("NodeUnstageVolume of %s after the pod's deletion", b.n.volumeHandle)
	return nil
}

// startPod creates the workload pod again, as its controller would: a new pod UID, so NodeStageVolume,
// NodePublishVolume, its sidecar and containers. It returns once every container has had its first start.
func (b *Backend) startPod(ctx context.Context) error {
	if p, deleted, _ := b.workload.get(); p != nil && !deleted {
		return errors.New("the pod still exists")
	}
	created := time.Now()
	if err := b.podUp(ctx, false); err != nil {
		return err
	}
	b.podEvent(scenarios.KStarted, created, "pod "+shortUID(b.pod.uid)+" created")
	b.podEvent(scenarios.KReady, time.Time{}, "pod "+shortUID(b.pod.uid)+": volume published, every container had its first start")
	return nil
}

// podPart is the workload pod: deleted, and created again from the same spec (a new UID).
type podPart struct {
	noPart
	b *Backend
}

func newPodPart(b *Backend, _ *scenarios.Env) (part, error) { return &podPart{b: b}, nil }

func (p *podPart) kill(ctx context.Context) error  { return p.b.killPod(ctx) }
func (p *podPart) start(ctx context.Context) error { return p.b.startPod(ctx) }
