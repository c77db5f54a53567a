package report

import (
	"cmp"
	"encoding/json"
	"fmt"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
)

// The kinds of I/O a record's IO outcomes name (the columns of docs/outage-matrix.md).
const (
	IOKeptFD   = "kept-fd"   // reads through one fd opened before the kill
	IONewOpen  = "new-open"  // an open per read
	IOSubPath  = "subpath"   // reads through a subPath mount of the volume
	IOStat     = "stat"      // stat of the pod's volume dir from the host
	IOInFlight = "in-flight" // a read that was inside the FUSE server when the kill came
	IOWrite    = "write"     // a writer's appends, fsyncs and checkpoints (Container.Write)
)

// IOKinds are the I/O kinds in the order the matrix shows them.
var IOKinds = []string{IOKeptFD, IONewOpen, IOSubPath, IOStat, IOInFlight, IOWrite}

// IOOutcome is what one kind of I/O met after a run's fault (its first kill, or the rollout that replaced a
// component): a container's reads, the host's stat of the volume dir, or the read in flight at the fault.
// measureIO measures it alike for the catalog's runs and the driver-agnostic ones. Times are seconds from the
// fault; 0 is what did not happen.
type IOOutcome struct {
	Kind      string `json:"kind"`
	Container string `json:"container,omitempty"`
	// ReadsBefore counts the good reads (stats that worked) before the fault: 0 says the kind went unmeasured.
	ReadsBefore int `json:"reads_before,omitempty"`
	// FirstError is the first failure after the fault: an errno ("ENOTCONN"), "start failed" or "exit N" for a
	// container that failed without an I/O error first; "" when nothing failed. Errors counts the failures.
	FirstError        string  `json:"first_error,omitempty"`
	FaultToFirstError float64 `json:"fault_to_first_error_s,omitempty"`
	Errors            int     `json:"errors,omitempty"`
	// FaultToGood is the fault → the first success after the first failure (a good read, a stat that works); 0
	// when it did not come back or nothing failed.
	FaultToGood float64 `json:"fault_to_good_s,omitempty"`
	// Stall is the longest open or read of this kind that ended after the fault, in milliseconds (none for
	// stat: the probe records no latency).
	Stall float64 `json:"stall_ms"`
	// Gap is the longest time without a success from the last one before the fault on, in milliseconds: what a
	// workload reading at intervals went without. For stat it is how long stat failed.
	Gap float64 `json:"gap_ms,omitempty"`
	// Restarts counts the container's starts after the fault, StartFailures its failed start attempts.
	Restarts      int `json:"restarts,omitempty"`
	StartFailures int `json:"start_failures,omitempty"`
}

