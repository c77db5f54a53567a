package local

import (
	"fmt"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
)

// restartingAll is the reason kubelet gives the containers a RestartAllContainers removed
// (pkg/kubelet/kubelet_pods.go: RestartingAllContainers).
const restartingAll = "RestartingAllContainers"

// restartsPod reports whether c's exit with code makes kubelet restart the whole pod in place: a restart rule
// RestartAllContainers that matches code (scenarios.Container.RestartAllContainers), on a kubelet that
// honours it (scenarios.RestartAllContainersIn; an older API server drops the rule).
func (c *container) restartsPod(code int) bool {
	return c.spec.RestartAllContainers && code == scenarios.RestartAllExitCode &&
		c.b.kubelet.AtLeast(scenarios.MustKubeletVersion(scenarios.RestartAllContainersIn))
}

// restartAll is kubelet's RestartAllContainers after source exited with its rule's code: every other container
// of the pod is stopped with "grace period 0", which kubelet raises to its minimum of 2 s (SIGTERM, then SIGKILL
// 2 s later: killContainer in pkg/kubelet/kuberuntime/kuberuntime_container.go), and every container, source
// included, is started again without back-off, as kubelet removes them all from the runtime and starts them
// afresh in the same sandbox (pkg/kubelet/kuberuntime/kuberuntime_manager.go, ContainersToReset). The init
// containers are among them (computePodActions resets pod.Spec.InitContainers too), so the native FUSE sidecar
// is stopped and started again the same way; that kubelet starts it before the others is not modelled (without
// a descriptor to take it serves nothing either way: restart-all-sidecar). Nothing is published again: the
// volume's bind stays what it is, and the plugin sends the sidecar no new descriptor.
func (b *Backend) restartAll(source *container) {
	b.logf("container %s exited with %d, its restart rule RestartAllContainers: stopping the pod's other containers (grace period 0, at least 2 s) and starting every container again in place",
		source.spec.Name, scenarios.RestartAllExitCode)
	b.rec.Add(scenarios.Event{Source: scenarios.SrcKubelet, Kind: scenarios.KPodEvent, Detail: restartingAll,
		Message: fmt.Sprintf("container %s exited with %d: RestartAllContainers", source.spec.Name, scenarios.RestartAllExitCode)})
	for _, c := range b.pod.containers {
		c.reset.Store(true)
		if c == source {
			continue
		}
		if p := c.current(); p != nil && !p.exited() {
			b.logf("container %s: stop pid %d (RestartAllContainers)", c.spec.Name, p.pid())
			go func() { _ = p.stop(minimumGracePeriod) }() // its loop sees the exit and starts it again
		}
	}
	if s := b.peers.sidecar; s != nil {
		s.reset.Store(true)
		if p := s.current(); p != nil && !p.exited() {
			b.logf("sidecar container: stop pid %d (RestartAllContainers)", p.pid())
			go func() { _ = p.stop(minimumGracePeriod) }() // supervise sees the exit and starts it again
		}
	}
}

// minimumGracePeriod is the shortest grace period kubelet gives a container it stops
// (minimumGracePeriodInSeconds in pkg/kubelet/kuberuntime/kuberuntime_manager.go).
const minimumGracePeriod = 2 * time.Second
