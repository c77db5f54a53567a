package kube

// The keeper of the plugin's keeper mode (chart fuseMode keeper): the keeper DaemonSet's pods, followed like the
// plugin's (their logs into keeper.log, with what internal/contract.ParseKeeperLine reads in them as evidence), and the
// steps on them: deleting the keeper pod, starting it again, killing a FUSE server in it, and a rolling update
// to the next build.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/contract"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

const keeperContainer = "keeper"

// keeperDSName is the chart's keeper DaemonSet (chart/templates/keeper.yaml).
func keeperDSName() string { return releaseName + "-keeper" }

// nextSuffix is how the next build is stamped: hack/build.sh stamps its binaries <version>-next, and
// hack/mkimage/image.sh tags its image <tag>-next.
const nextSuffix = "-next"

// onKeeperPod follows every keeper pod from its first appearance: its log into keeper.log; its start;
// "connected to the plugin" as KReady of the keeper; a FUSE server serving the run's volume as KReady of the
// FUSE server (Detail: its version) and a server's exit as its KExited; the pod's end as the keeper's KExited.
func (b *Backend) onKeeperPod(p *corev1.Pod, deleted bool) {
	if b.keeper == nil {
		return // no keeper in this mode
	}
	kp, seen := b.observeDSPod(b.keeper.pods, p, deleted)
	if seen {
		return
	}
	b.wg.Add(1)
	go b.follow(kp.w, keeperContainer, true, instanceHandler{
		line: func(n int, info instanceInfo, line []byte, ts time.Time) {
			if kp.startOnce(n) {
				b.nodeEvent(kp, topology.KeeperContainer, scenarios.KStarted, stampTime(info.startedAt, ts),
					fmt.Sprintf("pod %s on %s (image %s)", kp.name, kp.node, imageOf(p, keeperContainer)), "")
			}
			ts = writePodLine(b.logs.keeper, kp.name, n, line, ts)
			t := scenarios.LineTime(line, ts)
			b.keeperLine(kp, line, t)
			switch ev := contract.ParseKeeperLine(line); ev.Kind {
			case contract.KeeperLineConnected:
				b.nodeEvent(kp, topology.KeeperContainer, scenarios.KReady, t, fmt.Sprintf("pod %s connected to the plugin", kp.name), "")
			case contract.KeeperLineServed:
				if ev.Volume == b.n.volumeHandle {
					b.keeper.servedBy.Store(int64(ev.PID))
					b.nodeEvent(kp, topology.FuseServer, scenarios.KReady, t,
						fmt.Sprintf("pod %s: dummy-fuse %s pid %d serves the volume", kp.name, ev.Version, ev.PID), ev.Version)
				}
			case contract.KeeperLineServerExited:
				b.keeper.exited.Lock()
				b.keeper.exited.pids = append(b.keeper.exited.pids, ev.PID)
				b.keeper.exited.Unlock()
				b.nodeEvent(kp, topology.FuseServer, scenarios.KExited, t, fmt.Sprintf("pod %s: FUSE server pid %d: %s", kp.name, ev.PID, ev.Reason), "")
			}
		},
		end: func(_ int, _ instanceInfo, term *corev1.ContainerStateTerminated, gone bool) {
			b.nodeEvent(kp, topology.KeeperContainer, scenarios.KExited, time.Now(), kp.endText(term, gone), "")
			kp.markEnded()
		},
	})
}

// imageOf is the image of container name of p.
func imageOf(p *corev1.Pod, name string) string {
	if c, ok := podContainer(p, name); ok {
		return c.Image
	}
	return "?"
}

// waitKeeperReady waits until a keeper pod on the workload's node (any node before the workload is scheduled)
// logged that it is connected to the plugin after since.
func (b *Backend) waitKeeperReady(ctx context.Context, since time.Time, image string) error {
	return b.rec.Await(ctx, b.opts.SetupTimeout, 100*time.Millisecond, "a keeper pod to connect to the plugin (see keeper.log and kube.log)",
		func(e scenarios.Event) bool {
			return e.Kind == scenarios.KReady && e.Component == topology.KeeperContainer && !e.Time.Before(since)
		},
		func() error { return b.imageProblem(b.keeper.pods, image) })
}

