package kube

// Finding a foreign driver's node plugin without knowing its chart: kubelet knows which drivers are
// registered on a node (CSINode); a node plugin registers through node-driver-registrar, whose
// --kubelet-registration-path names the driver's socket dir (by convention <kubelet>/plugins/<driver>/), or
// runs the driver with a flag or environment variable that holds its name. So the node plugin is the pod of a
// DaemonSet on the node whose containers name the driver as an argument value, an environment value or a path
// component of an argument or a hostPath volume; --plugin-selector picks it by label where that fails.

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// pluginPod is a foreign driver's node plugin pod on a node, its DaemonSet, and why it was taken for it.
type pluginPod struct {
	pod *corev1.Pod
	ds  string
	why string
}

// findPluginPod returns the node plugin pod of driver on node (see the file's comment); selector, when not
// empty, replaces the search by name with a label selector. The pods of namespace own are the run's (its
// remediator names the driver too) and never the driver's.
func findPluginPod(ctx context.Context, cs kubernetes.Interface, driver, node, selector, own string) (pluginPod, error) {
	csiNode, err := cs.StorageV1().CSINodes().Get(ctx, node, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return pluginPod{}, fmt.Errorf("node %s has no CSINode: no CSI driver is registered on it", node)
	case err != nil:
		return pluginPod{}, fmt.Errorf("CSINode %s: %w", node, err)
	}
	var registered []string
	for _, d := range csiNode.Spec.Drivers {
		registered = append(registered, d.Name)
	}
	if !slices.Contains(registered, driver) {
		return pluginPod{}, fmt.Errorf("driver %s is not registered on node %s (CSINode lists: %s): its node plugin does not run there", driver, node, strings.Join(registered, ", "))
	}
	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node, LabelSelector: selector})
	if err != nil {
		return pluginPod{}, fmt.Errorf("list the pods on node %s: %w", node, err)
	}
	var found []pluginPod
	for i := range pods.Items {
		p := &pods.Items[i]
		ds := daemonSetOf(p)
		if ds == "" || p.Namespace == own || p.Spec.NodeName != node || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		why := "label selector " + selector
		if selector == "" {
			if why = namesDriver(p, driver); why == "" {
				continue
			}
		}
		found = append(found, pluginPod{pod: p, ds: ds, why: why})
	}
	// A pod that names the driver in a container's arguments or environment registers it; one that only
	// mounts its directory (e.g. a helper of the driver) does not.
	if named := slices.DeleteFunc(slices.Clone(found), func(f pluginPod) bool { return strings.HasPrefix(f.why, "hostPath") }); len(named) > 0 {
		found = named
	}
	switch {
	case len(found) == 1:
		return found[0], nil
	case len(found) == 0 && selector != "":
		return pluginPod{}, fmt.Errorf("no running DaemonSet pod on node %s matches --plugin-selector %q", node, selector)
	case len(found) == 0:
		return pluginPod{}, fmt.Errorf("no running DaemonSet pod on node %s names driver %s in its containers' arguments, environment or hostPath volumes "+
			"(as node-driver-registrar's --kubelet-registration-path=<kubelet>/plugins/%s/csi.sock does): give --plugin-selector", node, driver, driver)
	}
	var which []string
	for _, f := range found {
		which = append(which, f.pod.Namespace+"/"+f.pod.Name)
	}
	return pluginPod{}, fmt.Errorf("%d pods on node %s could be the node plugin of %s (%s): give --plugin-selector", len(found), node, driver, strings.Join(which, ", "))
}

// daemonSetOf is the name of the DaemonSet that controls p, "" when none does.
func daemonSetOf(p *corev1.Pod) string {
	if o := metav1.GetControllerOf(p); o != nil && o.Kind == "DaemonSet" {
		return o.Name
	}
	return ""
}

// namesDriver says where a container of p names driver, "" when none does: a whole argument or argument
// value (--drivername=X, X), an environment value, or a path component of an argument or hostPath volume.
func namesDriver(p *corev1.Pod, driver string) string {
	ctrs := slices.Concat(p.Spec.InitContainers, p.Spec.Containers)
	for _, c := range ctrs {
		for _, a := range slices.Concat(c.Command, c.Args) {
			_, v, _ := strings.Cut(a, "=")
			if a == driver || v == driver || hasPathComponent(v, driver) || hasPathComponent(a, driver) {
				return fmt.Sprintf("container %s has argument %s", c.Name, a)
			}
		}
		for _, e := range c.Env {
			if e.Value == driver {
				return fmt.Sprintf("container %s has %s=%s", c.Name, e.Name, e.Value)
			}
		}
	}
	for _, v := range p.Spec.Volumes {
		if v.HostPath != nil && hasPathComponent(v.HostPath.Path, driver) {
			return fmt.Sprintf("hostPath volume %s is %s", v.Name, v.HostPath.Path)
		}
	}
	return ""
}

// hasPathComponent reports whether path s has a component exactly name (a driver name may contain dots, never
// a slash).
func hasPathComponent(s, name string) bool {
	return strings.Contains(s, "/") && slices.Contains(strings.Split(s, "/"), name)
}

// discoverPlugin finds the run's driver's node plugin on the workload's node.
func (b *Backend) discoverPlugin(ctx context.Context) (pluginPod, error) {
	return findPluginPod(ctx, b.cs, b.opts.Driver.Name, b.node, b.opts.Driver.PluginSelector, b.n.namespace)
}
