// Package topology says what a scenario's deployment is made of in each FUSE mode of the plugin: its
// components, the process that holds each, which of them holds the volume's FUSE connection, and what a step
// can do to each. It is the only code of the harness that tells one mode from another: the catalog's rows
// name a Topology, Scenario.Validate checks their steps against it, and each backend builds the parts of a
// run from its nodes (Build). The modes themselves are the plugin's: csi-plugin/README.md explains them.
package topology

import (
	"fmt"
	"slices"
	"strings"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/contract"
)

// Holder is the process a component runs in, which dies with it.
type Holder string

// The holders.
const (
	// InPlugin: the plugin container, or a child process of it.
	InPlugin Holder = "plugin"
	// InKeeper: the keeper container (csi-plugin keeper), or a child process of it.
	InKeeper Holder = "keeper"
	// InPod: the workload pod (its containers, its FUSE sidecar).
	InPod Holder = "pod"
	// InDriver: a pod of a driver this project did not write (a driver-agnostic run).
	InDriver Holder = "driver"
)

// Verb is what a step can do to a component.
type Verb string

// The verbs, as scenarios.Action names them.
const (
	Kill    Verb = "kill"
	Start   Verb = "start"
	Upgrade Verb = "upgrade"
)

// Node is one component of a topology.
type Node struct {
	Component Component
	Holder    Holder
	// Verbs are what a step can do to it; none: it is set up and torn down, and steps leave it alone.
	Verbs []Verb
}

// Topology is a deployment of the plugin in one FUSE mode.
type Topology struct {
	// Mode is the plugin's --fuse-mode ("" for a driver this project did not write).
	Mode string
	// HeldBy are the components that hold the volume's FUSE connection open, the first one serving it: the
	// connection (and the mount) ends only when all of them are gone.
	HeldBy []Component
	// ServerGetsFD: the FUSE server serves a connection it did not mount (the plugin mounted it and passed the
	// descriptor), which a server's spec must allow (servesFD). False where a server that cannot mounts its
	// directory itself (child, relay).
	ServerGetsFD bool
	// Fusermount: a server that cannot serve a passed descriptor may still get the connection by asking
	// fusermount for it, which the placement answers (the keeper's stand-in; a server's spec says fusermount).
	Fusermount bool
	// Nodes are its components, in the order a backend sets them up (the pod last).
	Nodes []Node
}

var (
	killStart    = []Verb{Kill, Start}
	killStartUpg = []Verb{Kill, Start, Upgrade}
	plugin       = Node{PluginContainer, InPlugin, killStart}
	pod          = Node{WorkloadPod, InPod, killStart}
)

