package report

import (
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
)

// IOKinds are the I/O kinds in the order the matrix shows them.
var IOKinds = []string{IOKeptFD, IONewOpen, IOSubPath, IOStat, IOInFlight}

// IOOutcome is what one kind of I/O met after a run's first kill: a container's reads, the host's stat of the
// volume dir, or the read in flight at the kill.
type IOOutcome struct {
	Kind      string `json:"kind"`
	Container string `json:"container,omitempty"`
	// FirstError is the first failure after the kill: an errno ("ENOTCONN"), "start failed" or "exit N" for a
	// container that failed without an I/O error first; "" when nothing failed.
	FirstError       string  `json:"first_error,omitempty"`
	KillToFirstError float64 `json:"kill_to_first_error_s,omitempty"`
	// Stall is the longest open or read of this kind that ended after the kill, in milliseconds.
	Stall float64 `json:"stall_ms"`
	// KillToGood is the kill → the first success after the first failure (a good read, a stat that works); 0
	// when it did not come back or nothing failed.
	KillToGood float64 `json:"kill_to_good_s,omitempty"`
}

// IOKindOf is the kind of I/O container c does.
func IOKindOf(c scenarios.Container) string {
	switch {
	case c.SubPath != "":
		return IOSubPath
	case c.KeepOpen:
		return IOKeptFD
	}
	return IONewOpen
}

// ioOutcomes measures each kind of I/O of the run's evidence from its first kill; nil when nothing was killed.
func ioOutcomes(ev *scenarios.Evidence, containers []scenarios.Container) []IOOutcome {
	if ev == nil {
		return nil
	}
	k, ok := ev.KillTime()
	if !ok {
		return nil
	}
	since := func(t time.Time) float64 { return t.Sub(k).Seconds() }
	var out []IOOutcome
	var inFlight *IOOutcome
	for _, c := range containers {
		o := IOOutcome{Kind: IOKindOf(c), Container: c.Name}
		if f, ok := ev.FirstFailureAfterKill(c.Name); ok {
			o.FirstError, o.KillToFirstError = failureName(f), since(f.Time)
			if g, ok := ev.Recovery(c.Name); ok {
				o.KillToGood = since(g.Time)
			}
		}
		for _, e := range ev.Events {
			if e.Container != c.Name || e.Source != scenarios.SrcWorkload || e.Time.Before(k) {
				continue
			}
			o.Stall = max(o.Stall, float64(e.Latency.Microseconds())/1000)
			// The first read that began before the kill and ended after it was in flight.
			if inFlight == nil && (e.Kind == scenarios.KRead || e.Kind == scenarios.KReadError) && e.Latency > 0 && e.Time.Add(-e.Latency).Before(k) {
				inFlight = &IOOutcome{Kind: IOInFlight, Container: c.Name, Stall: float64(e.Latency.Microseconds()) / 1000}
				if e.Kind == scenarios.KReadError {
					inFlight.FirstError, inFlight.KillToFirstError, inFlight.KillToGood = e.Errno, since(e.Time), o.KillToGood
				}
			}
		}
		out = append(out, o)
	}
	if _, probed := ev.First(time.Time{}, isVolumeProbe); probed {
		o := IOOutcome{Kind: IOStat}
		if bad, ok := ev.First(k, func(e scenarios.Event) bool { return isVolumeProbe(e) && e.Errno != "" }); ok {
			o.FirstError, o.KillToFirstError = bad.Errno, since(bad.Time)
			if t, ok := ev.VolumeRestoredTime(); ok {
				o.KillToGood = since(t)
			}
		}
		out = append(out, o)
	}
	if inFlight != nil {
		out = append(out, *inFlight)
	}
	return out
}

func isVolumeProbe(e scenarios.Event) bool {
	return e.Kind == scenarios.KProbe && e.Path == scenarios.PathVolume
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