// killKeeper deletes the keeper pod on the workload's node (its FUSE servers die with it; the plugin keeps its
// copies of the connections).
func (b *Backend) killKeeper(ctx context.Context) error {
	return b.deleteNodePod(ctx, topology.KeeperContainer, keeperDSName(), b.keeper.pods)
}

// startKeeper lets the keeper DaemonSet run on the node again; it returns once the new keeper is connected to
// the plugin (which hands it every connection it holds).
func (b *Backend) startKeeper(ctx context.Context) error {
	since := time.Now()
	if err := b.setOff(ctx, b.n.namespace, keeperDSName(), false); err != nil {
		return err
	}
	b.progress("DaemonSet %s may run on the node again", keeperDSName())
	return b.waitKeeperReady(ctx, since, b.opts.Image)
}

// killFuseServer kills the FUSE server that serves the run's volume, as a crash would: `csi-plugin keeper crash
// --volume <id>` executed in the keeper container sends it SIGKILL (the PIDs are the keeper's own; the image
// has no shell). It returns once the keeper logged the server's exit.
func (b *Backend) killFuseServer(ctx context.Context) error {
	return b.killKeeperServer(ctx, topology.FuseServer, "FUSE server")
}

// killKeeperServer is killFuseServer recording the kill as c's (the relay-keeper mode's keeper servers are relays).
func (b *Backend) killKeeperServer(ctx context.Context, c topology.Component, what string) error {
	kp, _ := b.runningPod(b.keeper.pods)
	if kp == nil {
		return fmt.Errorf("no running keeper pod on node %s", b.node)
	}
	cmd := []string{"/usr/local/bin/csi-plugin", "keeper", "crash", "--volume", b.n.volumeHandle}
	exited := func(e scenarios.Event) bool {
		return e.Kind == scenarios.KExited && e.Component == topology.FuseServer
	}
	before := b.rec.Count(exited)
	b.rec.Add(scenarios.Event{Source: scenarios.SrcComponent, Component: c, Kind: scenarios.KKilled,
		Message: fmt.Sprintf("exec %s in pod %s: SIGKILL of the volume's %s", strings.Join(cmd, " "), kp.name, what)})
	out, err := b.exec(ctx, kp.name, keeperContainer, cmd)
	out = strings.TrimSpace(out)
	b.logf("exec %s in %s: %q, %v", strings.Join(cmd, " "), kp.name, out, err)
	if err != nil {
		return fmt.Errorf("exec %s in pod %s: %s: %w", strings.Join(cmd, " "), kp.name, out, err)
	}
	b.progress("%s", out)
	return scenarios.Await(ctx, 30*time.Second, 20*time.Millisecond, "the keeper to log the FUSE server's exit (see keeper.log)", func() (bool, error) {
		return b.rec.Count(exited) > before, nil
	})
}

