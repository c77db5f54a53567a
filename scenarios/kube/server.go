package kube

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// podServer is what a workload pod's FUSE sidecar needs to run the plugin's FUSE server (the sidecar mode):
// the plugin's --fuse-server flags (which server, its executable, its settings), the init containers that
// come first (gcsfuse's fake GCS server, a native sidecar on the pod's loopback; an operator's server's copy
// out of their image) and the volumes of an operator's server with the plugin's mounts of them. All are taken
// from the installed plugin DaemonSet, where the chart defines them once; the zero value (dummy-fuse) adds
// nothing.
type podServer struct {
	args    []string
	before  []corev1.Container
	volumes []corev1.Volume
	mounts  []corev1.VolumeMount
}

// The volumes of an operator's server in the pods that run it (chart/templates/_fuseserver.tpl): the files
// copied out of their image, and the spec.
var serverVolumes = []string{"server-files", "server-spec"}

// serverFlag is the prefix of the plugin's FUSE server flags (--fuse-server, --fuse-server-path,
// --fuse-server-opt: internal/fuseserver's Spec.Flags), which `csi-plugin sidecar` takes too.
const serverFlag = "--fuse-server"

// serverOf reads podServer from the plugin pod spec: its plugin container's FUSE server flags and its native
// sidecars (init containers that keep running).
func serverOf(spec *corev1.PodSpec) (podServer, error) {
	var s podServer
	found := false
	for _, c := range spec.Containers {
		if c.Name != pluginContainer {
			continue
		}
		found = true
		for _, a := range c.Args {
			if strings.HasPrefix(a, serverFlag) {
				s.args = append(s.args, a)
			}
		}
		for _, m := range c.VolumeMounts {
			if slices.Contains(serverVolumes, m.Name) {
				s.mounts = append(s.mounts, m)
			}
		}
	}
	for _, v := range spec.Volumes {
		if slices.Contains(serverVolumes, v.Name) {
			s.volumes = append(s.volumes, *v.DeepCopy())
		}
	}
	if !found {
		return s, fmt.Errorf("the plugin pod has no container %s", pluginContainer)
	}
	for _, c := range spec.InitContainers {
		native := c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
		if native || slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return slices.Contains(serverVolumes, m.Name) }) {
			s.before = append(s.before, *c.DeepCopy())
		}
	}
	return s, nil
}

// pluginServer reads podServer from the installed plugin DaemonSet.
func (b *Backend) pluginServer(ctx context.Context) (podServer, error) {
	ds, err := b.cs.AppsV1().DaemonSets(b.n.namespace).Get(ctx, dsName(), metav1.GetOptions{})
	if err != nil {
		return podServer{}, fmt.Errorf("the plugin DaemonSet %s, for its FUSE server: %w", dsName(), err)
	}
	s, err := serverOf(&ds.Spec.Template.Spec)
	if err != nil {
		return s, fmt.Errorf("DaemonSet %s: %w", dsName(), err)
	}
	return s, nil
}
