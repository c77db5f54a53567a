package local

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/kubeletpath"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// podPart is the workload pod: killing it is kubelet's teardown of a deleted pod, starting it the creation of
// the same pod again (a new UID), as its controller would.
type podPart struct {
	noPart
	b *Backend
}

func newPodPart(b *Backend, _ *scenarios.Env) (part, error) { return &podPart{b: b}, nil }

func (p *podPart) kill(ctx context.Context) error {
	b := p.b
	if b.podGone() {
		return errors.New("the pod is deleted already")
	}
	b.rec.Add(scenarios.Event{Source: scenarios.SrcComponent, Component: topology.WorkloadPod, Kind: scenarios.KKilled,
		Message: "pod " + b.pod.uid + " deleted: containers stopped, volume unpublished and unstaged"})
	b.setPodDeleted(true)
	err := b.podDown(ctx)
	b.rec.Add(scenarios.Event{Source: scenarios.SrcComponent, Component: topology.WorkloadPod, Kind: scenarios.KExited,
		Message: "pod " + b.pod.uid + " gone"})
	return err
}

func (p *podPart) start(ctx context.Context) error {
	b := p.b
	if !b.podGone() {
		return errors.New("the pod still exists")
	}
	b.setPodDeleted(false)
	if err := b.podUp(ctx); err != nil {
		return err
	}
	b.rec.Add(scenarios.Event{Source: scenarios.SrcComponent, Component: topology.WorkloadPod, Kind: scenarios.KStarted,
		Message: "pod " + b.pod.uid + " created"})
	b.rec.Add(scenarios.Event{Source: scenarios.SrcComponent, Component: topology.WorkloadPod, Kind: scenarios.KReady,
		Message: "pod " + b.pod.uid + ": volume published, every container had its first start"})
	return nil
}

// procs lists the current instance of each of the pod's containers.
func (p *podPart) procs() []knownProc {
	var out []knownProc
	for _, c := range p.b.pod.containers {
		if cp := c.current(); cp != nil {
			out = append(out, knownProc{cp, fmt.Sprintf("container %s: pid %d, log %s/containers/%s-%d.log\n    look inside: nsenter -t %d -m cat %s",
				c.spec.Name, cp.pid(), p.b.dir, c.spec.Name, c.starts-1, cp.pid(), c.spec.File())})
		}
	}
	return out
}

