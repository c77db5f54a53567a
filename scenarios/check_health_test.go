package scenarios

import (
	"strings"
	"testing"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// healthStory: the plugin is killed at 1 s and serves again at 2 s; kubelet reports at reportAt ms (0: never)
// through an event (status false) or the pod's status; the remediator records reason at 3 s ("": nothing).
func healthStory(status bool, reportAt int, reason string) *Evidence {
	s := newStory()
	s.at(1000, Event{Source: SrcComponent, Component: topology.PluginContainer, Kind: KKilled})
	s.at(2000, Event{Source: SrcComponent, Component: topology.PluginContainer, Kind: KReady})
	report := Event{Source: SrcKubelet, Kind: KPodEvent, Detail: ReasonVolumeConditionAbnormal, Message: "Warning VolumeConditionAbnormal: Volume v: dead"}
	if status {
		report = Event{Source: SrcKubelet, Kind: KVolumeHealth, Message: "INACCESSIBLE FuseServerGone: dead"}
		s.at(500, Event{Source: SrcKubelet, Kind: KVolumeHealth}) // the healthy status, written before the kill
	}
	if reportAt > 0 {
		s.at(reportAt, report)
	}
	if reason != "" {
		s.at(3000, Event{Source: SrcRemediator, Kind: KPodEvent, Detail: reason, Message: "Normal " + reason + ": why"})
	}
	return s.until(5000).ev
}

func TestHealthChecks(t *testing.T) {
	tm := Timing{ReadInterval: 200 * time.Millisecond}
	within := Dur{Fixed: time.Second}
	for _, tc := range []struct {
		name  string
		check Check
		ev    *Evidence
		ok    bool
		why   string
	}{
		{"event in time", HealthReported{After: AfterPluginBack, Within: within}, healthStory(false, 2500, ""), true, "VolumeConditionAbnormal"},
		{"event too late", HealthReported{After: AfterPluginBack, Within: within}, healthStory(false, 3500, ""), false, "later than"},
		{"event while healthy", HealthReported{After: AfterPluginBack, Within: within}, healthStory(false, 800, ""), false, "while the volume was healthy"},
		{"no event", HealthReported{After: AfterPluginBack, Within: within}, healthStory(false, 0, ""), false, "no report"},
		{"status, not an event", HealthReported{After: AfterPluginBack, Within: within}, healthStory(true, 2500, ""), false, "no report"},
		{"status in time", HealthReported{Status: true, After: AfterPluginBack, Within: within}, healthStory(true, 2500, ""), true, "pod.status.volumeHealth"},
		{"healthy status only", HealthReported{Status: true, After: AfterPluginBack, Within: within}, healthStory(true, 0, ""), false, "no report"},
		{"event recorded", PodEvent{Reason: "DeletedForDeadVolume"}, healthStory(false, 0, "DeletedForDeadVolume"), true, "by the remediator"},
		{"another event", PodEvent{Reason: "DeletedForDeadVolume"}, healthStory(false, 0, "VolumeNotRemediated"), false, "no DeletedForDeadVolume"},
		{"none wanted, none", PodEvent{Reason: "DeletedForDeadVolume", None: true}, healthStory(false, 0, "VolumeNotRemediated"), true, "no DeletedForDeadVolume"},
		{"none wanted, one", PodEvent{Reason: "DeletedForDeadVolume", None: true}, healthStory(false, 0, "DeletedForDeadVolume"), false, "by the remediator"},
	} {
		r := tc.check.Eval(tc.ev, tm)
		if r.OK != tc.ok || !strings.Contains(r.Why, tc.why) {
			t.Errorf("%s: %s = %t (%s), want %t with %q", tc.name, tc.check.Describe(), r.OK, r.Why, tc.ok, tc.why)
		}
	}
}
