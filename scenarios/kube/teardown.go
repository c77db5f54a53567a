package kube

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/moby/sys/mountinfo"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/kubeletpath"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
)

// Stop implements scenarios.Backend. In kubelet's order, so that nothing stays mounted: the plugin must serve
// for kubelet to unpublish and unstage, so it comes back first if a step left it off; then the pods go (kubelet
// calls NodeUnpublishVolume before it lets the pod object go), then the claim and the volume (kubelet calls
// NodeUnstageVolume and drops the volume from node.status.volumesInUse), then the release and the namespace.
func (b *Backend) Stop(ctx context.Context) error {
	if b.life.stopped {
		return nil
	}
	b.life.stopped = true
	defer b.closeLogs()
	if b.cs == nil || !b.life.nsCreated {
		b.stopLoops()
		return nil
	}
	if b.opts.Keep {
		b.life.keepNote = b.keepText()
		b.stopLoops()
		return nil
	}
	var errs []error
	if b.life.off[dsName()] {
		b.progress("teardown: bringing the plugin back so that kubelet can unpublish and unstage")
		if err := b.startPlugin(ctx); err != nil {
			errs = append(errs, fmt.Errorf("plugin back for teardown: %w", err))
		}
	}
	if b.life.off[keeperDSName()] {
		// Without its FUSE servers the volume's mounts do not answer, and kubelet's stat of them would hang.
		b.progress("teardown: bringing the keeper back so that the volume answers kubelet's unmount checks")
		if err := b.startKeeper(ctx); err != nil {
			errs = append(errs, fmt.Errorf("keeper back for teardown: %w", err))
		}
	}
	b.dumpState(ctx)
	unstage := b.watch.unstage
	if _, deleted, _ := b.workload.get(); deleted || b.n.foreign {
		// A foreign driver's log is not followed: the staging dir's mount table entry says it instead.
		// The run ended with the pod deleted (a last step): killPod awaited its NodeUnstageVolume, and no pod
		// staged the volume again, so there is no other one to wait for.
		unstage = nil
	}
	errs = append(errs, b.teardown(ctx, b.n, unstage)...)
	b.stopLoops()
	if b.local && b.vols != nil {
		if err := b.checkMounts(); err != nil {
			errs = append(errs, err)
		}
	}
	err := errors.Join(errs...)
	if err != nil {
		b.logf("teardown failed: %v", err)
	} else {
		b.progress("teardown: the pods, release, PV and mounts of namespace %s are gone (its controller deletes the namespace)", b.n.namespace)
	}
	return err
}

