package report

import (
	"strings"
	"testing"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

func TestProfileOf(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 19, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	read := func(s float64, c, errno string) scenarios.Event {
		k := scenarios.KRead
		if errno != "" {
			k = scenarios.KReadError
		}
		return scenarios.Event{Time: at(s), Source: scenarios.SrcWorkload, Kind: k, Container: c, Errno: errno}
	}
	ev := &scenarios.Evidence{Start: t0, Until: at(20), Events: []scenarios.Event{
		read(1, "keep", ""), read(2, "keep", ""), read(1, "open", ""),
		{Time: at(3), Source: scenarios.SrcComponent, Kind: scenarios.KKilled, Component: topology.DriverPod},
		read(4, "keep", "ENOTCONN"), read(5, "keep", "ENOTCONN"), read(10, "keep", ""), read(11, "keep", ""),
		read(4, "open", ""), read(5, "open", ""),
		{Time: at(3.5), Source: scenarios.SrcProbe, Kind: scenarios.KProbe, Path: scenarios.PathVolume, Errno: "ENOTCONN"},
		{Time: at(6), Source: scenarios.SrcProbe, Kind: scenarios.KProbe, Path: scenarios.PathVolume},
		{Time: at(7), Source: scenarios.SrcKubelet, Kind: scenarios.KStartFailed, Container: "keep", Message: `failed to stat "/x": transport endpoint is not connected`},
		{Time: at(8), Source: scenarios.SrcKubelet, Kind: scenarios.KVolumeHealth, Message: "Inaccessible"},
	}}
	o := &scenarios.Outcome{Evidence: ev, Scenario: scenarios.Scenario{Measured: true, Pod: scenarios.Pod{Containers: []scenarios.Container{{Name: "keep"}, {Name: "open"}}}}}
	p, io := ProfileOf(o), measuredOf(o).IO
	if p == nil || p.IO != nil || len(io) != 3 {
		t.Fatalf("profile %+v, I/O %+v: want keep, open, stat in the record's I/O, not in the profile", p, io)
	}
	keep, open, stat := io[0], io[1], io[2]
	// keep's failed start after its errors counts as a failure too, as it does in the catalog's outcomes.
	if keep.FirstError != "ENOTCONN" || keep.FaultToFirstError != 1 || keep.Errors != 3 || keep.FaultToGood != 7 ||
		keep.Gap != 8000 || keep.ReadsBefore != 2 || keep.StartFailures != 1 || keep.Kind != "keep" {
		t.Errorf("keep: %+v", keep)
	}
	if open.FirstError != "" || open.FaultToGood != 0 || open.Gap != 3000 { // 1 s → 4 s; the run ending after 5 s is no gap
		t.Errorf("open: %+v", open)
	}
	if stat.FirstError != "ENOTCONN" || stat.FaultToFirstError != 0.5 || stat.FaultToGood != 3 || stat.Gap != 2500 {
		t.Errorf("stat: %+v", stat)
	}
	if !p.Kubelet.FailedToStat || len(p.Kubelet.VolumeHealth) != 1 || !strings.Contains(p.Kubelet.VolumeHealth[0], "+5.0s Inaccessible") {
		t.Errorf("kubelet: %+v", p.Kubelet)
	}
	// The terminal and report.md print the record's I/O list.
	var out, md strings.Builder
	PrintProfile(&out, p, io)
	profileMarkdown(&md, p, io)
	if want := "first error ENOTCONN at +1.0s (3 errors); good read again at +7.0s; longest without a good read 8.00s"; !strings.Contains(out.String(), want) {
		t.Errorf("printed profile lacks %q:\n%s", want, out.String())
	}
	if want := "| keep | 2 | ENOTCONN at +1.0s | 3 | +7.0s | 8.00s | 0 / 1 |"; !strings.Contains(md.String(), want) {
		t.Errorf("report's profile lacks %q:\n%s", want, md.String())
	}
	o.Scenario.Measured = false
	if ProfileOf(o) != nil {
		t.Error("a profile for a row of the chart's catalog")
	}
}
