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
)

func dsName() string { return releaseName + "-node" }

// Kill implements scenarios.Backend.
func (b *Backend) Kill(ctx context.Context, c scenarios.Component) error {
	switch c {
	case scenarios.PluginContainer:
		return b.killPlugin(ctx)
	case scenarios.SidecarContainer:
		if b.sidecarName != "" {
			return b.killSidecar(ctx)
		}
	case scenarios.WorkloadPod:
		return b.killPod(ctx)
	}
	return fmt.Errorf("kube backend: cannot kill %s", c)
}

// Start implements scenarios.Backend.
func (b *Backend) Start(ctx context.Context, c scenarios.Component) error {
	switch c {
	case scenarios.PluginContainer:
		return b.startPlugin(ctx)
	case scenarios.SidecarContainer:
		if b.sidecarName != "" {
			return b.startSidecar(ctx)
		}
	case scenarios.WorkloadPod:
		return b.startPod(ctx)
	}
	return fmt.Errorf("kube backend: cannot start %s", c)
}

// Upgrade implements scenarios.Backend.
func (b *Backend) Upgrade(_ context.Context, c scenarios.Component) error {
	return fmt.Errorf("kube backend: cannot upgrade %s", c)
}

// killPlugin deletes the plugin pod on the workload's node. A DaemonSet replaces a deleted pod at once, and
// the scenario needs the plugin down until it is started again, so first the DaemonSet gets a nodeSelector
// that no node matches; then the plugin pod is deleted with grace period 0, like `kubectl delete pod
// --grace-period=0 --force` (kubelet still sends SIGTERM and SIGKILL 2 s later; the plugin's FUSE servers
// die with it either way).
func (b *Backend) killPlugin(ctx context.Context) error {
	pp, uid := b.servingPlugin()
	if pp == nil {
		return fmt.Errorf("no running plugin pod on node %s", b.node)
	}
	if err := b.setPluginOff(ctx, b.n.namespace, true); err != nil {
		return err
	}
	b.rec.Add(scenarios.Event{Source: scenarios.SrcComponent, Component: scenarios.PluginContainer, Kind: scenarios.KKilled,
		Message: fmt.Sprintf("kubectl delete pod %s --grace-period=0 --force", pp.name)})
	zero := int64(0)
	err := b.cs.CoreV1().Pods(b.n.namespace).Delete(ctx, pp.name, metav1.DeleteOptions{
		GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: (*types.UID)(&uid)}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete plugin pod %s: %w", pp.name, err)
	}
	b.progress("plugin pod %s deleted (grace period 0), DaemonSet kept off the node", pp.name)
	if _, err := pp.w.await(ctx, 30*time.Second, func(_ *corev1.Pod, deleted bool) bool { return deleted }); err != nil {
		return fmt.Errorf("plugin pod %s not gone: %w", pp.name, err)
	}
	// The API object goes at once; the container dies on the node when kubelet kills it: its log ends then.
	if err := pp.waitDown(ctx, 30*time.Second); err != nil {
		return err
	}
	return nil
}

// startPlugin lets the DaemonSet run on the node again; it returns once the new plugin pod logged "Ready"
// (its restore is done and Probe answers ready).
func (b *Backend) startPlugin(ctx context.Context) error {
	since := time.Now()
	if err := b.setPluginOff(ctx, b.n.namespace, false); err != nil {
		return err
	}
	b.progress("DaemonSet %s may run on the node again", dsName())
	_, err := b.waitPluginReady(ctx, since)
	return err
}

// servingPlugin is the plugin pod on the workload's node that logged "Ready" last and is not deleted.
func (b *Backend) servingPlugin() (*pluginPod, string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for uid, pp := range b.plugins {
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

// setPluginOff adds (off) or removes the nodeSelector that keeps the plugin DaemonSet of namespace ns off
// every node.
func (b *Backend) setPluginOff(ctx context.Context, ns string, off bool) error {
	var patch []byte
	pt := types.MergePatchType
	if off {
		patch = []byte(fmt.Sprintf(`{"spec":{"template":{"spec":{"nodeSelector":{%q:"true"}}}}}`, pluginOffLabel))
	} else {
		patch = []byte(fmt.Sprintf(`{"spec":{"template":{"spec":{"nodeSelector":{%q:null}}}}}`, pluginOffLabel))
	}
	if _, err := b.cs.AppsV1().DaemonSets(ns).Patch(ctx, dsName(), pt, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("patch DaemonSet %s/%s nodeSelector: %w", ns, dsName(), err)
	}
	if ns == b.n.namespace {
		b.pluginOff = off
	}
	return nil
}

// waitPluginReady waits until a plugin pod on the node (any node before the workload is scheduled) logged
// "Ready" after since, and returns that pod's node.
func (b *Backend) waitPluginReady(ctx context.Context, since time.Time) (string, error) {
	deadline := time.Now().Add(b.opts.SetupTimeout)
	for {
		var node string
		b.mu.Lock()
		for _, pp := range b.plugins {
			if b.node == "" || pp.node == b.node {
				node = pp.node
			}
		}
		b.mu.Unlock()
		n := b.rec.Count(func(e scenarios.Event) bool {
			return e.Kind == scenarios.KReady && e.Component == scenarios.PluginContainer && !e.Time.Before(since)
		})
		if n > 0 {
			return node, nil
		}
		if err := b.pluginImageProblem(); err != nil {
			return "", err
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no plugin pod logged \"Ready\" within %s (see plugin.log and kube.log)", b.opts.SetupTimeout)
		}
		if err := scenarios.Sleep(ctx, 100*time.Millisecond); err != nil {
			return "", err
		}
	}
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

// pluginImageProblem reports a plugin pod that cannot start because its image is not on the node: nothing
// is pulled for a locally built image, so waiting longer would not help.
func (b *Backend) pluginImageProblem() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, pp := range b.plugins {
		p, deleted, _ := pp.w.get()
		if p == nil || deleted {
			continue
		}
		for _, cs := range p.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil && (w.Reason == "ErrImageNeverPull" || w.Reason == "ErrImagePull" ||
				w.Reason == "ImagePullBackOff" || w.Reason == "InvalidImageName") {
				return fmt.Errorf("plugin pod %s: %s: %s — is image %s on node %s? (make image, then make cluster-load-images, "+
					"or kind load image-archive _output/images/dummy-fuse-csi-<tag>.tar)", pp.name, w.Reason, w.Message, b.opts.Image, pp.node)
			}
		}
	}
	return nil
}