// teardown removes one run's objects (this run's, or a crashed earlier run's) in kubelet's order and waits
// for each step.
func (b *Backend) teardown(ctx context.Context, n names, unstage *unstageWatch) []error {
	var errs []error
	pods := b.cs.CoreV1().Pods(n.namespace)
	// The workload's Deployment first, or its ReplicaSet would create its pod again.
	bg := metav1.DeletePropagationBackground
	if err := b.cs.AppsV1().Deployments(n.namespace).DeleteCollection(ctx, metav1.DeleteOptions{PropagationPolicy: &bg},
		metav1.ListOptions{LabelSelector: managedByLabel + "=" + managedBy}); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, err)
	}
	// Every pod but the plugin's: the workload (NodeUnpublishVolume) and the probe.
	list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: managedByLabel + "=" + managedBy})
	if err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, err)
	}
	if list != nil {
		for _, p := range list.Items {
			if err := pods.Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, err)
			}
		}
		for _, p := range list.Items {
			if err := b.waitGone(ctx, "pod "+p.Name, 2*time.Minute, func(ctx context.Context) error {
				_, err := pods.Get(ctx, p.Name, metav1.GetOptions{})
				return err
			}); err != nil {
				errs = append(errs, fmt.Errorf("%w (kubelet could not unpublish the volume? see the plugin log)", err))
			}
		}
	}
	// A foreign driver's inline volume has no claim.
	if n.pvc != "" {
		if err := b.cs.CoreV1().PersistentVolumeClaims(n.namespace).Delete(ctx, n.pvc, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	if !n.foreign || n.ownPV {
		if err := b.cs.CoreV1().PersistentVolumes().Delete(ctx, n.pv, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
		if err := b.waitGone(ctx, "PV "+n.pv, time.Minute, func(ctx context.Context) error {
			_, err := b.cs.CoreV1().PersistentVolumes().Get(ctx, n.pv, metav1.GetOptions{})
			return err
		}); err != nil {
			errs = append(errs, err)
		}
	}
	if staging := kubeletpath.Staging(b.opts.KubeletDir, b.opts.DriverName, n.volumeHandle); unstage == nil && fileExists(filepath.Dir(staging)) {
		// An earlier run's plugin log is not followed; on the node itself the mount table says it.
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
			mounted, err := mountinfo.Mounted(staging)
			return err != nil || !mounted, nil
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("staging dir %s still mounted: %w", staging, err))
		}
	}
	switch {
	case unstage != nil && !unstage.stagedSeen():
		// The volume was never staged (the pod was refused, or never scheduled): no unstage will come.
		b.logf("teardown: %s was never staged (no NodeStageVolume in the plugin's log): no unstage to wait for", n.volumeHandle)
	case unstage != nil:
		// NodeUnstageVolume: kubelet unmounts the staging dir once no pod uses the volume; the plugin must
		// still serve then, so the release goes only after it.
		if err := unstage.wait(ctx, 2*time.Minute); err != nil {
			errs = append(errs, fmt.Errorf("volume %s not unstaged: %w", n.volumeHandle, err))
		} else {
			b.logf("teardown: NodeUnstageVolume of %s succeeded", n.volumeHandle)
		}
	}
	h := &helmRelease{getter: RESTClientGetter(b.opts, n.namespace), name: releaseName, namespace: n.namespace,
		logf: func(f string, a ...any) { b.logf("helm: "+f, a...) }}
	if err := h.uninstall(2 * time.Minute); err != nil {
		errs = append(errs, err)
	}
	if err := b.cs.CoreV1().Namespaces().Delete(ctx, n.namespace, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, err)
	}
	// What the next run needs gone is every pod of this one (the plugin's and the keeper's hold the driver's
	// registration socket and the node's mounts), not the namespace itself: its controller finishes it seconds
	// later (about 5 s per run on the from-source cluster), and removeStale leaves it that time.
	if err := b.waitGone(ctx, "the pods of namespace "+n.namespace, 2*time.Minute, func(ctx context.Context) error {
		return podsLeft(ctx, pods)
	}); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// podsLeft returns NotFound when the namespace holds no pod, whatever its state, or the error of the list.
func podsLeft(ctx context.Context, pods typedcorev1.PodInterface) error {
	list, err := pods.List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) > 0 {
		return err
	}
	return apierrors.NewNotFound(corev1.Resource("pods"), "")
}

// waitGone polls get (every 500 ms) until it returns NotFound.
func (b *Backend) waitGone(ctx context.Context, what string, timeout time.Duration, get func(context.Context) error) error {
	start := time.Now()
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(get(ctx)), nil
	})
	if err != nil {
		return fmt.Errorf("%s still there after %s: %w", what, timeout, err)
	}
	b.logf("teardown: %s gone after %.1fs", what, time.Since(start).Seconds())
	return nil
}

// removeStale removes what earlier runs left behind (a crash, or --keep): scenario runs share the driver
// name, so only one can be installed at a time.
func (b *Backend) removeStale(ctx context.Context) error {
	list, err := b.cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: managedByLabel + "=" + managedBy})
	if err != nil {
		return fmt.Errorf("list namespaces: %w", err)
	}
	for _, ns := range list.Items {
		if ns.DeletionTimestamp != nil && apierrors.IsNotFound(podsLeft(ctx, b.cs.CoreV1().Pods(ns.Name))) {
			continue // an earlier run's teardown, done but for the namespace controller's part
		}
		b.progress("removing the leftovers of an earlier run: namespace %s", ns.Name)
		n := names{namespace: ns.Name, pv: ns.Name, pvc: "dummy-fuse-pvc", volumeHandle: ns.Name}
		// Its plugin must serve for kubelet to unmount its volume.
		if err := b.setOff(ctx, ns.Name, dsName(), false); err != nil && !apierrors.IsNotFound(errors.Unwrap(err)) {
			b.logf("%v", err)
		}
		if errs := b.teardown(ctx, n, nil); len(errs) > 0 {
			return fmt.Errorf("remove the earlier run in namespace %s: %w", ns.Name, errors.Join(errs...))
		}
	}
	// A CSIDriver of the scenario driver name without its release (an uninstall that failed half-way).
	if d, err := b.cs.StorageV1().CSIDrivers().Get(ctx, b.opts.DriverName, metav1.GetOptions{}); err == nil {
		ns := d.Annotations["meta.helm.sh/release-namespace"]
		if _, err := b.cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); apierrors.IsNotFound(err) || ns == "" {
			b.progress("removing CSIDriver %s left by an earlier run", d.Name)
			if err := b.cs.StorageV1().CSIDrivers().Delete(ctx, d.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		} else {
			return fmt.Errorf("CSIDriver %s belongs to the release in namespace %s, which is not a scenario run's: "+
				"another installation uses the scenario driver name (pick another with the driver-name option)", d.Name, ns)
		}
	}
	return nil
}

