package kube

import (
	"context"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/kubeletpath"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
)

// startProbe starts watching the volume paths: stat on this machine when it is the node (exact, every
// 100 ms, like the local backend), else a probe pod on the node that reads the file through hostPath mounts
// of the volume and staging dirs' parents with HostToContainer propagation, every 500 ms.
func (b *Backend) startProbe(ctx context.Context) error {
	podDir := kubeletpath.PodDir(b.opts.KubeletDir, b.workloadUID())
	b.local = fileExists(podDir)
	mode := b.opts.Probe
	if mode == "auto" {
		mode = "pod"
		if b.local {
			mode = "host"
		}
	}
	if mode == "host" && !b.local {
		return fmt.Errorf("probe host: %s does not exist here: this machine is not the node %s (use the pod probe)", podDir, b.node)
	}
	b.logf("probe of the volume paths: %s", mode)
	if mode == "host" {
		pctx, cancel := context.WithCancel(b.ctx)
		b.pod.probeStop = cancel
		paths := maps.Clone(b.vols)
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			scenarios.StatHostPaths(pctx, b.rec, paths, 100*time.Millisecond)
		}()
		return nil
	}
	return b.podProbe(ctx)
}

// stopProbe ends the probe of the current pod's volume paths, before the pod goes (its paths go with it): the
// host probe's loop, or the probe pod, deleted and awaited.
func (b *Backend) stopProbe(ctx context.Context) error {
	if b.pod.probeStop != nil {
		b.pod.probeStop()
		b.pod.probeStop = nil
		return nil
	}
	p, deleted, _ := b.pod.probe.get()
	if p == nil || deleted {
		return nil
	}
	if err := b.cs.CoreV1().Pods(b.n.namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete probe pod: %w", err)
	}
	if _, err := b.pod.probe.await(ctx, time.Minute, func(_ *corev1.Pod, deleted bool) bool { return deleted }); err != nil {
		return fmt.Errorf("probe pod %s not gone: %w", p.Name, err)
	}
	return nil
}

func (b *Backend) podProbe(ctx context.Context) error {
	p := probePod(b.n, b.opts.Image, b.node, b.vols[scenarios.PathVolume], b.vols[scenarios.PathStaging], 500*time.Millisecond,
		map[string]string{managedByLabel: managedBy})
	created, err := b.cs.CoreV1().Pods(b.n.namespace).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create probe pod: %w", err)
	}
	if _, err := b.pod.probe.await(ctx, b.opts.SetupTimeout, func(p *corev1.Pod, _ bool) bool { return p != nil && p.UID == created.UID }); err != nil {
		return fmt.Errorf("probe pod not seen: %w", err)
	}
	states := scenarios.NewProbeStates(b.rec)
	for _, label := range []string{scenarios.PathVolume, scenarios.PathStaging} {
		label := label
		b.wg.Add(1)
		go b.follow(b.pod.probe, label, false, instanceHandler{
			line: func(n int, _ instanceInfo, line []byte, _ time.Time) {
				e := scenarios.ParseWorkloadLine(line, label, n, time.Now())
				state := ""
				switch {
				case e.Kind == scenarios.KRead:
				case e.IsWorkloadError():
					if state = e.Errno; state == "" {
						state = e.Message
					}
				default:
					return
				}
				states.Observe(label, state, e.Time, "read through a probe pod")
			},
			end: func(int, instanceInfo, *corev1.ContainerStateTerminated, bool) {},
		})
	}
	_, err = b.pod.probe.await(ctx, b.opts.SetupTimeout, func(p *corev1.Pod, deleted bool) bool {
		if p == nil || deleted || p.UID != created.UID {
			return false
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.State.Running == nil {
				return false
			}
		}
		return len(p.Status.ContainerStatuses) == 2
	})
	if err != nil {
		return fmt.Errorf("probe pod not running: %w", err)
	}
	return nil
}
