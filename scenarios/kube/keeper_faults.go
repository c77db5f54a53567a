package kube

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/contract"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// The FUSE server faults beyond a single crash, each one `csi-plugin keeper crash` executed in the keeper
// container, which reads the keeper's status file every millisecond: an exec per kill would come hundreds of
// milliseconds late.

// crashLoopFor bounds the crash loop in the keeper container: it ends by itself once the keeper holds the
// volume's connection no more (the plugin aborted it), which the plugin's default limit brings within 31 s.
const crashLoopFor = 5 * time.Minute

// crashExec runs `csi-plugin keeper crash --volume <id>` with args in the keeper container, recording the kill.
func (b *Backend) crashExec(ctx context.Context, what string, args ...string) (string, error) {
	kp, _ := b.runningPod(b.keeper.pods)
	if kp == nil {
		return "", fmt.Errorf("no running keeper pod on node %s", b.node)
	}
	cmd := append([]string{"/usr/local/bin/csi-plugin", "keeper", "crash", "--volume", b.n.volumeHandle}, args...)
	b.rec.Add(scenarios.Event{Source: scenarios.SrcComponent, Component: topology.FuseServer, Kind: scenarios.KKilled,
		Message: fmt.Sprintf("exec %s in pod %s: %s", strings.Join(cmd, " "), kp.name, what)})
	out, err := b.exec(ctx, kp.name, keeperContainer, cmd)
	out = strings.TrimSpace(out)
	b.logf("exec %s in %s: %q, %v", strings.Join(cmd, " "), kp.name, out, err)
	if err != nil {
		return out, fmt.Errorf("exec %s in pod %s: %s: %w", strings.Join(cmd, " "), kp.name, out, err)
	}
	b.progress("%s", out)
	return out, nil
}

// successorPart is scenarios.FuseSuccessor.
type successorPart struct {
	noPart
	b *Backend
	// killed are the server and the successor kill killed (in the keeper's namespace, as its crash says).
	killed [2]int
}

func newSuccessorPart(b *Backend, _ *scenarios.Env) (part, error) {
	return &successorPart{b: b}, nil
}

func (p *successorPart) kill(ctx context.Context) error {
	b := p.b
	b.keeper.exited.Lock()
	before := len(b.keeper.exited.pids)
	b.keeper.exited.Unlock()
	out, err := b.crashExec(ctx, "SIGKILL of the volume's FUSE server, then of its successor the moment the keeper names it", "--successor")
	if err != nil {
		return err
	}
	p.killed, err = b.successorKills(ctx, out, before, 10*time.Second)
	return err
}

// successorKills are the two servers `keeper crash --successor` killed: as its output says, or, when the
// command succeeded but its output was lost on the way back (seen on v1.37.2 with containerd 1.6: an empty
// stream from a command that exits at once), the first two exits the keeper's log names after the before-th,
// waited for at most within.
func (b *Backend) successorKills(ctx context.Context, out string, before int, within time.Duration) ([2]int, error) {
	if first, next, ok := contract.ParseCrashSuccessor(out); ok {
		return [2]int{first, next}, nil
	}
	var killed [2]int
	what := fmt.Sprintf("the keeper's log to name two exits, as keeper crash --successor said %q, not which servers it killed (see keeper.log)", out)
	err := scenarios.Await(ctx, within, 20*time.Millisecond, what, func() (bool, error) {
		b.keeper.exited.Lock()
		exited := slices.Clone(b.keeper.exited.pids[before:])
		b.keeper.exited.Unlock()
		if len(exited) < 2 {
			return false, fmt.Errorf("it named %d exits", len(exited))
		}
		killed = [2]int{exited[0], exited[1]}
		return true, nil
	})
	if err != nil {
		return [2]int{}, err
	}
	b.logf("keeper crash --successor said %q; the keeper's log says pids %d and %d exited since", out, killed[0], killed[1])
	return killed, nil
}

// start waits until a server other than the two killed ones serves the volume: the successor may have said it
// serves in the moment before its signal, and that says nothing of the next one.
func (p *successorPart) start(ctx context.Context) error {
	what := fmt.Sprintf("a FUSE server other than the killed %d and %d to serve the volume (see keeper.log)", p.killed[0], p.killed[1])
	return scenarios.Await(ctx, 30*time.Second, 20*time.Millisecond, what, func() (bool, error) {
		pid := int(p.b.keeper.servedBy.Load())
		return pid != 0 && pid != p.killed[0] && pid != p.killed[1], nil
	})
}

// crashLoopPart is scenarios.FuseCrashLoop: the loop runs in the keeper container until the volume's
// connection is over (or crashLoopFor); Start waits for its end.
type crashLoopPart struct {
	noPart
	b    *Backend
	done chan error
}

func newCrashLoopPart(b *Backend, _ *scenarios.Env) (part, error) {
	return &crashLoopPart{b: b}, nil
}

func (p *crashLoopPart) kill(context.Context) error {
	if p.done != nil {
		return errors.New("the crash loop runs already")
	}
	p.done = make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), crashLoopFor+time.Minute)
		defer cancel()
		_, err := p.b.crashExec(ctx, "SIGKILL of every FUSE server of the volume, the moment the keeper names it (crash loop)", "--loop", crashLoopFor.String())
		p.done <- err
	}()
	return nil
}

// start waits until the loop in the keeper container has ended, then for a server of the volume.
func (p *crashLoopPart) start(ctx context.Context) error {
	if p.done == nil {
		return errors.New("no crash loop runs")
	}
	select {
	case err := <-p.done:
		p.done = nil
		if err != nil {
			return err
		}
	case <-ctx.Done():
		return ctx.Err()
	}
	return p.b.rec.AwaitReady(ctx, topology.FuseServer, 30*time.Second)
}

// recollectPart is scenarios.PluginRecollecting. On a cluster the kill follows the keeper's log line of its
// reconnection, which reaches the backend a log stream later: the hand-back (milliseconds) is usually over
// by then, so the row checks a plugin killed right after its re-collection there; the local backend and the
// plugin's tests (TestKeeperPluginKilledDuringRecollection) hit the hand-back itself.
type recollectPart struct {
	noPart
	b *Backend
}

func newRecollectPart(b *Backend, _ *scenarios.Env) (part, error) {
	return &recollectPart{b: b}, nil
}

func (p *recollectPart) kill(ctx context.Context) error {
	b := p.b
	since := time.Now()
	if err := b.setOff(ctx, b.n.namespace, dsName(), false); err != nil {
		return err
	}
	b.progress("DaemonSet %s may run on the node again; its pod is deleted once the keeper has reached it", dsName())
	// The keeper's line can come before the pod watch has seen the new plugin pod running (v1.36.3 once): the
	// kill needs both.
	what := fmt.Sprintf("the keeper to reach the restarted plugin, running on node %s (see keeper.log and kube.log)", b.node)
	if err := scenarios.Await(ctx, b.opts.SetupTimeout, 20*time.Millisecond, what, func() (bool, error) {
		pp, _ := b.runningPod(b.plugins)
		return pp != nil && b.rec.Count(func(e scenarios.Event) bool {
			return e.Kind == scenarios.KReady && e.Component == topology.KeeperContainer && e.Time.After(since)
		}) > 0, nil
	}); err != nil {
		return err
	}
	return b.killPlugin(ctx)
}

func (p *recollectPart) start(ctx context.Context) error { return p.b.startPlugin(ctx) }
