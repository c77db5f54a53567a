package kube

// The relay-keeper mode's real server given another build, as a user does it: the real server runs in the keeper's
// pod, so its next build (new flags) or a build that cannot start is a rolling update of the keeper alone
// (helm upgrade with keeper.relayServerArgs, the keeper's --relay-server-arg), never of the plugin, whose death
// with the keeper's would be the limit row (relay-keeper-all-holders). The chart rolls the keeper without a surge:
// the old pod goes (its relays and real servers with it), the plugin's copy of each connection carries it, and the
// new keeper's relay takes it over in front of a new backend with the new server.

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// refusedArg is an argument every real server refuses at once (Go's flag package, gcsfuse's command line and
// libfuse's option parser each exit with an unknown-option error): the build that cannot start.
const refusedArg = "--dfc-no-such-flag"

// rollRelayServer rolls the keeper with args as the real server's extra arguments (none: the chart's default),
// recording ev first (if any), and returns once the old keeper pod is gone.
func (b *Backend) rollRelayServer(ctx context.Context, args []string, ev *scenarios.Event) error {
	old, _ := b.runningPod(b.keeper.pods)
	if old == nil {
		return fmt.Errorf("no running keeper pod on node %s to roll", b.node)
	}
	vals, err := b.chartValues()
	if err != nil {
		return err
	}
	keeper, _ := vals["keeper"].(map[string]any)
	if keeper == nil {
		keeper = map[string]any{}
		vals["keeper"] = keeper
	}
	list := make([]any, len(args))
	for i, a := range args {
		list[i] = a
	}
	keeper["relayServerArgs"] = list
	if ev != nil {
		b.rec.Add(*ev)
	}
	b.progress("helm upgrade %s: keeper.relayServerArgs=%q (the keeper rolls; the plugin stays)", releaseName, args)
	if err := b.helm.upgrade(ctx, vals, b.opts.SetupTimeout); err != nil {
		return err
	}
	if err := old.waitDown(ctx, b.opts.SetupTimeout); err != nil {
		return fmt.Errorf("the old keeper: %w", err)
	}
	b.progress("the old keeper pod %s is gone", old.name)
	return nil
}

// awaitRelayServer waits until the keeper logged a real server of the volume started after since whose command
// line passes ok (the keeper's line names the command).
func (b *Backend) awaitRelayServer(ctx context.Context, since time.Time, what string, ok func(cmd string) bool) error {
	return b.rec.Await(ctx, b.opts.SetupTimeout, 100*time.Millisecond,
		fmt.Sprintf("a real server %s to serve the volume after the keeper's rollout (see keeper.log and kube.log)", what),
		func(e scenarios.Event) bool {
			return e.Kind == scenarios.KReady && e.Component == topology.RelayServer && !e.Time.Before(since) && ok(e.Message)
		}, nil)
}

// upgrade rolls the keeper with the next build's flag and waits until a real server with it serves the volume.
func (p *keeperRelayServerPart) upgrade(ctx context.Context) error {
	b := p.b
	flag := scenarios.NextBuildFlag(b.sc.Plugin.Server())
	since := time.Now()
	if err := b.rollRelayServer(ctx, []string{flag}, &scenarios.Event{Source: scenarios.SrcComponent, Component: topology.RelayServer,
		Kind: scenarios.KUpgraded, Detail: flag, Message: fmt.Sprintf("helm upgrade --set keeper.relayServerArgs={%s}: the keeper rolls with the real server's next build", flag)}); err != nil {
		return err
	}
	return b.awaitRelayServer(ctx, since, "with "+flag, func(cmd string) bool { return strings.Contains(cmd, " "+flag+" ") })
}

// keeperRelayGonePart is the keeper's real server when it cannot start: kill rolls the keeper with an argument
// the server refuses, start rolls it back.
type keeperRelayGonePart struct {
	noPart
	b *Backend
}

func newKeeperRelayGonePart(b *Backend, _ *scenarios.Env) (part, error) {
	return &keeperRelayGonePart{b: b}, nil
}

func (g *keeperRelayGonePart) kill(ctx context.Context) error {
	return g.b.rollRelayServer(ctx, []string{refusedArg}, &scenarios.Event{Source: scenarios.SrcComponent, Component: topology.RelayServerGone,
		Kind: scenarios.KKilled, Message: fmt.Sprintf("helm upgrade --set keeper.relayServerArgs={%s}: the keeper rolls with a real server that refuses its arguments", refusedArg)})
}

func (g *keeperRelayGonePart) start(ctx context.Context) error {
	b := g.b
	since := time.Now()
	if err := b.rollRelayServer(ctx, nil, nil); err != nil {
		return err
	}
	if err := b.awaitRelayServer(ctx, since, "without "+refusedArg, func(cmd string) bool { return !strings.Contains(cmd, refusedArg) }); err != nil {
		return err
	}
	b.rec.Add(scenarios.Event{Source: scenarios.SrcComponent, Component: topology.RelayServerGone, Kind: scenarios.KReady,
		Message: "the keeper rolled back: a real server serves the volume again"})
	return nil
}
