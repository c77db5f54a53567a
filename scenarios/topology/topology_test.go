package topology

import (
	"slices"
	"strings"
	"testing"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/fusemode"
)

// TestModesAreThePlugins: the topologies are the plugin's FUSE modes, each found by its name, and an unknown
// name is refused with the known ones.
func TestModesAreThePlugins(t *testing.T) {
	var names []string
	for _, m := range Modes() {
		names = append(names, m.Mode)
		if got, err := Of(m.Mode); err != nil || got != m {
			t.Errorf("Of(%q) = %v, %v", m.Mode, got, err)
		}
	}
	if want := fusemode.Names(); !slices.Equal(slices.Sorted(slices.Values(names)), slices.Sorted(slices.Values(want))) {
		t.Errorf("topologies of %v, the plugin's modes are %v", names, want)
	}
	if got, err := Of(""); err != nil || got != Child {
		t.Errorf("Of(\"\") = %v, %v, want the plugin's default, child", got, err)
	}
	if _, err := Of("remote"); err == nil || !strings.Contains(err.Error(), "relay-keeper") {
		t.Errorf("Of(remote) = %v, want an error that lists the modes", err)
	}
}

// TestTopologiesAreWellFormed: each component once, every one known and with words for each verb it takes,
// the connection's holders among its components, the workload pod last (it is set up after the rest).
func TestTopologiesAreWellFormed(t *testing.T) {
	for _, m := range append(Modes(), ForeignDriver) {
		seen := map[Component]bool{}
		for _, n := range m.Nodes {
			if seen[n.Component] || !n.Component.Known() {
				t.Errorf("%s: component %s twice or unknown", m, n.Component)
			}
			seen[n.Component] = true
			for _, v := range n.Verbs {
				if n.Component.Says(v) == "" {
					t.Errorf("%s: %s takes %s but has no words for it", m, n.Component, v)
				}
			}
		}
		for _, c := range m.HeldBy {
			if !seen[c] {
				t.Errorf("%s: the connection is held by %s, which it lacks", m, c)
			}
		}
		if last := m.Nodes[len(m.Nodes)-1].Component; last != WorkloadPod {
			t.Errorf("%s: the last node is %s, want the workload pod", m, last)
		}
	}
}

// TestCheck: a step is refused on a component the mode lacks (saying which modes have it), with a verb the
// component does not take there, and on an unknown component.
func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		t    *Topology
		c    Component
		v    Verb
		want string
	}{
		{Keeper, KeeperContainer, Upgrade, ""},
		{Child, FuseServer, Kill, ""},
		{Child, FuseServer, Start, "the child mode's FUSE server cannot be started"},
		{Relay, KeeperContainer, Kill, "the relay mode has no keeper container (it is in: keeper, relay-keeper)"},
		{Child, DriverPod, Kill, "it is in: driver"},
		{Child, "kernel", Kill, `unknown component "kernel"`},
	} {
		err := tc.t.Check(tc.c, tc.v)
		if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Check(%s, %s) = %v, want %q", tc.t, tc.c, tc.v, err, tc.want)
		}
	}
}