// UnmarshalJSON also reads the records written before the catalog's outcomes and the driver-agnostic profile
// shared this type: the former's kill_to_first_error_s and kill_to_good_s, and the profile's first_errno,
// fault_to_good_read_s and stall_ms, which there was the longest time without a good read (Gap), not the
// longest read. A profile is told by its "failed" flag; its time to a good read when nothing had failed is
// dropped, since FaultToGood is a recovery.
func (o *IOOutcome) UnmarshalJSON(b []byte) error {
	type plain IOOutcome // without this method
	var v struct {
		plain
		KillToFirstError float64 `json:"kill_to_first_error_s"`
		KillToGood       float64 `json:"kill_to_good_s"`
		Failed           *bool   `json:"failed"`
		FirstErrno       string  `json:"first_errno"`
		ToGoodRead       float64 `json:"fault_to_good_read_s"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*o = IOOutcome(v.plain)
	o.FaultToFirstError = cmp.Or(o.FaultToFirstError, v.KillToFirstError)
	o.FaultToGood = cmp.Or(o.FaultToGood, v.KillToGood)
	if v.Failed != nil {
		o.Gap, o.Stall = o.Stall, 0
		if *v.Failed {
			o.FirstError, o.FaultToGood = cmp.Or(v.FirstErrno, "error"), v.ToGoodRead
		}
	}
	return nil
}

// IOKindOf is the kind of I/O container c does.
func IOKindOf(c scenarios.Container) string {
	switch {
	case c.Write:
		return IOWrite
	case c.SubPath != "":
		return IOSubPath
	case c.KeepOpen:
		return IOKeptFD
	}
	return IONewOpen
}

// ioOutcomes measures each kind of I/O of a run of sc from its fault on; nil when nothing was killed or
// replaced.
func ioOutcomes(ev *scenarios.Evidence, sc scenarios.Scenario) []IOOutcome {
	if ev == nil {
		return nil
	}
	fault, ok := ev.KillTime()
	if !ok {
		return nil
	}
	// A success is a good read, or a writer's acknowledged piece.
	kindOf, isGood := IOKindOf, scenarios.Event.IsGoodIO
	if sc.Measured {
		// A driver-agnostic row names each container after its kind (its direct read would be a kept fd to
		// IOKindOf), and a foreign driver's file has no known content: any read without an error is good.
		kindOf = func(c scenarios.Container) string { return c.Name }
		isGood = func(e scenarios.Event) bool {
			return e.Source == scenarios.SrcWorkload && e.Kind == scenarios.KRead && e.Errno == ""
		}
	}
	var out []IOOutcome
	for _, c := range sc.Pod.Containers {
		good := func(e scenarios.Event) bool { return e.Container == c.Name && isGood(e) }
		out = append(out, measureIO(ev, fault, IOOutcome{Kind: kindOf(c), Container: c.Name}, good, scenarios.IsFailure(c.Name)))
	}
	if _, probed := ev.First(time.Time{}, isVolumeProbe); probed {
		out = append(out, statOutcome(ev, fault))
	}
	if o, ok := inFlight(ev, fault, sc.Pod.Containers, out); ok {
		out = append(out, o)
	}
	return out
}

// measureIO measures the kind of I/O o names after the fault from its successes (good) and failures (bad):
// the one measurement behind every record's outcomes. o.Container is "" for stat, whose events are no
// container's.
func measureIO(ev *scenarios.Evidence, fault time.Time, o IOOutcome, good, bad func(scenarios.Event) bool) IOOutcome {
	since := func(t time.Time) float64 { return t.Sub(fault).Seconds() }
	var lastGood time.Time
	for _, e := range ev.Events {
		switch {
		case e.Time.Before(fault):
			if good(e) {
				o.ReadsBefore++
				lastGood = e.Time
			}
		case o.Container == "" || e.Container != o.Container: // after the fault, only the container's own events
		case e.Source == scenarios.SrcWorkload:
			o.Stall = max(o.Stall, millis(e.Latency))
		case e.Kind == scenarios.KContainerStarted:
			o.Restarts++
		case e.Kind == scenarios.KStartFailed:
			o.StartFailures++
		}
	}
	from := fault
	if f, ok := ev.First(fault, bad); ok {
		o.FirstError, o.FaultToFirstError, o.Errors = failureName(f), since(f.Time), ev.Count(fault, bad)
		from = f.Time
	}
	g, cameBack := ev.First(from, good)
	if cameBack && o.FirstError != "" {
		o.FaultToGood = since(g.Time)
	}
	o.Gap = gap(ev, fault, lastGood, cameBack, good, bad)
	return o
}

// gap is the longest time without a success from the last one before the fault on. It runs to the end of the
// run only when the I/O failed again after its last success, or none came: else the run merely ended between
// two reads.
func gap(ev *scenarios.Evidence, fault, lastGood time.Time, cameBack bool, good, bad func(scenarios.Event) bool) float64 {
	prev := lastGood
	if prev.IsZero() {
		prev = fault
	}
	var longest time.Duration
	for _, e := range ev.Events {
		if e.Time.After(fault) && good(e) {
			longest = max(longest, e.Time.Sub(prev))
			prev = e.Time
		}
	}
	if _, failedAgain := ev.First(prev, bad); failedAgain || !cameBack {
		longest = max(longest, ev.Until.Sub(prev))
	}
	return millis(longest)
}

// statOutcome measures the host's stat of the pod's volume dir.
func statOutcome(ev *scenarios.Evidence, fault time.Time) IOOutcome {
	probe := func(ok bool) func(scenarios.Event) bool {
		return func(e scenarios.Event) bool { return isVolumeProbe(e) && (e.Errno == "") == ok }
	}
	o := measureIO(ev, fault, IOOutcome{Kind: IOStat}, probe(true), probe(false))
	// The probe records changes of stat's result only, so a gap between two of them is no outage: stat's gap
	// is the time it failed.
	o.Gap = 0
	if o.FirstError != "" {
		end := cmp.Or(o.FaultToGood, ev.Until.Sub(fault).Seconds())
		o.Gap = (end - o.FaultToFirstError) * 1000
	}
	return o
}

// inFlight is the outcome of the first read, in the order of containers, that began before the fault and ended
// after it: it was inside the FUSE server when the fault came. outs are the containers' outcomes.
func inFlight(ev *scenarios.Evidence, fault time.Time, containers []scenarios.Container, outs []IOOutcome) (IOOutcome, bool) {
	for i, c := range containers {
		for _, e := range ev.Events {
			if e.Container != c.Name || e.Source != scenarios.SrcWorkload || e.Time.Before(fault) ||
				(e.Kind != scenarios.KRead && e.Kind != scenarios.KReadError) || e.Latency <= 0 || !e.Time.Add(-e.Latency).Before(fault) {
				continue
			}
			o := IOOutcome{Kind: IOInFlight, Container: c.Name, Stall: millis(e.Latency)}
			if e.Kind == scenarios.KReadError {
				o.FirstError, o.FaultToFirstError, o.FaultToGood = e.Errno, e.Time.Sub(fault).Seconds(), outs[i].FaultToGood
			}
			return o, true
		}
	}
	return IOOutcome{}, false
}

func isVolumeProbe(e scenarios.Event) bool {
	return e.Kind == scenarios.KProbe && e.Path == scenarios.PathVolume
}

// millis is d in milliseconds, to the microsecond.
func millis(d time.Duration) float64 {
	return float64(d.Microseconds()) / 1000
}

// failureName names a container's failure: its errno, or how it failed without one.
func failureName(e scenarios.Event) string {
	switch {
	case e.Errno != "":
		return e.Errno
	case e.Kind == scenarios.KStartFailed:
		return "start failed"
	case e.ExitCode != nil:
		return fmt.Sprintf("exit %d", *e.ExitCode)
	}
	return "error"
}