// upgradeKeeper rolls the keeper DaemonSet to the next build, as a user does (helm upgrade --set
// keeper.imageTag=<tag>-next): the chart's rolling update (maxSurge 1) starts the new keeper beside the old one,
// the plugin hands it every connection and its servers take them over, then the DaemonSet controller deletes
// the old pod (SIGTERM: its servers exit without unmounting). It returns once a server of the new version
// serves the volume and the old keeper is gone.
func (b *Backend) upgradeKeeper(ctx context.Context) error {
	old, _ := b.runningPod(b.keeper.pods)
	if old == nil {
		return fmt.Errorf("no running keeper pod on node %s to upgrade", b.node)
	}
	var cur string
	for _, e := range b.rec.Snapshot().Events {
		if e.Kind == scenarios.KReady && e.Component == topology.FuseServer {
			cur = e.Detail
		}
	}
	if cur == "" {
		return errors.New("no FUSE server serves the volume yet: nothing to upgrade")
	}
	if strings.HasSuffix(cur, nextSuffix) {
		return fmt.Errorf("the running FUSE server is already the next build (%s)", cur)
	}
	next := cur + nextSuffix
	repo, tag := splitImage(b.opts.Image)
	image := repo + ":" + tag + nextSuffix
	vals, err := b.chartValues()
	if err != nil {
		return err
	}
	if err := mergeSets(vals, []string{"keeper.imageTag=" + tag + nextSuffix}); err != nil {
		return err
	}
	b.rec.Add(scenarios.Event{Source: scenarios.SrcComponent, Component: topology.KeeperContainer, Kind: scenarios.KUpgraded,
		Message: fmt.Sprintf("keeper %s → %s: helm upgrade --set keeper.imageTag=%s%s", cur, next, tag, nextSuffix), Detail: next})
	b.progress("helm upgrade %s: keeper image %s (dummy-fuse %s → %s)", releaseName, image, cur, next)
	if err := b.helm.upgrade(ctx, vals, b.opts.SetupTimeout); err != nil {
		return err
	}
	what := fmt.Sprintf("a FUSE server of %s to serve the volume after the upgrade (see keeper.log and kube.log)", next)
	if err := b.rec.Await(ctx, b.opts.SetupTimeout, 100*time.Millisecond, what,
		func(e scenarios.Event) bool {
			return e.Kind == scenarios.KReady && e.Component == topology.FuseServer && e.Detail == next
		},
		func() error {
			if err := b.imageProblem(b.keeper.pods, image); err != nil {
				return fmt.Errorf("%w (make image builds the next build's image too)", err)
			}
			return nil
		}); err != nil {
		return err
	}
	if err := old.waitDown(ctx, b.opts.SetupTimeout); err != nil {
		return fmt.Errorf("the old keeper: %w", err)
	}
	b.progress("keeper rolled to %s; the old keeper pod %s is gone", next, old.name)
	return nil
}

// keeperPart is the keeper of the keeper mode: its DaemonSet's pod on the workload's node.
type keeperPart struct {
	noPart
	b    *Backend
	pods map[string]*dsPod // the keeper DaemonSet's pods, by pod UID
	// servedBy is the PID (in its keeper's namespace) of the server a keeper last said serves the volume.
	servedBy atomic.Int64
	// exited are the PIDs (in their keeper's namespace) of the FUSE servers the keepers said exited, in order.
	exited struct {
		sync.Mutex
		pids []int
	}
}

func newKeeperPart(b *Backend, env *scenarios.Env) (part, error) {
	var err error
	if b.logs.keeper, err = env.Log("keeper.log"); err != nil {
		return nil, err
	}
	b.keeper = &keeperPart{b: b, pods: map[string]*dsPod{}}
	return b.keeper, nil
}

func (p *keeperPart) kill(ctx context.Context) error    { return p.b.killKeeper(ctx) }
func (p *keeperPart) start(ctx context.Context) error   { return p.b.startKeeper(ctx) }
func (p *keeperPart) upgrade(ctx context.Context) error { return p.b.upgradeKeeper(ctx) }

// ready waits for the keeper of this build: the plugin hands it every connection it mounts, so the volume's
// server runs once it is connected.
func (p *keeperPart) ready(ctx context.Context) error {
	return p.b.waitKeeperReady(ctx, time.Time{}, p.b.opts.Image)
}

// keeperServerPart is the keeper's FUSE server of the volume.
type keeperServerPart struct {
	noPart
	b *Backend
}

func newKeeperServerPart(b *Backend, _ *scenarios.Env) (part, error) {
	return &keeperServerPart{b: b}, nil
}

func (p *keeperServerPart) kill(ctx context.Context) error { return p.b.killFuseServer(ctx) }

// start waits for the keeper's next server: nobody but the keeper starts a FUSE server.
func (p *keeperServerPart) start(ctx context.Context) error {
	return p.b.rec.AwaitReady(ctx, topology.FuseServer, 30*time.Second)
}
