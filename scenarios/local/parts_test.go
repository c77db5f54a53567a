package local

import (
	"context"
	"strings"
	"testing"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/catalog"
)

// TestParts: every component a catalog scenario's steps act on has its part, a scenario has no part it lacks
// the component of, and a step on a missing component fails without touching anything (no root needed).
func TestParts(t *testing.T) {
	for _, sc := range catalog.All() {
		b := New(Options{})
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
		keeper := sc.Plugin.HasKeeper()
		if _, ok := b.parts[scenarios.KeeperContainer]; ok != keeper {
			t.Errorf("%s: a keeper part %t, a mode with a keeper %t", sc.Name, ok, keeper)
		}
		// Every mode has a FUSE server part: the keeper's servers, or the server the plugin or a sidecar runs.
		if _, ok := b.parts[scenarios.FuseServer]; !ok {
			t.Errorf("%s: no fuse-server part", sc.Name)
		}
		// The keeper mode's server is the keeper's dummy-fuse; the relay-keeper mode's is the real one.
		_, ownServer := b.parts[scenarios.FuseServer].(*serverPart)
		if keeperMode := sc.Plugin.FuseMode == scenarios.FuseModeKeeper; ownServer == keeperMode {
			t.Errorf("%s: the real server part %t in keeper mode %t", sc.Name, ownServer, keeperMode)
		}
		if sc.Plugin.FuseMode == scenarios.FuseModeSidecar {
			if err := b.Kill(context.Background(), scenarios.FuseServer); err == nil || !strings.Contains(err.Error(), "cannot kill fuse-server") {
				t.Errorf("%s: Kill(fuse-server) in the sidecar mode = %v, want a refusal (the sidecar is what dies)", sc.Name, err)
			}
		}
		if err := b.Upgrade(context.Background(), scenarios.PluginContainer); err == nil || !strings.Contains(err.Error(), "cannot upgrade plugin") {
			t.Errorf("%s: Upgrade(plugin) = %v, want a refusal", sc.Name, err)
		}
		b.closeLogs()
	}
}
