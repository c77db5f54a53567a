package local

import (
	"context"
	"errors"
	"fmt"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
)

// A part is one component of a scenario's deployment with its own handler, in a file of its own: the plugin
// container (plugin.go), the pod's FUSE sidecar (sidecar.go), the keeper and the FUSE server it runs
// (keeper.go), the workload pod (pod.go). Setup asks each constructor of partKinds for the scenario's part;
// Kill, Start and Upgrade hand the step to the component's part, and the pod's life and the teardown call
// every part in that order. A new component, or a new kind of FUSE server, is a new file with a constructor
// in partKinds; nothing else changes.
type part interface {
	// kill stops it abruptly (SIGKILL); it stays down unless kubelet restarts it by itself.
	kill(ctx context.Context) error
	// start starts it again with the same configuration and state, and waits until it serves.
	start(ctx context.Context) error
	// upgrade rolls it to the next build: the new one beside the old, then the old stops.
	upgrade(ctx context.Context) error
	// pluginArgs are the plugin's flags this part needs.
	pluginArgs() []string
	// deploy starts it during Setup, once the plugin serves and before the pod.
	deploy(ctx context.Context) error
	// podPrepare runs for each new pod before its volume is published, podStart before its containers start
	// (podCtx ends with the pod), podStop when the pod's containers have stopped (logPrefix begins its lines).
	podPrepare() error
	podStart(podCtx context.Context) error
	podStop(logPrefix string) error
	// teardown stops it at Stop, once the pod is gone.
	teardown() error
	// procs lists the processes it started that it still knows of, with a line for --keep's note each.
	procs() []knownProc
}

// knownProc is a process a part started, and how --keep's note presents it.
type knownProc struct {
	p    *proc
	note string
}

// partKinds are the constructors of the parts, in the order of the pod's life and the teardown (the plugin
// first); each returns nil when the scenario has no such component.
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
		{scenarios.FuseSuccessor, newSuccessorPart},
		{scenarios.FuseCrashLoop, newCrashLoopPart},
		{scenarios.PluginRecollecting, newRecollectPart},
		{scenarios.FuseServer, newServerPart},
		{scenarios.RelayServer, newRelayServerPart},
		{scenarios.RelayServerGone, newRelayGonePart},
		{scenarios.RelayProcess, newRelayPart},
		{scenarios.WorkloadPod, newPodPart},
	}
}

// errUnsupported is what a part answers for a step it cannot take.
var errUnsupported = errors.New("unsupported")

// noPart is a part that takes no step and has nothing to do at any time; parts embed it for what does not
// apply to them.
type noPart struct{}

func (noPart) kill(context.Context) error     { return errUnsupported }
func (noPart) start(context.Context) error    { return errUnsupported }
func (noPart) upgrade(context.Context) error  { return errUnsupported }
func (noPart) pluginArgs() []string           { return nil }
func (noPart) deploy(context.Context) error   { return nil }
func (noPart) podPrepare() error              { return nil }
func (noPart) podStart(context.Context) error { return nil }
func (noPart) podStop(string) error           { return nil }
func (noPart) teardown() error                { return nil }
func (noPart) procs() []knownProc             { return nil }

// makeParts builds the scenario's parts; the logs they open come after the backend's own, in partKinds' order.
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
			return fmt.Errorf("local backend: two parts for %s", k.component)
		}
		b.parts[k.component] = p
		b.order = append(b.order, p)
	}
	return nil
}

// step hands the action on component c to its part.
func (b *Backend) step(c scenarios.Component, verb string, do func(part) error) error {
	p, ok := b.parts[c]
	if !ok {
		return fmt.Errorf("local backend: cannot %s %s: the scenario has none", verb, c)
	}
	if err := do(p); !errors.Is(err, errUnsupported) {
		return err
	}
	return fmt.Errorf("local backend: cannot %s %s", verb, c)
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
