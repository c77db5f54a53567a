package kube

// The relay-keeper mode's parts (chart fuseMode relay-keeper): the keeper DaemonSet's pod runs, as its own
// children, a relay per staging connection (dummy-fuse --session, the keeper mode's FUSE server) and the real
// server on each backend the plugin mounts (csi-plugin/keeper/backend.go). The keeper itself and the plugin are
// keeper.go's and pluginpods.go's parts; the real server is killed in the keeper container by server-crash
// (every child of the keeper but its relays), the relay by `csi-plugin keeper crash`, and both restarts are read
// from the keeper's log.

import (
	"context"
	"fmt"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/contract"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// keeperRelayArg is the argument of the keeper's relays (its FUSE servers, csi-plugin/keeper/server.go), which
// its real servers lack.
const keeperRelayArg = "--session"

// onKeeperRelayLine turns the keeper's lines about the run's volume into the relay-keeper mode's events: a relay
// serving the connection (the keeper's "served by" line) as KReady of the relay, its exit as KExited; the real
// server's start on a backend as KReady of the real server, its exit as KExited.
func (p *keeperRelayPart) keeperLine(kp *dsPod, line []byte, t time.Time) {
	b := p.b
	switch ev := contract.ParseKeeperLine(line); ev.Kind {
	case contract.KeeperLineRealServer, contract.KeeperLineRealServerExited:
		if ev.Volume != b.n.volumeHandle {
			return
		}
		kind, what := scenarios.KReady, "serves its backend"
		if ev.Kind == contract.KeeperLineRealServerExited {
			kind, what = scenarios.KExited, "exited"
		}
		b.nodeEvent(kp, topology.RelayServer, kind, t, fmt.Sprintf("pod %s: real server pid %d %s (%s)", kp.name, ev.PID, what, ev.Reason), "")
	case contract.KeeperLineServed:
		if ev.Volume == b.n.volumeHandle {
			b.nodeEvent(kp, topology.RelayProcess, scenarios.KReady, t, fmt.Sprintf("pod %s: relay pid %d serves the volume", kp.name, ev.PID), "")
		}
	case contract.KeeperLineServerExited:
		b.nodeEvent(kp, topology.RelayProcess, scenarios.KExited, t, fmt.Sprintf("pod %s: relay pid %d: %s", kp.name, ev.PID, ev.Reason), "")
	}
}

// keeperRelayServerPart is the real server the keeper runs on the volume's backend. Its kill is a crash under
// load, as relayServerPart's: stopped, three read intervals for a read to wait inside it, then SIGKILL.
type keeperRelayServerPart struct {
	noPart
	b *Backend
}

func newKeeperRelayServerPart(b *Backend, _ *scenarios.Env) (part, error) {
	return &keeperRelayServerPart{b: b}, nil
}

func (p *keeperRelayServerPart) kill(ctx context.Context) error {
	b := p.b
	kp, _ := b.runningPod(b.keeper.pods)
	if kp == nil {
		return fmt.Errorf("no running keeper pod on node %s", b.node)
	}
	if err := b.serverCrashIn(ctx, kp.name, keeperContainer, "--stop", "--without-arg="+keeperRelayArg); err != nil {
		return err
	}
	wait := 3 * b.Timing().ReadInterval
	b.progress("real FUSE server stopped in the keeper; SIGKILL in %s, with a read waiting on it", wait)
	if err := scenarios.Sleep(ctx, wait); err != nil {
		return err
	}
	args := []string{"--without-arg=" + keeperRelayArg}
	b.rec.Add(scenarios.Event{Source: scenarios.SrcComponent, Component: topology.RelayServer, Kind: scenarios.KKilled,
		Message: fmt.Sprintf("exec csi-plugin %s %q in pod %s: SIGKILL of the real FUSE server (%s), stopped for %s with a read waiting on it",
			serverCrash, args, kp.name, b.sc.Plugin.Server(), wait)})
	return b.serverCrashIn(ctx, kp.name, keeperContainer, args...)
}

// start waits until the keeper logged a real server on a new backend: the plugin mounts it, the keeper runs it.
func (p *keeperRelayServerPart) start(ctx context.Context) error {
	return p.b.rec.AwaitReady(ctx, topology.RelayServer, relayWait)
}

// keeperRelayPart is the keeper's relay serving the volume's staging connection.
type keeperRelayPart struct {
	noPart
	b *Backend
}

func newKeeperRelayPart(b *Backend, _ *scenarios.Env) (part, error) {
	return &keeperRelayPart{b: b}, nil
}

// kill is the keeper mode's server crash: `csi-plugin keeper crash --volume` in the keeper container kills the
// relay serving the volume, and the keeper starts another.
func (p *keeperRelayPart) kill(ctx context.Context) error {
	return p.b.killKeeperServer(ctx, topology.RelayProcess, "relay")
}

// start waits until the keeper logged a relay serving the connection again.
func (p *keeperRelayPart) start(ctx context.Context) error {
	return p.b.rec.AwaitReady(ctx, topology.RelayProcess, relayWait)
}
