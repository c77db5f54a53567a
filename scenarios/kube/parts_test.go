package kube

import (
	"context"
	"strings"
	"testing"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/catalog"
)

// TestParts: every component a catalog scenario's steps act on has its part, a scenario has no part it lacks
// the component of, and a step on a missing component fails before any API call (no cluster needed).
func TestParts(t *testing.T) {
	for _, sc := range catalog.All() {
		if sc.RunsOn(scenarios.BackendKube) != nil {
			continue // a row of the local backend only
		}
		b := New(Options{Repo: t.TempDir(), Image: "example.invalid/dfc:test"})
		b.sc = &sc
		env, err := scenarios.NewEnv(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if err := b.makeParts(env); err != nil {
			t.Fatalf("%s: %v", sc.Name, err)
		}
		for _, c := range sc.Components() {
			if b.parts[c] == nil {
				t.Errorf("%s: its steps act on %s, which has no part", sc.Name, c)
			}
		}
		if _, ok := b.parts[scenarios.SidecarContainer]; ok != (sc.Pod.Sidecar != nil) {
			t.Errorf("%s: a sidecar part %t, a sidecar in the pod %t", sc.Name, ok, sc.Pod.Sidecar != nil)
		}
		// The relay-keeper mode has the keeper mode's keeper (whose servers are relays) and the relay mode's parts.
		relayKeeper := sc.Plugin.FuseMode == scenarios.FuseModeRelayKeeper
		keeper := sc.Plugin.FuseMode == scenarios.FuseModeKeeper || relayKeeper
		if _, ok := b.parts[scenarios.KeeperContainer]; ok != keeper {
			t.Errorf("%s: a keeper part %t, keeper mode %t", sc.Name, ok, keeper)
		}
		// The FUSE server is the keeper's or the plugin's own child; a sidecar's dies with its container; the relay
		// mode's is the relay server part's.
		sidecarMode := sc.Plugin.FuseMode == scenarios.FuseModeSidecar
		relayMode := sc.Plugin.FuseMode == scenarios.FuseModeRelay
		if _, ok := b.parts[scenarios.FuseServer]; ok == (sidecarMode || relayMode) {
			t.Errorf("%s: a %s part %t in fuse mode %q", sc.Name, scenarios.FuseServer, ok, sc.Plugin.FuseMode)
		}
		if sidecarMode {
			if err := b.Kill(context.Background(), scenarios.FuseServer); err == nil || !strings.Contains(err.Error(), "cannot kill fuse-server") {
				t.Errorf("%s: Kill(fuse-server) = %v, want a refusal", sc.Name, err)
			}
		}
		for _, c := range []scenarios.Component{scenarios.RelayServer, scenarios.RelayProcess} {
			if _, ok := b.parts[c]; ok != (relayMode || relayKeeper) {
				t.Errorf("%s: a %s part %t in fuse mode %q", sc.Name, c, ok, sc.Plugin.FuseMode)
			}
		}
		if err := b.Upgrade(context.Background(), scenarios.PluginContainer); err == nil || !strings.Contains(err.Error(), "cannot upgrade plugin") {
			t.Errorf("%s: Upgrade(plugin) = %v, want a refusal", sc.Name, err)
		}
	}
}
