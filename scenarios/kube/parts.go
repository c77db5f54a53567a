package kube

import (
	"context"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// A part is one component of a scenario's deployment with its own handler, beside the code that follows it:
// the plugin (plugin.go), the pod's FUSE sidecar (sidecar.go), the keeper and the FUSE server it runs
// (keeper.go), the workload pod (pod.go). Setup builds a part for each node of the scenario's
// topology (scenarios/topology), by its component and holder in partKinds; Kill, Start and Upgrade hand the
// step to the component's part. A new component or mode is a new file with a constructor in partKinds.
type part interface {
	// kill stops it abruptly (its pod deleted, its FUSE server killed); it stays down unless kubelet restarts it.
	kill(ctx context.Context) error
	// start brings it back and waits until it serves.
	start(ctx context.Context) error
	// upgrade rolls it to the next build.
	upgrade(ctx context.Context) error
	// ready waits during Setup, once the plugin serves and kubelet registered it, until the part serves.
	ready(ctx context.Context) error
	// pluginLine and keeperLine read a line of the plugin's or a keeper's log (msg: klog's message) for the
	// events only the part knows of.
	pluginLine(pp *dsPod, msg string, t time.Time)
	keeperLine(kp *dsPod, line []byte, t time.Time)
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
	{Component: topology.RelayProcess, Holder: topology.InPlugin}:       newRelayPart,
	{Component: topology.RelayServer, Holder: topology.InKeeper}:        newKeeperRelayServerPart,
	{Component: topology.RelayProcess, Holder: topology.InKeeper}:       newKeeperRelayPart,
	{Component: topology.RelayServerGone, Holder: topology.InKeeper}:    newKeeperRelayGonePart,
	{Component: topology.WorkloadPod, Holder: topology.InPod}:           newPodPart,
}

// errUnsupported is what a part answers for a step it cannot take.
var errUnsupported = topology.ErrUnsupported

// noPart takes no step, waits for nothing and reads no line; parts embed it for what does not apply to them.
type noPart struct{}

func (noPart) kill(context.Context) error           { return errUnsupported }
func (noPart) start(context.Context) error          { return errUnsupported }
func (noPart) upgrade(context.Context) error        { return errUnsupported }
func (noPart) ready(context.Context) error          { return nil }
func (noPart) pluginLine(*dsPod, string, time.Time) {}
func (noPart) keeperLine(*dsPod, []byte, time.Time) {}

// makeParts builds the scenario's parts from its topology.
func (b *Backend) makeParts(env *scenarios.Env) error {
	var err error
	b.parts, err = topology.Build("kube", b.sc.Plugin.Topology(), partKinds, func(k newPart) (part, error) { return k(b, env) })
	return err
}

// pluginLine hands a line of a plugin pod's log to every part.
func (b *Backend) pluginLine(pp *dsPod, msg string, t time.Time) {
	for _, p := range b.parts.All() {
		p.pluginLine(pp, msg, t)
	}
}

// keeperLine hands a line of a keeper pod's log to every part.
func (b *Backend) keeperLine(kp *dsPod, line []byte, t time.Time) {
	for _, p := range b.parts.All() {
		p.keeperLine(kp, line, t)
	}
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
