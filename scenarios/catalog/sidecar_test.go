package catalog

import (
	"testing"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
)

// TestWithSidecarDelay: a variant of sidecar-late holds its sidecar back by the new delay and expects the wait
// to last that long, without touching the catalog's row.
func TestWithSidecarDelay(t *testing.T) {
	late, err := Lookup("sidecar-late")
	if err != nil {
		t.Fatal(err)
	}
	v, err := WithSidecarDelay(late, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Validate(); err != nil {
		t.Fatal(err)
	}
	if v.Name != "sidecar-late-3s" || v.Pod.Sidecar.Delay != 3*time.Second || late.Pod.Sidecar.Delay != SidecarDelay {
		t.Errorf("variant %s delay %s, the catalog's row's delay %s", v.Name, v.Pod.Sidecar.Delay, late.Pod.Sidecar.Delay)
	}
	found := false
	for i, e := range v.Expect {
		if c, ok := e.Check.(scenarios.BlocksUntilServed); ok {
			found = true
			if c.Delay != 3*time.Second || late.Expect[i].Check.(scenarios.BlocksUntilServed).Delay != SidecarDelay {
				t.Errorf("BlocksUntilServed delay %s (catalog's %s), want 3s", c.Delay, late.Expect[i].Check.(scenarios.BlocksUntilServed).Delay)
			}
		}
	}
	if !found {
		t.Error("the variant expects no wait for the sidecar")
	}
	restart, _ := Lookup("restart")
	if _, err := WithSidecarDelay(restart, time.Second); err == nil {
		t.Error("a pod without a sidecar got a sidecar delay")
	}

	list, err := VarySidecarDelay([]scenarios.Scenario{restart, late}, []time.Duration{0, time.Second})
	if err != nil || len(list) != 3 || list[0].Name != "restart" || list[1].Name != "sidecar-late-0s" || list[2].Name != "sidecar-late-1s" {
		t.Errorf("VarySidecarDelay = %v, %v", nameList(list), err)
	}
	if _, err := VarySidecarDelay([]scenarios.Scenario{restart}, []time.Duration{0}); err == nil {
		t.Error("no scenario to vary is no error")
	}
	if ds, err := ParseDelays("0s, 1s,2.5s"); err != nil || len(ds) != 3 || ds[2] != 2500*time.Millisecond {
		t.Errorf("ParseDelays = %v, %v", ds, err)
	}
	for _, bad := range []string{"", "-1s", "x"} {
		if _, err := ParseDelays(bad); err == nil {
			t.Errorf("ParseDelays(%q) accepted", bad)
		}
	}
}

func nameList(l []scenarios.Scenario) []string {
	var out []string
	for _, s := range l {
		out = append(out, s.Name)
	}
	return out
}
