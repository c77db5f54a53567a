package kube

import (
	"context"
	"errors"
	"fmt"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
)

// A part is one component of a scenario's deployment with its own handler, beside the code that follows it:
// the plugin (plugin.go), the pod's FUSE sidecar (sidecar.go), the keeper and the FUSE server it runs
// (keeper.go), the workload pod (pod.go). Setup asks each constructor of partKinds for the scenario's part;
// Kill, Start and Upgrade hand the step to the component's part. A new component, or a new kind of FUSE
// server, is a new file with a constructor in partKinds; nothing else changes.
type part interface {
	// kill stops it abruptly (its pod deleted, its FUSE server killed); it stays down unless kubelet restarts it.
	kill(ctx context.Context) error
	// start brings it back and waits until it serves.
	start(ctx context.Context) error
	// upgrade rolls it to the next build.
	upgrade(ctx context.Context) error
	// ready waits during Setup, once the plugin serves and kubelet registered it, until the part serves.
	ready(ctx context.Context) error
}

// partKinds are the constructors of the parts, in Setup's order; each returns nil when the scenario has no such
// component. A constructor may open the part's log in the run dir.
func partKinds() []struct {
	component scenarios.Component
	new       func(b *Backend, env *scenarios.Env) (part, error)
} {
	return []struct {
		component scenarios.Component
		new       func(b *Backend, env *scenarios.Env) (part, error)
	}{
		{scenarios.PluginContainer, newPluginPart},
		{scenarios.SidecarContainer, newSidecarPart},
		{scenarios.KeeperContainer, newKeeperPart},
		{scenarios.FuseServer, newKeeperServerPart},
		{scenarios.FuseServer, newChildServerPart},
		{scenarios.FuseSuccessor, newSuccessorPart},
		{scenarios.FuseCrashLoop, newCrashLoopPart},
		{scenarios.PluginRecollecting, newRecollectPart},
		{scenarios.RelayServer, newRelayServerPart},
		{scenarios.RelayProcess, newRelayPart},
		{scenarios.RelayServer, newKeeperRelayServerPart},
		{scenarios.RelayProcess, newKeeperRelayPart},
		{scenarios.RelayServerGone, newKeeperRelayGonePart},
		{scenarios.WorkloadPod, newPodPart},
	}
}

// errUnsupported is what a part answers for a step it cannot take.
var errUnsupported = errors.New("unsupported")

// noPart takes no step and waits for nothing; parts embed it for what does not apply to them.
type noPart struct{}

func (noPart) kill(context.Context) error    { return errUnsupported }
func (noPart) start(context.Context) error   { return errUnsupported }
func (noPart) upgrade(context.Context) error { return errUnsupported }
func (noPart) ready(context.Context) error   { return nil }

// makeParts builds the scenario's parts.
func (b *Backend) makeParts(env *scenarios.Env) error {
	b.parts = map[scenarios.Component]part{}
	for _, k := range partKinds() {
		p, err := k.new(b, env)
		if err != nil {
			return err
		}
		if p == nil {
			continue
		}
		// Two kinds of one component (a FUSE server of two modes) must not both claim a scenario.
		if _, dup := b.parts[k.component]; dup {
			return fmt.Errorf("kube backend: two parts for %s", k.component)
		}
		b.parts[k.component] = p
		b.order = append(b.order, p)
	}
	return nil
}

// step hands the action on component c to its part.
func (b *Backend) step(c scenarios.Component, verb string, do func(part) error) error {
	if p, ok := b.parts[c]; ok {
		if err := do(p); !errors.Is(err, errUnsupported) {
			return err
		}
	}
	return fmt.Errorf("kube backend: cannot %s %s", verb, c)
}

// Kill implements scenarios.Backend.
func (b *Backend) Kill(ctx context.Context, c scenarios.Component) error {
	return b.step(c, "kill", func(p part) error { return p.kill(ctx) })
}

// Start implements scenarios.Backend.
func (b *Backend) Start(ctx context.Context, c scenarios.Component) error {
	return b.step(c, "start", func(p part) error { return p.start(ctx) })
}

// Upgrade implements scenarios.Backend.
func (b *Backend) Upgrade(ctx context.Context, c scenarios.Component) error {
	return b.step(c, "upgrade", func(p part) error { return p.upgrade(ctx) })
}
