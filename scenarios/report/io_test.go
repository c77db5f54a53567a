package report

import (
	"encoding/json"
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
	got := ioOutcomes(ev, scenarios.Scenario{Pod: scenarios.Pod{Containers: cs}})
	want := []IOOutcome{
		{Kind: IOKeptFD, Container: "reader", ReadsBefore: 1, FirstError: "ENOTCONN", FaultToFirstError: 0.2, Errors: 1, Stall: 400},
		{Kind: IONewOpen, Container: "reopen", ReadsBefore: 1, FirstError: "ENOTCONN", FaultToFirstError: 0.6, Errors: 1, Stall: 5, FaultToGood: 2.5},
		{Kind: IOSubPath, Container: "sub", FirstError: "start failed", FaultToFirstError: 3, Errors: 1, StartFailures: 1},
		{Kind: IOStat, ReadsBefore: 1, FirstError: "ENOTCONN", FaultToFirstError: 0.5, Errors: 1, FaultToGood: 2, Gap: 1500},
		{Kind: IOInFlight, Container: "reader", FirstError: "ENOTCONN", FaultToFirstError: 0.2, Stall: 400},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d outcomes %+v, want %d", len(got), got, len(want))
	}
	near := func(a, b float64) bool { return a-b < 1e-6 && b-a < 1e-6 }
	for i := range want {
		g, w := got[i], want[i]
		if g.Kind != w.Kind || g.Container != w.Container || g.FirstError != w.FirstError || g.ReadsBefore != w.ReadsBefore ||
			g.Errors != w.Errors || g.StartFailures != w.StartFailures || (g.Kind == IOStat && !near(g.Gap, w.Gap)) ||
			!near(g.FaultToFirstError, w.FaultToFirstError) || !near(g.Stall, w.Stall) || !near(g.FaultToGood, w.FaultToGood) {
			t.Errorf("outcome %d: got %+v, want %+v", i, g, w)
		}
	}
	ev.Events = ev.Events[:3] // nothing killed: nothing to measure
	if got := ioOutcomes(ev, scenarios.Scenario{Pod: scenarios.Pod{Containers: cs}}); got != nil {
		t.Errorf("without a kill: got %+v, want nil", got)
	}
}

// TestIOOutcomeJSON: records written before the catalog's outcomes and the profile shared IOOutcome read as
// they meant: a catalog run's kill_to_… times, and a profile's errno, recovery and its stall_ms as the gap (its
// longest time without a good read); a new record writes the one set of names and reads back the same.
func TestIOOutcomeJSON(t *testing.T) {
	for _, tc := range []struct {
		name, json string
		want       IOOutcome
	}{
		{"catalog", `{"kind":"kept-fd","container":"reader","first_error":"ENOTCONN","kill_to_first_error_s":0.8,"stall_ms":3.5,"kill_to_good_s":2.5}`,
			IOOutcome{Kind: IOKeptFD, Container: "reader", FirstError: "ENOTCONN", FaultToFirstError: 0.8, Stall: 3.5, FaultToGood: 2.5}},
		{"profile, failed", `{"kind":"stat","reads_before":1,"failed":true,"first_errno":"ENOTCONN","fault_to_first_error_s":0.85,"errors":1,
			"recovered":true,"fault_to_good_read_s":1.95,"stall_ms":1097,"restarts":2,"start_failures":1}`,
			IOOutcome{Kind: IOStat, ReadsBefore: 1, FirstError: "ENOTCONN", FaultToFirstError: 0.85, Errors: 1, FaultToGood: 1.95, Gap: 1097, Restarts: 2, StartFailures: 1}},
		{"profile, no failure", `{"kind":"new-open","reads_before":3,"failed":false,"errors":0,"recovered":true,"fault_to_good_read_s":0.6,"stall_ms":1029}`,
			IOOutcome{Kind: IONewOpen, ReadsBefore: 3, Gap: 1029}},
	} {
		var got IOOutcome
		if err := json.Unmarshal([]byte(tc.json), &got); err != nil || got != tc.want {
			t.Errorf("%s: got %+v (%v), want %+v", tc.name, got, err, tc.want)
		}
	}
	o := IOOutcome{Kind: IOSubPath, Container: "sub", ReadsBefore: 4, FirstError: "start failed", FaultToFirstError: 3, Errors: 2,
		FaultToGood: 9, Stall: 1.5, Gap: 6000, Restarts: 1, StartFailures: 2}
	b, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"kind":"subpath","container":"sub","reads_before":4,"first_error":"start failed","fault_to_first_error_s":3,"errors":2,` +
		`"fault_to_good_s":9,"stall_ms":1.5,"gap_ms":6000,"restarts":1,"start_failures":2}`
	if string(b) != want {
		t.Errorf("written as\n%s\nwant\n%s", b, want)
	}
	var back IOOutcome
	if err := json.Unmarshal(b, &back); err != nil || back != o {
		t.Errorf("read back %+v (%v), want %+v", back, err, o)
	}
}