// The topologies of the plugin's FUSE modes, and of a driver-agnostic run.
var (
	// Child: the FUSE server is a child of the plugin and dies with it.
	Child = &Topology{Mode: contract.ModeChild, HeldBy: []Component{FuseServer},
		Nodes: []Node{plugin, {FuseServer, InPlugin, []Verb{Kill}}, pod}}
	// Sidecar: the pod's sidecar serves the connection the plugin mounted; the server runs in the pod.
	Sidecar = &Topology{Mode: contract.ModeSidecar, HeldBy: []Component{SidecarContainer}, ServerGetsFD: true,
		Nodes: []Node{plugin, {SidecarContainer, InPod, killStart}, pod}}
	// Keeper: the keeper runs the servers; the plugin keeps a copy of every connection.
	Keeper = &Topology{Mode: contract.ModeKeeper, HeldBy: []Component{FuseServer, KeeperContainer, PluginContainer}, ServerGetsFD: true,
		Nodes: []Node{plugin, {KeeperContainer, InKeeper, killStartUpg}, {FuseServer, InKeeper, killStart},
			{FuseSuccessor, InKeeper, killStart}, {FuseCrashLoop, InKeeper, killStart},
			{PluginRecollecting, InPlugin, killStart}, pod}}
	// Relay: the plugin's relay serves the staging path in front of the real server's private mount; both are
	// children of the plugin, which keeps a copy of the staging connection. Any server: one that cannot serve a
	// connection the plugin mounted mounts the private directory itself.
	Relay = &Topology{Mode: contract.ModeRelay, HeldBy: []Component{RelayProcess, PluginContainer},
		Nodes: []Node{plugin, {RelayServer, InPlugin, killStartUpg},
			{RelayServerGone, InPlugin, killStart}, {RelayProcess, InPlugin, killStart}, pod}}
	// RelayKeeper: the relay and the real server run in the keeper; the plugin mounts each backend, hands the
	// keeper its descriptors and keeps a copy of the staging connection.
	RelayKeeper = &Topology{Mode: contract.ModeRelayKeeper, HeldBy: []Component{RelayProcess, KeeperContainer, PluginContainer}, ServerGetsFD: true, Fusermount: true,
		Nodes: []Node{plugin, {KeeperContainer, InKeeper, killStartUpg},
			{RelayServer, InKeeper, killStartUpg}, {RelayServerGone, InKeeper, killStart},
			{RelayProcess, InKeeper, killStart}, pod}}
	// ForeignDriver: a driver this project did not write, seen from outside (kube only): its node plugin pod,
	// its DaemonSet, a process in the pod and its mount pods, whatever holds its connections.
	ForeignDriver = &Topology{
		Nodes: []Node{{DriverPod, InDriver, killStart}, {DriverDaemonSet, InDriver, []Verb{Upgrade}},
			{DriverProcess, InDriver, killStart}, {MountPod, InDriver, killStart}, pod}}
)

// Modes are the plugin's FUSE modes, the default first.
func Modes() []*Topology { return []*Topology{Child, Sidecar, Keeper, Relay, RelayKeeper} }

// Of returns the topology of the plugin's FUSE mode ("" is the plugin's default, child).
func Of(mode string) (*Topology, error) {
	if mode == "" {
		return Child, nil
	}
	for _, t := range Modes() {
		if t.Mode == mode {
			return t, nil
		}
	}
	var names []string
	for _, t := range Modes() {
		names = append(names, t.Mode)
	}
	return nil, fmt.Errorf("unknown FUSE mode %q (known: %s)", mode, strings.Join(names, ", "))
}

// String is the mode's name ("driver" for ForeignDriver).
func (t *Topology) String() string {
	if t.Mode == "" {
		return "driver"
	}
	return t.Mode
}

// Node returns c's node, if t has c.
func (t *Topology) Node(c Component) (Node, bool) {
	i := slices.IndexFunc(t.Nodes, func(n Node) bool { return n.Component == c })
	if i < 0 {
		return Node{}, false
	}
	return t.Nodes[i], true
}

// Has reports whether t has component c.
func (t *Topology) Has(c Component) bool {
	_, ok := t.Node(c)
	return ok
}

// HeldIn reports whether c runs in holder h.
func (t *Topology) HeldIn(c Component, h Holder) bool {
	n, ok := t.Node(c)
	return ok && n.Holder == h
}

// Check says why a step cannot do v to c in t; nil when it can.
func (t *Topology) Check(c Component, v Verb) error {
	if !c.Known() {
		return fmt.Errorf("unknown component %q", c)
	}
	n, ok := t.Node(c)
	if !ok {
		return fmt.Errorf("the %s mode has no %s (%s)", t, c.Noun(), t.modesWith(c))
	}
	if !slices.Contains(n.Verbs, v) {
		return fmt.Errorf("the %s mode's %s cannot be %s", t, c.Noun(), participle(v))
	}
	return nil
}

// modesWith says which modes have c, for Check's error.
func (t *Topology) modesWith(c Component) string {
	var in []string
	for _, m := range append(Modes(), ForeignDriver) {
		if m.Has(c) {
			in = append(in, m.String())
		}
	}
	if len(in) == 0 {
		return "no mode has one"
	}
	return "it is in: " + strings.Join(in, ", ")
}

func participle(v Verb) string {
	switch v {
	case Kill:
		return "killed"
	case Start:
		return "started"
	case Upgrade:
		return "upgraded"
	}
	return string(v) + "ed"
}
