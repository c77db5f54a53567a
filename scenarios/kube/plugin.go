package kube

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

func dsName() string { return releaseName + "-node" }

// pluginPart is the plugin: its DaemonSet's pod on the workload's node.
type pluginPart struct {
	noPart
	b *Backend
}

func newPluginPart(b *Backend, _ *scenarios.Env) (part, error) { return &pluginPart{b: b}, nil }

func (p *pluginPart) kill(ctx context.Context) error  { return p.b.killPlugin(ctx) }
func (p *pluginPart) start(ctx context.Context) error { return p.b.startPlugin(ctx) }

// killPlugin deletes the plugin pod on the workload's node (deleteNodePod).
func (b *Backend) killPlugin(ctx context.Context) error {
	return b.deleteNodePod(ctx, topology.PluginContainer, dsName(), b.plugins)
}

// deleteNodePod deletes the pod of DaemonSet ds (plugin or keeper) on the workload's node, which pods
// follows. A DaemonSet replaces a deleted pod at once, and the scenario needs c down until it is started
// again, so first the DaemonSet gets a nodeSelector that no node matches; then the pod is deleted with grace
// period 0, like the original demo's `kubectl delete pod --grace-period=0 --force` (kubelet still sends
// SIGTERM and SIGKILL 2 s later; the FUSE servers in the pod die with it either way).
func (b *Backend) deleteNodePod(ctx context.Context, c topology.Component, ds string, pods map[string]*dsPod) error {
	pp, uid := b.runningPod(pods)
	if pp == nil {
		return fmt.Errorf("no running pod of DaemonSet %s on node %s", ds, b.node)
	}
	if err := b.setOff(ctx, b.n.namespace, ds, true); err != nil {
		return err
	}
	b.rec.Add(scenarios.Event{Source: scenarios.SrcComponent, Component: c, Kind: scenarios.KKilled,
		Message: fmt.Sprintf("kubectl delete pod %s --grace-period=0 --force", pp.name)})
	zero := int64(0)
	err := b.cs.CoreV1().Pods(b.n.namespace).Delete(ctx, pp.name, metav1.DeleteOptions{
		GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: (*types.UID)(&uid)}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete %s pod %s: %w", c.Noun(), pp.name, err)
	}
	b.progress("%s pod %s deleted (grace period 0), DaemonSet %s kept off the node", c.Noun(), pp.name, ds)
	if _, err := pp.w.await(ctx, 30*time.Second, func(_ *corev1.Pod, deleted bool) bool { return deleted }); err != nil {
		return fmt.Errorf("pod %s not gone: %w", pp.name, err)
	}
	// The API object goes at once; the container dies on the node when kubelet kills it: its log ends then.
	return pp.waitDown(ctx, 30*time.Second)
}

// startPlugin lets the DaemonSet run on the node again; it returns once the new plugin pod logged "Ready"
// (its restore is done and Probe answers ready).
func (b *Backend) startPlugin(ctx context.Context) error {
	since := time.Now()
	if err := b.setOff(ctx, b.n.namespace, dsName(), false); err != nil {
		return err
	}
	b.progress("DaemonSet %s may run on the node again", dsName())
	_, err := b.waitPluginReady(ctx, since)
	return err
}

// runningPod is the pod of pods on the workload's node whose container runs (its log is followed), and is
// not deleted.
func (b *Backend) runningPod(pods map[string]*dsPod) (*dsPod, string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for uid, pp := range pods {
		p, deleted, _ := pp.w.get()
		if deleted || p == nil || p.DeletionTimestamp != nil || (b.node != "" && pp.node != b.node) {
			continue
		}
		pp.mu.Lock()
		running := pp.running
		pp.mu.Unlock()
		if running {
			return pp, uid
		}
	}
	return nil, ""
}

// setOff adds (off) or removes the nodeSelector that keeps DaemonSet ds of namespace ns off every node.
func (b *Backend) setOff(ctx context.Context, ns, ds string, off bool) error {
	patch := []byte(fmt.Sprintf(`{"spec":{"template":{"spec":{"nodeSelector":{%q:null}}}}}`, offLabel))
	if off {
		patch = []byte(fmt.Sprintf(`{"spec":{"template":{"spec":{"nodeSelector":{%q:"true"}}}}}`, offLabel))
	}
	if _, err := b.cs.AppsV1().DaemonSets(ns).Patch(ctx, ds, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("patch DaemonSet %s/%s nodeSelector: %w", ns, ds, err)
	}
	if ns == b.n.namespace {
		b.mu.Lock()
		b.life.off[ds] = off
		b.mu.Unlock()
	}
	return nil
}

// waitPluginReady waits until a plugin pod on the node (any node before the workload is scheduled) logged
// "Ready" after since, and returns that pod's node.
func (b *Backend) waitPluginReady(ctx context.Context, since time.Time) (string, error) {
	if err := b.rec.Await(ctx, b.opts.SetupTimeout, 100*time.Millisecond, `a plugin pod to log "Ready" (see plugin.log and kube.log)`,
		func(e scenarios.Event) bool {
			return e.Kind == scenarios.KReady && e.Component == topology.PluginContainer && !e.Time.Before(since)
		},
		func() error { return b.imageProblem(b.plugins, b.opts.Image) }); err != nil {
		return "", err
	}
	var node string
	b.mu.Lock()
	for _, pp := range b.plugins {
		if b.node == "" || pp.node == b.node {
			node = pp.node
		}
	}
	b.mu.Unlock()
	return node, nil
}

// waitRegistered waits until kubelet on node lists the driver in its CSINode (plugin registration done);
// before that, a pod's volume cannot be mounted.
func (b *Backend) waitRegistered(ctx context.Context, node string) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, b.opts.SetupTimeout, true, func(ctx context.Context) (bool, error) {
		cn, err := b.cs.StorageV1().CSINodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			last = err
			return false, nil
		}
		return slices.ContainsFunc(cn.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == b.opts.DriverName }), nil
	})
	if err != nil {
		if last != nil {
			err = errors.Join(err, last)
		}
		return fmt.Errorf("kubelet on %s did not register driver %s: %w", node, b.opts.DriverName, err)
	}
	b.logf("kubelet on %s registered driver %s", node, b.opts.DriverName)
	return nil
}

// imageProblem reports a pod of pods that cannot start because its image (image, for the hint) is not on the
// node: nothing is pulled for a locally built image, so waiting longer would not help.
func (b *Backend) imageProblem(pods map[string]*dsPod, image string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, pp := range pods {
		p, deleted, _ := pp.w.get()
		if p == nil || deleted {
			continue
		}
		for _, cs := range p.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil && (w.Reason == "ErrImageNeverPull" || w.Reason == "ErrImagePull" ||
				w.Reason == "ImagePullBackOff" || w.Reason == "InvalidImageName") {
				return fmt.Errorf("pod %s: %s: %s — is image %s on node %s? (make image, then make cluster-load-images, "+
					"or kind load image-archive _output/images/dummy-fuse-csi-<tag>.tar)", pp.name, w.Reason, w.Message, image, pp.node)
			}
		}
	}
	return nil
}
