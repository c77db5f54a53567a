package kube

// The components of a driver-agnostic run (scenarios.DriverPod, DriverDaemonSet, DriverProcess, MountPod):
// what an operator can do to any driver from outside, through the API, or on the node itself.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// driverKinds are the parts of a foreign driver's topology that a driverPart plays (its workload pod is
// created at Setup and left alone).
var driverKinds = map[topology.Key]topology.Component{
	{Component: topology.DriverPod, Holder: topology.InDriver}:       topology.DriverPod,
	{Component: topology.DriverDaemonSet, Holder: topology.InDriver}: topology.DriverDaemonSet,
	{Component: topology.DriverProcess, Holder: topology.InDriver}:   topology.DriverProcess,
	{Component: topology.MountPod, Holder: topology.InDriver}:        topology.MountPod,
}

// driverPart is one component of a foreign driver; killed remembers what its kill removed.
type driverPart struct {
	noPart
	b      *Backend
	c      topology.Component
	killed pluginPod
	gone   map[types.UID]bool // the mount pods the kill deleted
}

func (p *driverPart) ready(context.Context) error { return nil }

func (p *driverPart) kill(ctx context.Context) error {
	switch p.c {
	case topology.DriverPod:
		return p.deletePluginPod(ctx)
	case topology.DriverProcess:
		return p.killProcess(ctx)
	case topology.MountPod:
		return p.deleteMountPods(ctx)
	}
	return errUnsupported
}

func (p *driverPart) start(ctx context.Context) error {
	switch p.c {
	case topology.DriverPod, topology.DriverProcess:
		return p.waitPluginReady(ctx, p.killed, p.c == topology.DriverProcess)
	case topology.MountPod:
		return p.waitMountPod(ctx)
	}
	return errUnsupported
}

func (p *driverPart) upgrade(ctx context.Context) error {
	if p.c != topology.DriverDaemonSet {
		return errUnsupported
	}
	return p.rollout(ctx)
}

var zeroGrace = int64(0)

// deletePluginPod deletes the node plugin pod (grace period 0, as the catalog's plugin kill) and waits until it
// is gone; its DaemonSet creates a new one by itself, as in production.
func (p *driverPart) deletePluginPod(ctx context.Context) error {
	b := p.b
	pp, err := b.discoverPlugin(ctx)
	if err != nil {
		return err
	}
	p.killed = pp
	b.rec.Add(scenarios.Event{Source: scenarios.SrcComponent, Component: p.c, Kind: scenarios.KKilled,
		Message: fmt.Sprintf("kubectl delete pod -n %s %s --grace-period=0 --force", pp.pod.Namespace, pp.pod.Name)})
	err = b.cs.CoreV1().Pods(pp.pod.Namespace).Delete(ctx, pp.pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zeroGrace,
		Preconditions: &metav1.Preconditions{UID: &pp.pod.UID}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete node plugin pod %s/%s: %w", pp.pod.Namespace, pp.pod.Name, err)
	}
	b.progress("node plugin pod %s/%s deleted (grace period 0); DaemonSet %s replaces it", pp.pod.Namespace, pp.pod.Name, pp.ds)
	return p.waitPodGone(ctx, pp.pod)
}

// waitPodGone waits until pod (that UID) no longer exists, and records its end.
func (p *driverPart) waitPodGone(ctx context.Context, pod *corev1.Pod) error {
	b := p.b
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, b.opts.SetupTimeout, true, func(ctx context.Context) (bool, error) {
		cur, err := b.cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err) || (err == nil && cur.UID != pod.UID), nil
	})
	if err != nil {
		return fmt.Errorf("pod %s/%s not gone: %w", pod.Namespace, pod.Name, err)
	}
	b.rec.Add(scenarios.Event{Source: scenarios.SrcComponent, Component: p.c, Kind: scenarios.KExited,
		Message: fmt.Sprintf("pod %s/%s gone", pod.Namespace, pod.Name)})
	return nil
}

