package local

import (
	"context"
	"strings"
	"testing"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/catalog"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// TestParts: every node of a catalog scenario's topology that steps can act on has its part, a scenario has
// no part its topology lacks, the parts that others reach are set, and a step on a missing component fails
// without touching anything (no root needed).
func TestParts(t *testing.T) {
	for _, sc := range catalog.All() {
		b := New(Options{})
		b.sc = &sc
		env, err := scenarios.NewEnv(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if b.peers.server, err = newServer(b, env); err != nil {
			t.Fatal(err)
		}
		if err := b.makeParts(env); err != nil {
			t.Fatalf("%s: %v", sc.Name, err)
		}
		topo := sc.Plugin.Topology()
		for _, c := range sc.Components() {
			if !b.parts.Has(c) {
				t.Errorf("%s: its steps act on %s, which has no part", sc.Name, c)
			}
		}
		for _, c := range []topology.Component{topology.SidecarContainer, topology.KeeperContainer, topology.FuseServer, topology.RelayServer} {
			if b.parts.Has(c) != topo.Has(c) {
				t.Errorf("%s: a %s part %t, in its %s topology %t", sc.Name, c, b.parts.Has(c), topo, topo.Has(c))
			}
		}
		if (b.peers.keeper != nil) != topo.Has(topology.KeeperContainer) || (b.peers.relayServer != nil) != topo.Has(topology.RelayServer) ||
			(b.peers.sidecar != nil) != topo.Has(topology.SidecarContainer) {
			t.Errorf("%s: peers %+v in the %s mode", sc.Name, b.peers, topo)
		}
		if b.peers.relayServer != nil && (b.peers.relayServer.keeper != nil) != topo.HeldIn(topology.RelayServer, topology.InKeeper) {
			t.Errorf("%s: the relay server part's keeper %v in the %s mode", sc.Name, b.peers.relayServer.keeper, topo)
		}
		if err := b.Upgrade(context.Background(), topology.PluginContainer); err == nil || !strings.Contains(err.Error(), "cannot upgrade plugin") {
			t.Errorf("%s: Upgrade(plugin) = %v, want a refusal", sc.Name, err)
		}
		b.closeLogs()
	}
}

// fakePart records the steps it is handed.
type fakePart struct {
	noPart
	steps *[]string
}

func (f fakePart) kill(context.Context) error  { *f.steps = append(*f.steps, "kill"); return nil }
func (f fakePart) start(context.Context) error { *f.steps = append(*f.steps, "start"); return nil }

// TestANewModeIsATopologyAndItsParts: a sixth mode, here one whose relay runs in the workload's pod, takes no
// more than its topology and a part for the node no backend had: the scenario validates, the backend builds it
// and hands its steps to that part.
func TestANewModeIsATopologyAndItsParts(t *testing.T) {
	podRelay := &topology.Topology{Mode: "pod-relay", HeldBy: []topology.Component{topology.RelayProcess},
		Nodes: []topology.Node{{Component: topology.PluginContainer, Holder: topology.InPlugin, Verbs: []topology.Verb{topology.Kill, topology.Start}},
			{Component: topology.RelayProcess, Holder: topology.InPod, Verbs: []topology.Verb{topology.Kill, topology.Start}}}}
	var steps []string
	key := topology.Key{Component: topology.RelayProcess, Holder: topology.InPod}
	partKinds[key] = func(*Backend, *scenarios.Env) (part, error) { return fakePart{steps: &steps}, nil }
	defer delete(partKinds, key)

	sc := catalog.All()[0]
	sc.Plugin.Mode = podRelay
	sc.Steps = []scenarios.Step{scenarios.Kill(topology.RelayProcess), scenarios.Start(topology.RelayProcess)}
	if err := sc.Validate(); err != nil {
		t.Fatalf("a scenario of the new mode: %v", err)
	}
	sc.Steps = []scenarios.Step{scenarios.Kill(topology.KeeperContainer)}
	if err := sc.Validate(); err == nil || !strings.Contains(err.Error(), "pod-relay mode has no keeper container") {
		t.Errorf("a keeper step in the new mode: %v, want a refusal that names the mode", err)
	}
	b := New(Options{})
	b.sc = &sc
	env, err := scenarios.NewEnv(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer b.closeLogs()
	if err := b.makeParts(env); err != nil {
		t.Fatal(err)
	}
	if err := b.Kill(context.Background(), topology.RelayProcess); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background(), topology.RelayProcess); err != nil {
		t.Fatal(err)
	}
	if strings.Join(steps, ",") != "kill,start" {
		t.Errorf("the new mode's part was handed %v, want kill,start", steps)
	}
	delete(partKinds, key)
	if err := b.makeParts(env); err != nil {
		t.Fatal(err)
	}
	if err := b.Kill(context.Background(), topology.RelayProcess); err == nil || !strings.Contains(err.Error(), "no part plays the relay in the pod") {
		t.Errorf("a step on a node no part plays: %v, want an error that names it", err)
	}
}
