package report

import (
	"testing"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

func TestIOOutcomes(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	good := func(c string, s float64, lat time.Duration) scenarios.Event {
		return scenarios.Event{Time: at(s), Source: scenarios.SrcWorkload, Kind: scenarios.KRead, Container: c, Content: scenarios.Content, Latency: lat}
	}
	bad := func(c string, s float64, lat time.Duration) scenarios.Event {
		return scenarios.Event{Time: at(s), Source: scenarios.SrcWorkload, Kind: scenarios.KReadError, Container: c, Errno: "ENOTCONN", Latency: lat}
	}
	probe := func(s float64, errno string) scenarios.Event {
		return scenarios.Event{Time: at(s), Source: scenarios.SrcProbe, Kind: scenarios.KProbe, Path: scenarios.PathVolume, Errno: errno}
	}
	ev := &scenarios.Evidence{Start: t0, Events: []scenarios.Event{
		good("reader", 0.5, time.Millisecond), good("reopen", 0.5, time.Millisecond), probe(0.5, ""),
		{Time: at(1), Source: scenarios.SrcComponent, Kind: scenarios.KKilled, Component: topology.PluginContainer},
		bad("reader", 1.2, 400*time.Millisecond), // began at 0.8: in flight at the kill
		probe(1.5, "ENOTCONN"), bad("reopen", 1.6, 2*time.Millisecond),
		probe(3, ""), good("reopen", 3.5, 5*time.Millisecond),
		{Time: at(4), Source: scenarios.SrcKubelet, Kind: scenarios.KStartFailed, Container: "sub"},
	}}
	cs := []scenarios.Container{{Name: "reader", KeepOpen: true}, {Name: "reopen"}, {Name: "sub", SubPath: "file"}}
	got := ioOutcomes(ev, cs)
	want := []IOOutcome{
		{Kind: IOKeptFD, Container: "reader", FirstError: "ENOTCONN", KillToFirstError: 0.2, Stall: 400},
		{Kind: IONewOpen, Container: "reopen", FirstError: "ENOTCONN", KillToFirstError: 0.6, Stall: 5, KillToGood: 2.5},
		{Kind: IOSubPath, Container: "sub", FirstError: "start failed", KillToFirstError: 3},
		{Kind: IOStat, FirstError: "ENOTCONN", KillToFirstError: 0.5, KillToGood: 2},
		{Kind: IOInFlight, Container: "reader", FirstError: "ENOTCONN", KillToFirstError: 0.2, Stall: 400},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d outcomes %+v, want %d", len(got), got, len(want))
	}
	near := func(a, b float64) bool { return a-b < 1e-6 && b-a < 1e-6 }
	for i := range want {
		g, w := got[i], want[i]
		if g.Kind != w.Kind || g.Container != w.Container || g.FirstError != w.FirstError ||
			!near(g.KillToFirstError, w.KillToFirstError) || !near(g.Stall, w.Stall) || !near(g.KillToGood, w.KillToGood) {
			t.Errorf("outcome %d: got %+v, want %+v", i, g, w)
		}
	}
	ev.Events = ev.Events[:3] // nothing killed: nothing to measure
	if got := ioOutcomes(ev, cs); got != nil {
		t.Errorf("without a kill: got %+v, want nil", got)
	}
}
