package kube

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// podServer is what a workload pod's FUSE sidecar needs to run the plugin's FUSE server (the sidecar mode):
// the plugin's --fuse-server flags (which server, its executable, its settings) and the native sidecars that
// serve what that server reads (gcsfuse's fake GCS server, on the pod's loopback), started before the FUSE
// sidecar. Both are taken from the installed plugin DaemonSet, where the chart defines them once; the zero
// value (dummy-fuse) adds nothing.
type podServer struct {
	args   []string
	before []corev1.Container
}

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
	}
	if !found {
		return s, fmt.Errorf("the plugin pod has no container %s", pluginContainer)
	}
	for _, c := range spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
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
