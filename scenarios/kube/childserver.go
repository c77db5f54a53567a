package kube

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// serverCrash is the command that signals the FUSE servers of the container it runs in, whose PID 1 is
// csi-plugin (csi-plugin/sidecar.Crash): the image has no shell and no kill.
const serverCrash = "server-crash"

// childServerPart is the plugin's own FUSE server in the child mode, the plugin container's child that serves
// the volume. It is killed as the local backend kills it: stopped, three read intervals for a read to reach it
// and wait inside it, then SIGKILL (a crash under load); the plugin lives on.
type childServerPart struct {
	noPart
	b *Backend
}

func newChildServerPart(b *Backend, _ *scenarios.Env) (part, error) {
	return &childServerPart{b: b}, nil
}

func (p *childServerPart) kill(ctx context.Context) error {
	b := p.b
	pp, _ := b.runningPod(b.plugins)
	if pp == nil {
		return fmt.Errorf("no running plugin pod on node %s", b.node)
	}
	if err := b.serverCrash(ctx, pp.name, "--stop"); err != nil {
		return err
	}
	wait := 3 * b.Timing().ReadInterval
	b.progress("FUSE server stopped; SIGKILL in %s, with a read inside it", wait)
	if err := scenarios.Sleep(ctx, wait); err != nil {
		return err
	}
	b.rec.Add(scenarios.Event{Source: scenarios.SrcComponent, Component: topology.FuseServer, Kind: scenarios.KKilled,
		Message: fmt.Sprintf("exec csi-plugin %s in pod %s: SIGKILL of the plugin's FUSE server, stopped for %s with a read inside it", serverCrash, pp.name, wait)})
	return b.serverCrash(ctx, pp.name)
}

// serverCrash executes `csi-plugin server-crash [args]` in the plugin container of pod: SIGKILL (--stop:
// SIGSTOP) of the plugin's children that args pick (all without --with-arg/--without-arg).
func (b *Backend) serverCrash(ctx context.Context, pod string, args ...string) error {
	return b.serverCrashIn(ctx, pod, pluginContainer, args...)
}

// serverCrashIn is serverCrash in container of pod (the relay-keeper mode's keeper runs the real servers).
func (b *Backend) serverCrashIn(ctx context.Context, pod, container string, args ...string) error {
	cmd := append([]string{"/usr/local/bin/csi-plugin", serverCrash}, args...)
	ectx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := b.exec(ectx, pod, container, cmd)
	out = strings.TrimSpace(out)
	b.logf("exec %s in %s: %q, %v", strings.Join(cmd, " "), pod, out, err)
	if err != nil {
		return fmt.Errorf("exec %s in pod %s: %s: %w", strings.Join(cmd, " "), pod, out, err)
	}
	b.progress("%s", out)
	return nil
}
