package local

import (
	"context"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// A part is one component of a scenario's deployment with its own handler, in a file of its own: the plugin
// container (plugin.go), the pod's FUSE sidecar (sidecar.go), the keeper and the FUSE server it runs
// (keeper.go), the workload pod (pod.go). Setup builds a part for each node of the scenario's
// topology (scenarios/topology), by its component and holder in partKinds; Kill, Start and Upgrade hand the
// step to the component's part, and the pod's life and the teardown call every part in that order. A new
// component or mode is a new file with a constructor in partKinds; nothing else changes.
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

// newPart makes a part for the run.
type newPart func(b *Backend, env *scenarios.Env) (part, error)

// partKinds are the parts this backend plays each node of a topology with, by component and holder.
var partKinds = map[topology.Key]newPart{
	{Component: topology.PluginContainer, Holder: topology.InPlugin}:    newPluginPart,
	{Component: topology.FuseServer, Holder: topology.InPlugin}:         newChildServerPart,
	{Component: topology.SidecarContainer, Holder: topology.InPod}:      newSidecarPart,
	{Component: topology.KeeperContainer, Holder: topology.InKeeper}:    newKeeperPart,
	{Component: topology.FuseServer, Holder: topology.InKeeper}:         newKeeperServerPart,
	{Component: topology.FuseSuccessor, Holder: topology.InKeeper}:      newSuccessorPart,
	{Component: topology.FuseCrashLoop, Holder: topology.InKeeper}:      newCrashLoopPart,
	{Component: topology.PluginRecollecting, Holder: topology.InPlugin}: newRecollectPart,
	{Component: topology.RelayServer, Holder: topology.InPlugin}:        newRelayServerPart,
	{Component: topology.RelayServer, Holder: topology.InKeeper}:        newRelayServerPart,
	{Component: topology.RelayServerGone, Holder: topology.InPlugin}:    newRelayGonePart,
	{Component: topology.RelayServerGone, Holder: topology.InKeeper}:    newRelayGonePart,
	{Component: topology.RelayProcess, Holder: topology.InPlugin}:       newRelayPart,
	{Component: topology.RelayProcess, Holder: topology.InKeeper}:       newKeptRelayPart,
	{Component: topology.WorkloadPod, Holder: topology.InPod}:           newPodPart,
}

// peers are the parts (and the server program) that other parts reach, each set once, by its constructor.
type peers struct {
	server      *server          // the run's FUSE server program, made before any part
	sidecar     *sidecarCtr      // the sidecar mode
	keeper      *keeperPart      // the modes with a keeper
	relayServer *relayServerPart // the relay modes
}

// errUnsupported is what a part answers for a step it cannot take.
var errUnsupported = topology.ErrUnsupported

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

// makeParts builds the scenario's parts from its topology; the logs they open come after the backend's own, in
// the topology's order.
func (b *Backend) makeParts(env *scenarios.Env) error {
	var err error
	b.parts, err = topology.Build("local", b.sc.Plugin.Topology(), partKinds, func(k newPart) (part, error) { return k(b, env) })
	return err
}

// Kill implements scenarios.Backend.
func (b *Backend) Kill(ctx context.Context, c topology.Component) error {
	return b.parts.Step(c, topology.Kill, func(p part) error { return p.kill(ctx) })
}

// Start implements scenarios.Backend.
func (b *Backend) Start(ctx context.Context, c topology.Component) error {
	return b.parts.Step(c, topology.Start, func(p part) error { return p.start(ctx) })
}

// Upgrade implements scenarios.Backend.
func (b *Backend) Upgrade(ctx context.Context, c topology.Component) error {
	return b.parts.Step(c, topology.Upgrade, func(p part) error { return p.upgrade(ctx) })
}