// waitPluginReady waits until the node plugin pod of the killed one's DaemonSet on the node is ready: a new
// pod, or with same the killed one again (its container restarted).
func (p *driverPart) waitPluginReady(ctx context.Context, killed pluginPod, same bool) error {
	b := p.b
	if killed.pod == nil {
		return errors.New("nothing was killed to wait for")
	}
	var ready *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, b.opts.SetupTimeout, true, func(ctx context.Context) (bool, error) {
		pods, err := b.cs.CoreV1().Pods(killed.pod.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + b.node})
		if err != nil {
			return false, nil
		}
		for i := range pods.Items {
			q := &pods.Items[i]
			if daemonSetOf(q) == killed.ds && (same || q.UID != killed.pod.UID) && q.DeletionTimestamp == nil && podReady(q) {
				ready = q
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("no ready pod of DaemonSet %s/%s on node %s: %w", killed.pod.Namespace, killed.ds, b.node, err)
	}
	b.rec.Add(scenarios.Event{Source: scenarios.SrcComponent, Component: p.c, Kind: scenarios.KReady,
		Message: fmt.Sprintf("node plugin pod %s ready", ready.Name)})
	b.progress("node plugin pod %s/%s ready", ready.Namespace, ready.Name)
	return nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// rollout restarts the node plugin DaemonSet's rollout as `kubectl rollout restart` does (an annotation of the
// pod template) and waits until its old pod on the node is gone and a new one is ready.
func (p *driverPart) rollout(ctx context.Context) error {
	b := p.b
	pp, err := b.discoverPlugin(ctx)
	if err != nil {
		return err
	}
	p.killed = pp
	ds, err := b.cs.AppsV1().DaemonSets(pp.pod.Namespace).Get(ctx, pp.ds, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("DaemonSet %s/%s: %w", pp.pod.Namespace, pp.ds, err)
	}
	if ds.Spec.UpdateStrategy.Type == "OnDelete" {
		return fmt.Errorf("DaemonSet %s/%s updates OnDelete: a rollout restart replaces no pod (driver-pod-delete is its upgrade)", pp.pod.Namespace, pp.ds)
	}
	now := time.Now()
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":%q}}}}}`, now.Format(time.RFC3339))
	if _, err := b.cs.AppsV1().DaemonSets(pp.pod.Namespace).Patch(ctx, pp.ds, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("rollout restart of DaemonSet %s/%s: %w", pp.pod.Namespace, pp.ds, err)
	}
	b.rec.Add(scenarios.Event{Time: now, Source: scenarios.SrcComponent, Component: p.c, Kind: scenarios.KUpgraded,
		Message: fmt.Sprintf("kubectl rollout restart daemonset -n %s %s", pp.pod.Namespace, pp.ds), Detail: "rollout restart"})
	b.progress("DaemonSet %s/%s: rollout restarted", pp.pod.Namespace, pp.ds)
	if err := p.waitPodGone(ctx, pp.pod); err != nil {
		return err
	}
	return p.waitPluginReady(ctx, pp, false)
}

// killProcess sends SIGKILL to every process named FuseProcess in the node plugin pod. It needs this machine
// to be the node: the processes are found in /proc by their name and their cgroup, which holds the pod's UID
// (kubelet's cgroup layout, pkg/kubelet/cm: pod<uid>, with _ for - under the systemd driver).
func (p *driverPart) killProcess(ctx context.Context) error {
	b := p.b
	if !b.local {
		return errors.New("--fuse-process needs this machine to be the workload's node (its /proc)")
	}
	pp, err := b.discoverPlugin(ctx)
	if err != nil {
		return err
	}
	p.killed = pp
	pids, err := podProcesses("/proc", string(pp.pod.UID), b.opts.Driver.FuseProcess)
	if err != nil {
		return err
	}
	if len(pids) == 0 {
		return fmt.Errorf("no process %q in node plugin pod %s/%s", b.opts.Driver.FuseProcess, pp.pod.Namespace, pp.pod.Name)
	}
	b.rec.Add(scenarios.Event{Source: scenarios.SrcComponent, Component: p.c, Kind: scenarios.KKilled,
		Message: fmt.Sprintf("kill -9 %v (%s in pod %s)", pids, b.opts.Driver.FuseProcess, pp.pod.Name)})
	for _, pid := range pids {
		if err := unix.Kill(pid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("kill %d: %w", pid, err)
		}
	}
	b.progress("%s (PIDs %v) in pod %s/%s killed", b.opts.Driver.FuseProcess, pids, pp.pod.Namespace, pp.pod.Name)
	return nil
}

// podProcesses lists the PIDs under proc named comm whose cgroup belongs to the pod with UID uid.
func podProcesses(proc, uid, comm string) ([]int, error) {
	entries, err := os.ReadDir(proc)
	if err != nil {
		return nil, err
	}
	marks := []string{"pod" + uid, "pod" + strings.ReplaceAll(uid, "-", "_")}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		name, err := os.ReadFile(filepath.Join(proc, e.Name(), "comm"))
		if err != nil || strings.TrimSpace(string(name)) != comm {
			continue
		}
		cg, err := os.ReadFile(filepath.Join(proc, e.Name(), "cgroup"))
		if err != nil {
			continue
		}
		for _, m := range marks {
			if strings.Contains(string(cg), m) {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids, nil
}

// deleteMountPods deletes the pods on the node that --mount-pod-selector selects (grace period 0).
func (p *driverPart) deleteMountPods(ctx context.Context) error {
	b := p.b
	sel := b.opts.Driver.MountPodSelector
	pods, err := b.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + b.node, LabelSelector: sel})
	if err != nil {
		return fmt.Errorf("list mount pods: %w", err)
	}
	if len(pods.Items) == 0 {
		return fmt.Errorf("no pod on node %s matches --mount-pod-selector %q", b.node, sel)
	}
	p.gone = map[types.UID]bool{}
	var which []string
	for _, q := range pods.Items {
		which = append(which, q.Namespace+"/"+q.Name)
		p.gone[q.UID] = true
	}
	b.rec.Add(scenarios.Event{Source: scenarios.SrcComponent, Component: p.c, Kind: scenarios.KKilled,
		Message: "kubectl delete pod --grace-period=0 --force " + strings.Join(which, " ")})
	for i := range pods.Items {
		q := &pods.Items[i]
		if err := b.cs.CoreV1().Pods(q.Namespace).Delete(ctx, q.Name, metav1.DeleteOptions{GracePeriodSeconds: &zeroGrace,
			Preconditions: &metav1.Preconditions{UID: &q.UID}}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete mount pod %s/%s: %w", q.Namespace, q.Name, err)
		}
	}
	for i := range pods.Items {
		if err := p.waitPodGone(ctx, &pods.Items[i]); err != nil {
			return err
		}
	}
	return nil
}

// waitMountPod waits a while for a new mount pod; many drivers make one only at the next publish, so none is
// recorded, not an error.
func (p *driverPart) waitMountPod(ctx context.Context) error {
	b := p.b
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := b.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + b.node, LabelSelector: b.opts.Driver.MountPodSelector})
		if err != nil {
			return false, nil
		}
		for i := range pods.Items {
			if q := &pods.Items[i]; !p.gone[q.UID] && podReady(q) {
				b.rec.Add(scenarios.Event{Source: scenarios.SrcComponent, Component: p.c, Kind: scenarios.KReady,
					Message: fmt.Sprintf("mount pod %s/%s ready", q.Namespace, q.Name)})
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil && ctx.Err() == nil {
		b.progress("no new mount pod on node %s within 1m (the driver makes none by itself)", b.node)
		return nil
	}
	return err
}
