package kube

import (
	"testing"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// TestOnRelayLine: the plugin's log lines about the run's volume's relay and real server become their events (an
// exit, a start again), with the pid; lines of another volume, other lines and another mode record nothing.
func TestOnRelayLine(t *testing.T) {
	b := New(Options{})
	b.rec = &scenarios.Recorder{}
	b.n = names{volumeHandle: "dfc-relay-crash-abc123"}
	b.sc = &scenarios.Scenario{Plugin: scenarios.Plugin{Mode: topology.Relay}}
	mustMakeParts(t, b)
	pp := &dsPod{name: "dfc-node-x"}
	at := time.Date(2026, 11, 26, 21, 0, 0, 0, time.UTC)
	for _, l := range []string{
		`"Relay mode: process exited, starting it again" err="signal: killed" what="server" volumeID="dfc-relay-crash-abc123" pid=41 output=""`,
		`"Relay mode: process started again" what="server" volumeID="dfc-relay-crash-abc123" pid=57 after="0s"`,
		`"Relay mode: process started again" what="relay" volumeID="dfc-relay-crash-abc123" pid=58 after="0s"`,
		`"Relay mode: process started again" what="relay" volumeID="another" pid=59 after="0s"`,
		`"FUSE connection served by a relay" volumeID="dfc-relay-crash-abc123" relayPID=12 serverPID=11`,
		`not a structured line`,
	} {
		b.pluginLine(pp, l, at)
	}
	type ev struct {
		c    topology.Component
		kind scenarios.Kind
		msg  string
	}
	var got []ev
	for _, e := range b.rec.Snapshot().Events {
		got = append(got, ev{e.Component, e.Kind, e.Message})
	}
	want := []ev{
		{topology.RelayServer, scenarios.KExited, "pod dfc-node-x: server pid 41: signal: killed"},
		{topology.RelayServer, scenarios.KReady, "pod dfc-node-x: server pid 57, after a pause of 0s"},
		{topology.RelayProcess, scenarios.KReady, "pod dfc-node-x: relay pid 58, after a pause of 0s"},
	}
	if len(got) != len(want) {
		t.Fatalf("events %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("event %d: %+v, want %+v", i, got[i], want[i])
		}
	}

	b.sc = &scenarios.Scenario{Plugin: scenarios.Plugin{Mode: topology.Child}}
	mustMakeParts(t, b)
	b.rec = &scenarios.Recorder{}
	b.pluginLine(pp, `"Relay mode: process started again" what="relay" volumeID="dfc-relay-crash-abc123" pid=58 after="0s"`, at)
	if n := len(b.rec.Snapshot().Events); n != 0 {
		t.Errorf("child mode: %d events from a relay line, want none", n)
	}
}
