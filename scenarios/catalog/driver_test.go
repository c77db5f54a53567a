package catalog

import (
	"slices"
	"testing"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
)

func TestDrivers(t *testing.T) {
	for _, s := range Drivers() {
		if err := s.Validate(); err != nil {
			t.Error(err)
		}
		if !s.Measured || s.RunsOn(scenarios.BackendLocal) == nil || s.RunsOn(scenarios.BackendKube) != nil {
			t.Errorf("%s: want a measured row for the kube backend only", s.Name)
		}
		if slices.Contains(Names(), s.Name) {
			t.Errorf("%s is in All: the chart's catalog would run it without a driver", s.Name)
		}
		var names []string
		for _, c := range s.Pod.Containers {
			names = append(names, c.Name)
		}
		if !slices.Equal(names, DriverContainers) {
			t.Errorf("%s: containers %v, want the I/O kinds %v", s.Name, names, DriverContainers)
		}
	}
	if _, err := SelectDrivers([]string{"restart"}); err == nil {
		t.Error("a chart row selected as a driver-agnostic one")
	}
}

func TestReadsOK(t *testing.T) {
	t0 := time.Now()
	ev := &scenarios.Evidence{Events: []scenarios.Event{
		{Time: t0, Source: scenarios.SrcWorkload, Kind: scenarios.KRead, Container: "a", Content: "anything"},
		{Time: t0, Source: scenarios.SrcWorkload, Kind: scenarios.KRead, Container: "a", Content: "else"},
		{Time: t0, Source: scenarios.SrcWorkload, Kind: scenarios.KReadError, Container: "b", Errno: "EIO"},
		{Time: t0, Source: scenarios.SrcWorkload, Kind: scenarios.KRead, Container: "b"},
	}}
	if r := (ReadsOK{Cs: []string{"a", "b"}, N: 2}).Eval(ev, scenarios.Timing{}); r.OK {
		t.Errorf("b read once, yet %s", r.Why)
	}
	if r := (ReadsOK{Cs: []string{"a"}, N: 2}).Eval(ev, scenarios.Timing{}); !r.OK {
		t.Errorf("a read twice (any content), yet %s", r.Why)
	}
	if r := (ReadsOK{Cs: []string{"a", "c"}, N: 1}).Eval(ev, scenarios.Timing{}); r.OK {
		t.Errorf("c never logged, yet %s", r.Why)
	}
	if r := (ReadsOK{N: 1}).Eval(ev, scenarios.Timing{}); r.OK {
		t.Error("no container to check, yet OK")
	}
}
