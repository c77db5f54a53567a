package kube

import (
	"context"
	"strings"
	"testing"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/catalog"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// mustMakeParts builds b's parts for its scenario.
func mustMakeParts(t *testing.T, b *Backend) {
	t.Helper()
	env, err := scenarios.NewEnv(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := b.makeParts(env); err != nil {
		t.Fatal(err)
	}
}

// TestParts: every component a catalog scenario's steps act on has its part, a scenario has no part its
// topology lacks, and a step on a missing component fails before any API call (no cluster needed).
func TestParts(t *testing.T) {
	for _, sc := range catalog.All() {
		if sc.RunsOn(scenarios.BackendKube) != nil {
			continue // a row of the local backend only
		}
		b := New(Options{Repo: t.TempDir(), Image: "example.invalid/dfc:test"})
		b.sc = &sc
		mustMakeParts(t, b)
		topo := sc.Plugin.Topology()
		for _, c := range sc.Components() {
			if !b.parts.Has(c) {
				t.Errorf("%s: its steps act on %s, which has no part", sc.Name, c)
			}
		}
		for _, c := range []topology.Component{topology.SidecarContainer, topology.KeeperContainer, topology.FuseServer, topology.RelayServer, topology.RelayProcess} {
			if b.parts.Has(c) != topo.Has(c) {
				t.Errorf("%s: a %s part %t, in its %s topology %t", sc.Name, c, b.parts.Has(c), topo, topo.Has(c))
			}
		}
		if err := b.Upgrade(context.Background(), topology.PluginContainer); err == nil || !strings.Contains(err.Error(), "cannot upgrade plugin") {
			t.Errorf("%s: Upgrade(plugin) = %v, want a refusal", sc.Name, err)
		}
	}
}
