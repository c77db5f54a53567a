package kube

import (
	"fmt"
	"testing"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/contract"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// TestOnKeeperRelayLine: in the relay-keeper mode the keeper's lines about the run's volume become the relay's
// and the real server's events (a relay serving or exiting, a real server serving a backend or exiting); another
// volume's real server, other lines and another mode record nothing.
func TestOnKeeperRelayLine(t *testing.T) {
	const vol = "dfc-relay-keeper-crash-abc123"
	b := New(Options{})
	b.rec = &scenarios.Recorder{}
	b.n = names{volumeHandle: vol}
	b.sc = &scenarios.Scenario{Plugin: scenarios.Plugin{Mode: topology.RelayKeeper}}
	mustMakeParts(t, b)
	kp := &dsPod{name: "dfc-keeper-x"}
	at := time.Date(2026, 11, 26, 22, 0, 0, 0, time.UTC)
	for _, l := range []string{
		"keeper: volume " + vol + ": real server pid 41 serves its backend (/usr/local/bin/gcsfuse /dev/fd/3)",
		"keeper: volume " + vol + ": real server pid 41 exited (signal: killed)",
		"keeper: volume another: real server pid 42 exited (signal: killed)",
		"keeper: " + fmt.Sprintf(contract.KeeperServedFormat, vol, "v1", 57),
		"keeper: " + fmt.Sprintf(contract.KeeperExitedFormat, 57, "signal: killed", vol),
		"keeper: something else",
	} {
		b.keeperLine(kp, []byte(l), at)
	}
	type ev struct {
		c    topology.Component
		kind scenarios.Kind
	}
	var got []ev
	for _, e := range b.rec.Snapshot().Events {
		got = append(got, ev{e.Component, e.Kind})
	}
	want := []ev{
		{topology.RelayServer, scenarios.KReady},
		{topology.RelayServer, scenarios.KExited},
		{topology.RelayProcess, scenarios.KReady},
		{topology.RelayProcess, scenarios.KExited},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("events %+v, want %+v", got, want)
	}

	b.sc = &scenarios.Scenario{Plugin: scenarios.Plugin{Mode: topology.Keeper}}
	mustMakeParts(t, b)
	b.rec = &scenarios.Recorder{}
	b.keeperLine(kp, []byte("keeper: volume "+vol+": real server pid 41 exited (signal: killed)"), at)
	if n := len(b.rec.Snapshot().Events); n != 0 {
		t.Errorf("keeper mode: %d events from a keeper line, want none", n)
	}
}