// podUp is what kubelet does for a new pod: a new pod UID, what the parts prepare (the sidecar's emptyDir),
// NodeStageVolume and NodePublishVolume, the probe of its volume paths, then what the parts start in the pod
// (a native sidecar, before the containers) and its containers. It returns
// once every container has had its first start attempt. A container's instances are numbered on from the
// pod before (kubelet would start again at restart count 0), so that the evidence tells them apart.
func (b *Backend) podUp(ctx context.Context) error {
	sc := b.sc
	uid := newUID()
	vol := volume{
		driver: b.opts.DriverName, handle: volumeHandle, pvName: pvName,
		podName: podName, podNamespace: podNamespace, podUID: uid,
		staging: kubeletpath.Staging(b.root, b.opts.DriverName, volumeHandle),
		target:  kubeletpath.Target(b.root, uid, pvName),
	}
	b.mu.Lock()
	b.pod.uid, b.vol = uid, vol
	b.mu.Unlock()
	b.rec.SetPaths(map[string]string{
		scenarios.PathRoot: b.root, scenarios.PathVolume: b.vol.target, scenarios.PathStaging: b.vol.staging,
	})
	b.logf("pod %s/%s: uid %s", podNamespace, podName, uid)
	for _, p := range b.parts.All() {
		if err := p.podPrepare(); err != nil {
			return err
		}
	}
	mkdir := func(d string) error { return os.MkdirAll(d, 0o750) }
	if err := b.csi.stageAndPublish(ctx, b.vol, mkdir, b.logf); err != nil {
		return err
	}
	b.rec.Add(scenarios.Event{Source: scenarios.SrcKubelet, Kind: scenarios.KVolumeMounted,
		Message: "volume staged and published (NodeStageVolume, NodePublishVolume)"})

	podCtx, cancel := context.WithCancel(b.loopCtx)
	b.pod.cancel = cancel
	b.pod.wg.Add(1)
	go func() {
		defer b.pod.wg.Done()
		scenarios.StatHostPaths(podCtx, b.rec, map[string]string{
			scenarios.PathVolume: b.vol.target, scenarios.PathStaging: b.vol.staging}, b.opts.ProbeInterval)
	}()
	for _, p := range b.parts.All() {
		if err := p.podStart(podCtx); err != nil {
			return err
		}
	}
	previous := b.pod.containers
	var containers []*container
	for i, spec := range sc.Pod.Containers {
		c := &container{b: b, spec: spec, index: i, firstAttempt: make(chan struct{}), loopDone: make(chan struct{}),
			bo: restartBackoff{base: b.opts.BackoffBase, max: b.opts.BackoffMax}}
		if i < len(previous) {
			c.starts = previous[i].starts
		}
		containers = append(containers, c)
	}
	b.mu.Lock()
	b.pod.containers = containers
	b.mu.Unlock()
	for _, c := range containers {
		b.pod.wg.Add(1)
		go c.loop(podCtx)
	}
	// A start stats the volume dir (kubelet's makeMounts): on a FUSE mount no server answers yet, that stat
	// waits until one does, so the wait for the first attempts is bounded.
	wait := cmp.Or(b.opts.FirstStartWait, 60*time.Second)
	deadline := time.After(wait)
	for _, c := range b.pod.containers {
		select {
		case <-c.firstAttempt:
		case <-deadline:
			return fmt.Errorf("container %s made no start attempt within %s: its start is stuck (see kubelet.log; a stat of the volume dir waits while no FUSE server answers the mount)", c.spec.Name, wait)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// stopPod stops the pod's containers, then what the parts run in the pod (the sidecar), each with SIGTERM, a
// grace period, SIGKILL (kubelet's order), and removes its subPath binds (kubelet's CleanSubPaths, before the volume is unpublished); the pod's loops must
// have ended. logPrefix starts its lines in kubelet.log.
func (b *Backend) stopPod(logPrefix string) error {
	var errs []error
	for _, c := range b.pod.containers {
		if p := c.current(); p != nil && !p.exited() {
			b.logf("%sstop %s pid %d", logPrefix, c.spec.Name, p.pid())
			if err := p.stop(2 * time.Second); err != nil {
				errs = append(errs, fmt.Errorf("stop container %s: %w", c.spec.Name, err))
			}
			c.waitOutput()
		}
	}
	for _, p := range b.parts.All() {
		errs = append(errs, p.podStop(logPrefix))
	}
	if b.pod.uid != "" {
		done, err := unmountAll(kubeletpath.SubPaths(b.root, b.pod.uid))
		b.logLines(logPrefix, done)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// podDown is kubelet's deletion of the pod: its loops end, its containers and its sidecar are stopped
// (SIGTERM, a grace period, SIGKILL), its subPath binds cleaned (CleanSubPaths), then NodeUnpublishVolume and,
// as no other pod uses the volume, NodeUnstageVolume. It returns what it could not stop or unmount.
func (b *Backend) podDown(ctx context.Context) error {
	if b.pod.cancel != nil {
		b.pod.cancel()
	}
	errs := []error{b.waitLoops(&b.pod.wg), b.stopPod("pod deletion: ")}
	if b.plugin != nil && !b.plugin.exited() && b.csi != nil {
		if err := b.csi.unpublishAndUnstage(ctx, b.vol, b.logf); err != nil {
			errs = append(errs, err)
		}
	} else {
		errs = append(errs, errors.New("the plugin is not running: kubelet cannot unpublish the pod's volume"))
	}
	return errors.Join(errs...)
}