// checkMounts verifies, on the node itself, that no mount of this run is left below kubelet's dir: the staging
// dir and the dirs of every pod of the run.
func (b *Backend) checkMounts() error {
	staging := filepath.Dir(b.vols[scenarios.PathStaging])
	dirs := []string{staging}
	for _, uid := range b.pod.uids {
		dirs = append(dirs, kubeletpath.PodDir(b.opts.KubeletDir, uid))
	}
	var left []*mountinfo.Info
	for _, dir := range dirs {
		ms, err := mounts.Under(dir)
		if err != nil {
			return err
		}
		left = append(left, ms...)
	}
	if len(left) > 0 {
		var ps []string
		for _, m := range left {
			ps = append(ps, m.Mountpoint+" ("+m.FSType+")")
		}
		return fmt.Errorf("%d mounts of this run left on the node: %s", len(left), strings.Join(ps, ", "))
	}
	b.logf("teardown: no mount left below %s", strings.Join(dirs, ", "))
	return nil
}

// dumpState writes the final pod objects and events of the namespace into the run dir.
func (b *Backend) dumpState(ctx context.Context) {
	if pods, err := b.cs.CoreV1().Pods(b.n.namespace).List(ctx, metav1.ListOptions{}); err == nil {
		writeYAML(filepath.Join(b.dir, "pods.yaml"), pods)
	}
	if evs, err := b.cs.CoreV1().Events(b.n.namespace).List(ctx, metav1.ListOptions{}); err == nil {
		var s strings.Builder
		for _, e := range evs.Items {
			fmt.Fprintf(&s, "%s %s x%d %s %s/%s %s: %s\n", e.LastTimestamp.UTC().Format(time.RFC3339), e.Type, e.Count,
				e.Reason, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.InvolvedObject.FieldPath, e.Message)
		}
		_ = os.WriteFile(filepath.Join(b.dir, "k8s-events.txt"), []byte(s.String()), 0o644)
	}
}

func (b *Backend) keepText() string {
	var w strings.Builder
	fmt.Fprintf(&w, "--keep: the run's objects are left in place (the next run removes them).\n")
	fmt.Fprintf(&w, "  kubectl -n %s get pods            # the workload pod %s and the plugin DaemonSet %s\n", b.n.namespace, b.n.pod, dsName())
	fmt.Fprintf(&w, "  kubectl -n %s describe pod %s\n", b.n.namespace, b.n.pod)
	for _, ds := range []string{dsName(), keeperDSName()} {
		if b.life.off[ds] {
			fmt.Fprintf(&w, "  %s is kept off the node: kubectl -n %s patch ds %s --type=merge -p '{\"spec\":{\"template\":{\"spec\":{\"nodeSelector\":{%q:null}}}}}'\n",
				ds, b.n.namespace, ds, offLabel)
		}
	}
	fmt.Fprintf(&w, "Clean up with (in this order, so that kubelet unmounts everything):\n")
	fmt.Fprintf(&w, "  kubectl -n %s delete pod -l %s=%s --wait\n", b.n.namespace, managedByLabel, managedBy)
	fmt.Fprintf(&w, "  kubectl -n %s delete pvc %s; kubectl delete pv %s --wait\n", b.n.namespace, b.n.pvc, b.n.pv)
	fmt.Fprintf(&w, "  helm -n %s uninstall %s --wait; kubectl delete namespace %s\n", b.n.namespace, releaseName, b.n.namespace)
	return w.String()
}

// stopLoops ends the informers, log streams and probes, waiting at most 10 s for them.
func (b *Backend) stopLoops() {
	if b.cancel == nil {
		return
	}
	b.cancel()
	done := make(chan struct{})
	go func() {
		b.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		b.logf("teardown: some log streams did not end within 10s")
	}
}

func (b *Backend) closeLogs() {
	for _, w := range []*scenarios.LogFile{b.logs.workload, b.logs.plugin, b.logs.keeper, b.logs.remediator, b.logs.sidecar, b.logs.kubelet, b.logs.kube} {
		_ = w.Close()
	}
}
