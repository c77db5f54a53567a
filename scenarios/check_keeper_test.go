package scenarios

import (
	"strings"
	"testing"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// keeperStory: a reader reads every 200 ms through a keeper-mode mount (each read takes 100 ms: read_start,
// then read). The FUSE server is killed at 1.05 s, inside the read that began at 1.0 s; with resent, the
// successor answers it at 1.25 s, otherwise it fails with ECONNABORTED.
func keeperStory(resent bool) *Evidence {
	s := newStory()
	s.at(0, Event{Source: SrcKubelet, Kind: KContainerStarted, Container: reader})
	for ms := 200; ms <= 2000; ms += 200 {
		s.at(ms, Event{Source: SrcWorkload, Kind: KReadStart, Container: reader})
		end := ms + 100
		if ms == 1000 {
			end = 1250
			if !resent {
				s.at(end, Event{Source: SrcWorkload, Kind: KReadError, Container: reader, Errno: "ECONNABORTED", Latency: 250 * time.Millisecond})
				continue
			}
		}
		s.at(end, Event{Source: SrcWorkload, Kind: KRead, Container: reader, Content: Content, Latency: time.Duration(end-ms) * time.Millisecond})
	}
	s.at(1050, Event{Source: SrcComponent, Component: topology.FuseServer, Kind: KKilled})
	s.at(1200, Event{Source: SrcComponent, Component: topology.FuseServer, Kind: KReady, Detail: "v1"})
	return s.until(2200).ev
}

// upgradeStory: the keeper is upgraded to v2 at 1 s; with served, a v2 server serves at 1.1 s; with exited,
// the old keeper exits at 1.2 s.
func upgradeStory(served, exited bool) *Evidence {
	s := newStory()
	s.at(0, Event{Source: SrcComponent, Component: topology.FuseServer, Kind: KReady, Detail: "v1"})
	s.at(1000, Event{Source: SrcComponent, Component: topology.KeeperContainer, Kind: KUpgraded, Detail: "v2"})
	s.at(1050, Event{Source: SrcComponent, Component: topology.FuseServer, Kind: KReady, Detail: "v1"}) // an old server, again
	if served {
		s.at(1100, Event{Source: SrcComponent, Component: topology.FuseServer, Kind: KReady, Detail: "v2"})
	}
	if exited {
		s.at(1200, Event{Source: SrcComponent, Component: topology.KeeperContainer, Kind: KExited, Message: "exit status 0"})
	}
	return s.until(2000).ev
}

func TestKeeperChecks(t *testing.T) {
	tm := Timing{ReadInterval: 200 * time.Millisecond, BackoffBase: 500 * time.Millisecond}
	inFlight := func(at int) *Evidence { // the reader's log up to at ms
		ev := keeperStory(true)
		var keep []Event
		for _, e := range ev.Events {
			if e.Time.Sub(ev.Start) <= time.Duration(at)*time.Millisecond {
				keep = append(keep, e)
			}
		}
		ev.Events = keep
		return ev
	}
	cases := []struct {
		name  string
		ev    *Evidence
		check Check
		ok    bool
		why   string
	}{
		{"read in flight", inFlight(1050), ReadInFlight{C: reader}, true, "started a read at t+1.00s"},
		{"no read in flight", inFlight(1150), ReadInFlight{C: reader}, true, ""}, // 1000's read is still in flight
		{"read returned", inFlight(1320), ReadInFlight{C: reader}, false, "no read of reader in flight"},
		{"no reads at all", restartStory(), ReadInFlight{C: holder}, false, "no read"},

		{"in-flight read answered by the successor", keeperStory(true), InFlightReadSucceeds{C: reader}, true, "began at kill-0.050s and returned"},
		{"in-flight read failed", keeperStory(false), InFlightReadSucceeds{C: reader}, false, "it failed: reader#0 read_error ECONNABORTED"},
		{"no read in flight at the kill", restartStory(), InFlightReadSucceeds{C: reader}, false, "it failed"},
		{"no kill", &Evidence{}, InFlightReadSucceeds{C: reader}, false, "no evidence"},

		{"new version serves", upgradeStory(true, true), NewVersionServes{}, true, "upgrade to v2"},
		{"only the old version serves", upgradeStory(false, true), NewVersionServes{}, false, "no FUSE server of the new build v2"},
		{"old keeper stays", upgradeStory(true, false), NewVersionServes{}, false, "did not exit"},
		{"no upgrade", keeperStory(true), NewVersionServes{}, false, "no upgrade"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.check.Eval(tc.ev, tm)
			if r.OK != tc.ok || !strings.Contains(r.Why, tc.why) {
				t.Errorf("%s: got OK=%v why=%q; want OK=%v, why containing %q", tc.check.Describe(), r.OK, r.Why, tc.ok, tc.why)
			}
		})
	}
}

// TestStall: the measure is the longest open or read that ended after the kill.
func TestStall(t *testing.T) {
	if m := keeperStory(true).Measure(reader); m.Stall != 250*time.Millisecond {
		t.Errorf("stall %s, want 250ms (the read that waited for the successor)", m.Stall)
	}
	if m := restartStory().Measure(reader); m.Stall != 0 {
		t.Errorf("stall %s of a story without latencies, want 0", m.Stall)
	}
}

// TestFailsWithin: any error of the container after the kill counts, within the bound only.
func TestFailsWithin(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ev := &Evidence{Events: []Event{
		{Time: t0, Source: SrcComponent, Component: topology.FuseServer, Kind: KKilled},
		{Time: t0.Add(20 * time.Second), Source: SrcWorkload, Container: "reader", Kind: KReadError, Errno: "EIO"},
	}}
	if r := (FailsWithin{C: "reader", Within: Dur{Fixed: 30 * time.Second}}).Eval(ev, Timing{}); !r.OK {
		t.Errorf("an EIO 20 s after the kill, bound 30 s: %s", r.Why)
	}
	if r := (FailsWithin{C: "reader", Within: Dur{Fixed: 10 * time.Second}}).Eval(ev, Timing{}); r.OK {
		t.Errorf("an EIO 20 s after the kill passed a bound of 10 s: %s", r.Why)
	}
	if r := (FailsWithin{C: "other", Within: Dur{Fixed: 30 * time.Second}}).Eval(ev, Timing{}); r.OK {
		t.Errorf("a container without errors passed: %s", r.Why)
	}
}
