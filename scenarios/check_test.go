package scenarios

import (
	"strings"
	"testing"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// The start failures the checks look for: containerd's stat of a dead volume dir and kubelet's failed subPath.
const (
	failedToStatVolume     = `failed to stat "{volume}"`
	failedToPrepareSubPath = `failed to prepare subPath for volumeMount`
)

const statMsg = `Error: failed to generate container "c0ffee" spec: failed to generate spec: failed to stat ` +
	`"/k/pods/u/volumes/kubernetes.io~csi/pv/mount": stat /k/pods/u/volumes/kubernetes.io~csi/pv/mount: transport endpoint is not connected`

// restartStory is the evidence of a successful "restart" run.
func restartStory() *Evidence {
	s := newStory()
	r := func(ms, inst int) {
		s.at(ms, Event{Source: SrcWorkload, Kind: KRead, Container: reader, Instance: inst, Content: Content})
	}
	s.at(0, Event{Source: SrcKubelet, Kind: KContainerStarted, Container: reader})
	s.at(0, Event{Source: SrcProbe, Kind: KProbe, Path: PathVolume})
	r(100, 0)
	r(300, 0)
	r(500, 0)
	s.at(1000, Event{Source: SrcComponent, Component: topology.PluginContainer, Kind: KKilled})
	s.at(1010, Event{Source: SrcComponent, Component: topology.PluginContainer, Kind: KExited})
	r(1200, 0) // still served from the page cache
	s.at(1500, Event{Source: SrcWorkload, Kind: KReadError, Container: reader, Errno: "ENOTCONN"})
	s.at(1510, Event{Source: SrcWorkload, Kind: KWorkloadExit, Container: reader, ExitCode: IntPtr(1)})
	s.at(1520, Event{Source: SrcKubelet, Kind: KContainerExited, Container: reader, ExitCode: IntPtr(1)})
	s.at(1600, Event{Source: SrcProbe, Kind: KProbe, Path: PathVolume, Errno: "ENOTCONN"})
	s.at(1700, Event{Source: SrcKubelet, Kind: KStartFailed, Container: reader, Instance: 1, Errno: "ENOTCONN", Message: statMsg})
	s.at(2000, Event{Source: SrcComponent, Component: topology.PluginContainer, Kind: KStarted})
	s.at(2250, Event{Source: SrcProbe, Kind: KProbe, Path: PathVolume})
	s.at(2300, Event{Source: SrcComponent, Component: topology.PluginContainer, Kind: KReady})
	s.at(2700, Event{Source: SrcKubelet, Kind: KContainerStarted, Container: reader, Instance: 1})
	r(2710, 1)
	return s.until(3500).ev
}

// brokenStory is the evidence of a run where the running container never recovers.
func brokenStory() *Evidence {
	s := newStory()
	s.at(0, Event{Source: SrcKubelet, Kind: KContainerStarted, Container: reader})
	s.at(100, Event{Source: SrcWorkload, Kind: KRead, Container: reader, Content: Content})
	s.at(1000, Event{Source: SrcComponent, Component: topology.PluginContainer, Kind: KKilled})
	for ms := 1500; ms <= 5000; ms += 200 {
		s.at(ms, Event{Source: SrcWorkload, Kind: KReadError, Container: reader, Errno: "ENOTCONN"})
	}
	s.at(1600, Event{Source: SrcProbe, Kind: KProbe, Path: PathVolume, Errno: "ENOTCONN"})
	s.at(2000, Event{Source: SrcComponent, Component: topology.PluginContainer, Kind: KReady})
	return s.until(5000).ev
}

// sidecarStory is the evidence of a sidecar-mode run: the sidecar, held back, serves at 1.0s; the reader's
// container starts then and reads; the plugin is killed at 2s and back at 3s; the reader never fails.
func sidecarStory() *Evidence {
	s := newStory()
	s.at(0, Event{Source: SrcComponent, Component: topology.SidecarContainer, Kind: KStarted})
	s.at(1000, Event{Source: SrcProbe, Kind: KProbe, Path: PathVolume})
	s.at(1000, Event{Source: SrcComponent, Component: topology.SidecarContainer, Kind: KReady})
	s.at(1005, Event{Source: SrcKubelet, Kind: KContainerStarted, Container: reader})
	for ms := 1010; ms <= 4000; ms += 200 {
		s.at(ms, Event{Source: SrcWorkload, Kind: KRead, Container: reader, Content: Content})
	}
	s.at(2000, Event{Source: SrcComponent, Component: topology.PluginContainer, Kind: KKilled})
	s.at(3000, Event{Source: SrcComponent, Component: topology.PluginContainer, Kind: KReady})
	return s.until(4000).ev
}

// sidecarKilledStory: the sidecar serves, is killed at 1s, the reader fails, the sidecar restarts at 1.5s.
func sidecarKilledStory(served bool) *Evidence {
	s := newStory()
	s.at(0, Event{Source: SrcComponent, Component: topology.SidecarContainer, Kind: KStarted})
	s.at(10, Event{Source: SrcComponent, Component: topology.SidecarContainer, Kind: KReady})
	s.at(20, Event{Source: SrcKubelet, Kind: KContainerStarted, Container: reader})
	s.at(50, Event{Source: SrcProbe, Kind: KProbe, Path: PathVolume})
	s.at(100, Event{Source: SrcWorkload, Kind: KRead, Container: reader, Content: Content})
	s.at(1000, Event{Source: SrcComponent, Component: topology.SidecarContainer, Kind: KKilled})
	s.at(1100, Event{Source: SrcWorkload, Kind: KOpenError, Container: reader, Errno: "ENOTCONN"})
	s.at(1200, Event{Source: SrcProbe, Kind: KProbe, Path: PathVolume, Errno: "ENOTCONN"})
	s.at(1500, Event{Source: SrcComponent, Component: topology.SidecarContainer, Kind: KStarted})
	if served {
		s.at(1600, Event{Source: SrcComponent, Component: topology.SidecarContainer, Kind: KReady})
	}
	return s.until(4000).ev
}

// newPodStory: the sidecar is killed at 1s, the reader fails; the pod is deleted at 2s and created again,
// and its reader (instance 1) reads; with readBefore the old one read once more before the deletion.
func newPodStory(readBefore bool) *Evidence {
	s := newStory()
	s.at(0, Event{Source: SrcKubelet, Kind: KContainerStarted, Container: reader})
	s.at(100, Event{Source: SrcWorkload, Kind: KRead, Container: reader, Content: Content})
	s.at(1000, Event{Source: SrcComponent, Component: topology.SidecarContainer, Kind: KKilled})
	s.at(1100, Event{Source: SrcWorkload, Kind: KOpenError, Container: reader, Errno: "ENOTCONN"})
	s.at(1300, Event{Source: SrcWorkload, Kind: KOpenError, Container: reader, Errno: "ENOTCONN"})
	if readBefore {
		s.at(1500, Event{Source: SrcWorkload, Kind: KRead, Container: reader, Content: Content})
	}
	s.at(2000, Event{Source: SrcComponent, Component: topology.WorkloadPod, Kind: KKilled})
	s.at(2100, Event{Source: SrcKubelet, Kind: KContainerStarted, Container: reader, Instance: 1})
	s.at(2200, Event{Source: SrcWorkload, Kind: KRead, Container: reader, Instance: 1, Content: Content})
	return s.until(3000).ev
}

func TestChecks(t *testing.T) {
	tm := Timing{ReadInterval: 200 * time.Millisecond, BackoffBase: 500 * time.Millisecond}
	restart, broken := restartStory(), brokenStory()
	cases := []struct {
		name  string
		ev    *Evidence
		check Check
		ok    bool
		why   string // a substring of Result.Why
	}{
		{"warm-up done", restart, GoodReads{N: 3}, true, "reader: "},
		{"warm-up not yet", restart, GoodReads{C: reader, N: 10}, false, "good reads"},
		{"warm-up without logs", &Evidence{}, GoodReads{N: 1}, false, "no workload log"},

		{"ENOTCONN after kill", restart, FailsWith{C: reader, Errno: "ENOTCONN"}, true, "kill+0.50s"},
		{"ENOTCONN too late", restart, FailsWith{C: reader, Errno: "ENOTCONN", Within: Dur{Fixed: 100 * time.Millisecond}}, false, "later than"},
		{"ENOTCONN within read intervals", restart, FailsWith{C: reader, Errno: "ENOTCONN", Within: Dur{Reads: 3}}, true, ""},
		{"other errno", restart, FailsWith{C: reader, Errno: "ECONNABORTED"}, false, "first error"},
		{"no kill", &Evidence{}, FailsWith{C: reader, Errno: "ENOTCONN"}, false, "no evidence"},

		{"exit 1", restart, Exits{C: reader, Code: 1}, true, "code 1"},
		{"exit 0 expected", restart, Exits{C: reader, Code: 0}, false, "code 1"},
		{"no exit", broken, Exits{C: reader, Code: 1}, false, "did not exit"},

		{"failed stat", restart, StartFails{C: reader, Contains: failedToStatVolume, Errno: "ENOTCONN"}, true, "1 matching"},
		{"failed stat after plugin back", restart, StartFails{C: reader, After: AfterPluginBack, Contains: failedToStatVolume}, false, "0 matching"},
		{"two failed stats", restart, StartFails{C: reader, Contains: failedToStatVolume, Min: 2}, false, "1 matching"},
		{"wrong cause", restart, StartFails{C: reader, Contains: failedToStatVolume, Detail: "volume-subpaths"}, false, "others"},
		{"wrong message", restart, StartFails{C: reader, Contains: failedToPrepareSubPath}, false, "failed to stat"},

		{"recovers in a new instance", restart, Recovers{C: reader, Instance: NewInstance}, true, "reader#1"},
		{"recovers without restart", restart, Recovers{C: reader, Instance: SameInstance}, false, "wrong instance"},
		{"never recovers", broken, Recovers{C: reader}, false, "no good read"},

		{"never recovers: but it did", restart, NeverRecovers{C: reader, After: AfterPluginBack, For: Dur{Fixed: time.Second}}, false, "recovered"},
		{"never recovers", broken, NeverRecovers{C: reader, After: AfterPluginBack, For: Dur{Fixed: 2 * time.Second}}, true, "3.00s after the plugin is back"},
		{"never recovers: not watched long enough", broken, NeverRecovers{C: reader, After: AfterPluginBack, For: Dur{Fixed: 2 * time.Second, Backoffs: 10}}, false, "watched only"},

		{"keeps failing", broken, KeepsFailing{C: reader, Errno: "ENOTCONN", After: AfterPluginBack}, true, "15 × ENOTCONN"},
		{"keeps failing: but it recovered", restart, KeepsFailing{C: reader, Errno: "ENOTCONN", After: AfterKill}, false, "last read did not fail"},
		{"keeps failing: no anchor", broken, KeepsFailing{C: reader, Errno: "ENOTCONN", After: AfterVolumeRestored}, false, "no evidence"},

		{"restarted once", restart, Restarts{C: reader, Min: 1, Max: 1}, true, "restart count 1"},
		{"never restarted", restart, Restarts{C: reader}, false, "restart count 1"},
		{"never restarted, right", broken, Restarts{C: reader}, true, "restart count 0"},
		{"at least once", broken, Restarts{C: reader, Min: 1, Max: -1}, false, "restart count 0"},
		{"never started", &Evidence{}, Restarts{C: reader}, false, "never started"},

		{"volume restored", restart, VolumeDir{After: AfterPluginBack}, true, "ok since"},
		{"volume still dead: wrong", restart, VolumeDir{Errno: "ENOTCONN", After: AfterPluginBack}, false, "ok since"},
		{"volume still dead", broken, VolumeDir{Errno: "ENOTCONN", After: AfterPluginBack}, true, "ENOTCONN since"},
		{"no probes", &Evidence{Events: []Event{{Kind: KKilled, Component: topology.PluginContainer}, {Kind: KReady, Component: topology.PluginContainer}}}, VolumeDir{After: AfterPluginBack}, false, "no stat"},

		{"never fails", sidecarStory(), NeverFails{C: reader, After: AfterPluginBack, Reads: 5}, true, "5 after the plugin is back"},
		{"never fails: too few reads", sidecarStory(), NeverFails{C: reader, After: AfterPluginBack, Reads: 6}, false, "5 after"},
		{"never fails: but it did", restart, NeverFails{C: reader, After: FromStart}, false, "it failed: reader#0 read_error ENOTCONN"},
		{"never fails: no anchor", sidecarStory(), NeverFails{C: reader, After: AfterVolumeRestored}, false, "no evidence"},

		{"blocks until served", sidecarStory(), BlocksUntilServed{C: reader, Delay: time.Second}, true, "first good read 1.010s after"},
		{"blocks: shorter than the delay", sidecarStory(), BlocksUntilServed{C: reader, Delay: 2 * time.Second}, false, "sooner than"},
		{"blocks: a failure", sidecarKilledStory(false), BlocksUntilServed{C: reader}, false, "it failed"},
		{"blocks: no sidecar", restart, BlocksUntilServed{C: reader}, false, "no start of the sidecar"},

		{"volume dir alive", sidecarStory(), VolumeDirAlive{}, true, "ok from"},
		{"volume dir died", sidecarKilledStory(false), VolumeDirAlive{}, false, "ENOTCONN at"},
		{"volume dir: no probes", &Evidence{}, VolumeDirAlive{}, false, "no stat"},

		{"sidecar never serves", sidecarKilledStory(false), SidecarNeverServes{After: AfterRestart, For: Dur{Fixed: 2 * time.Second}}, true, "2.50s after"},
		{"sidecar served again", sidecarKilledStory(true), SidecarNeverServes{After: AfterRestart}, false, "it served"},
		{"sidecar: not watched long enough", sidecarKilledStory(false), SidecarNeverServes{After: AfterRestart, For: Dur{Fixed: 3 * time.Second}}, false, "watched only"},
		{"sidecar: no restart", sidecarStory(), SidecarNeverServes{After: AfterRestart}, false, "no evidence"},
		{"no good read until the pod's deletion", newPodStory(false), NoGoodReadUntil{C: reader, Component: topology.WorkloadPod}, true, "2 failed reads or opens and no good read"},
		{"a good read before the pod's deletion", newPodStory(true), NoGoodReadUntil{C: reader, Component: topology.WorkloadPod}, false, "it read again before"},
		{"no pod deletion", sidecarKilledStory(false), NoGoodReadUntil{C: reader, Component: topology.WorkloadPod}, false, "was not killed"},
		{"recovers in the new pod", newPodStory(false), Recovers{C: reader, Instance: NewInstance}, true, "reader#1"},
		{"keeps failing after the restart", sidecarKilledStory(false), KeepsFailing{C: reader, Errno: "ENOTCONN", After: AfterRestart}, false, "no ENOTCONN"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.check.Eval(tc.ev, tm)
			if r.OK != tc.ok || !strings.Contains(r.Why, tc.why) {
				t.Errorf("%s: got OK=%v why=%q; want OK=%v, why containing %q", tc.check.Describe(), r.OK, r.Why, tc.ok, tc.why)
			}
			if tc.check.Describe() == "" {
				t.Error("a check must describe itself")
			}
		})
	}
}

func TestDur(t *testing.T) {
	tm := Timing{ReadInterval: 200 * time.Millisecond, BackoffBase: 500 * time.Millisecond}
	d := Dur{Fixed: time.Second, Reads: 5, Backoffs: 4}
	if got := d.Resolve(tm); got != 4*time.Second {
		t.Errorf("1s + 5×200ms + 4×500ms = %v, want 4s", got)
	}
	if got := d.Explain(tm); got != "4s (1s + 5 read intervals + 4 back-offs)" {
		t.Errorf("Explain = %q", got)
	}
	if got := (Dur{Fixed: 2 * time.Second}).Explain(tm); got != "2s" {
		t.Errorf("Explain of a fixed duration = %q", got)
	}
}

// TestLabels: a kill is labelled by its component, a wait by its check.
func TestLabels(t *testing.T) {
	if l := KillPlugin().Label(); l != "plugin killed" {
		t.Errorf("KillPlugin().Label() = %q", l)
	}
	if l := (VolumeDir{Errno: "ENOTCONN", After: AfterKill}).Label(); l != "until volume dir ENOTCONN" {
		t.Errorf("a wait for a dead volume dir is labelled %q", l)
	}
}
