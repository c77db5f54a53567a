package scenarios

import (
	"fmt"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// The checks of the keeper placement: a read inside a FUSE server when it dies, and a new build taking over.

// ReadInFlight holds while container C has started a read (read_start in its log) that has not returned yet:
// the read is inside the FUSE server, or waiting for one. A wait step uses it to kill a server under a read.
type ReadInFlight struct {
	C string
}

func (c ReadInFlight) Describe() string {
	return fmt.Sprintf("a read of %s is in flight (started, not returned)", c.C)
}

func (c ReadInFlight) Label() string { return "until a read of " + c.C + " is in flight" }

func (c ReadInFlight) Containers() []string { return names(c.C) }

func (c ReadInFlight) Eval(ev *Evidence, _ Timing) Result {
	var last *Event
	for i, e := range ev.Events {
		if e.Source == SrcWorkload && e.Container == c.C && (e.Kind == KReadStart || e.Kind == KRead || e.Kind == KReadError) {
			last = &ev.Events[i]
		}
	}
	if last == nil || last.Kind != KReadStart {
		return Result{Why: fmt.Sprintf("no read of %s in flight", c.C)}
	}
	return Result{OK: true, Why: fmt.Sprintf("%s started a read at %s", last.Who(), at(ev, last.Time))}
}

// InFlightReadSucceeds holds when a read of container C that was inside the FUSE server when the server was
// killed (it started before the kill and returned after it) returned the file's content, and C never failed:
// the kernel gave the request to the successor instead of failing it (EINTR, EIO, ECONNABORTED).
type InFlightReadSucceeds struct {
	C string
}

func (c InFlightReadSucceeds) Describe() string {
	return fmt.Sprintf("%s's read that was inside the FUSE server when it was killed returns %q, and %s never fails", c.C, Content, c.C)
}

func (c InFlightReadSucceeds) Label() string { return "while " + c.C + "'s read completes" }

func (c InFlightReadSucceeds) Containers() []string { return names(c.C) }

func (c InFlightReadSucceeds) Eval(ev *Evidence, _ Timing) Result {
	k, why := AfterKill.resolve(ev)
	if why != "" {
		return Result{Why: why}
	}
	if f, ok := ev.First(time.Time{}, IsFailure(c.C)); ok {
		return Result{Why: "it failed: " + cite(ev, f)}
	}
	// The read that spans the kill is the first one to end after it, if it began before it.
	e, ok := ev.First(k, func(e Event) bool { return e.Container == c.C && (e.Kind == KRead || e.Kind == KReadError) })
	if !ok {
		return Result{Why: fmt.Sprintf("no read of %s ended after the kill", c.C)}
	}
	began := e.Time.Add(-e.Latency)
	switch {
	case e.Latency == 0:
		return Result{Why: fmt.Sprintf("%s's first read after the kill has no latency in the log", c.C)}
	case !began.Before(k):
		return Result{Why: fmt.Sprintf("no read was in flight at the kill: the first one after it began at kill+%.3fs", began.Sub(k).Seconds())}
	case !e.IsGoodRead():
		return Result{Why: "the read in flight returned " + cite(ev, e)}
	}
	return Result{OK: true, Why: fmt.Sprintf("%s's read began at kill-%.3fs and returned %q at kill+%.3fs (%s)",
		e.Who(), k.Sub(began).Seconds(), e.Content, e.Time.Sub(k).Seconds(), e.Latency.Round(time.Millisecond))}
}

// NewVersionServes holds when, after the keeper was replaced by a new build (KUpgraded, Detail: its version),
// a FUSE server of that version serves the volume (KReady of the FUSE server, Detail: its version) and the old
// keeper, with its servers, has exited: every server was replaced.
type NewVersionServes struct{}

func (NewVersionServes) Describe() string {
	return "after the upgrade a FUSE server of the new build serves the volume, and the old keeper and its servers are gone"
}

func (NewVersionServes) Label() string { return "until the new build serves" }

func (NewVersionServes) Containers() []string { return nil }

func (NewVersionServes) Eval(ev *Evidence, _ Timing) Result {
	up, ok := ev.First(time.Time{}, func(e Event) bool { return e.Kind == KUpgraded && e.Component == topology.KeeperContainer })
	if !ok {
		return Result{Why: "no upgrade of the keeper in the evidence"}
	}
	served, ok := ev.First(up.Time, func(e Event) bool {
		return e.Kind == KReady && e.Component == topology.FuseServer && e.Detail == up.Detail
	})
	if !ok {
		return Result{Why: fmt.Sprintf("no FUSE server of the new build %s served the volume after the upgrade", up.Detail)}
	}
	gone, ok := ev.First(up.Time, func(e Event) bool { return e.Kind == KExited && e.Component == topology.KeeperContainer })
	if !ok {
		return Result{Why: "the old keeper did not exit after the upgrade"}
	}
	return Result{OK: true, Why: fmt.Sprintf("upgrade to %s at %s; %s at %s; old keeper exited at %s (%s)",
		up.Detail, at(ev, up.Time), EventText(served), at(ev, served.Time), at(ev, gone.Time), gone.Message)}
}

// FailsWithin holds when a read or open of container C fails after the kill, with whatever error, within
// Within: the wait of a reader whose FUSE servers cannot come back is bounded. Which error it gets depends on
// where its request was when the wait ended (FailsWith names one).
type FailsWithin struct {
	C      string
	Within Dur
}

func (c FailsWithin) Describe() string {
	return fmt.Sprintf("%s: a read or open fails %s, within %s", c.C, AfterKill.phrase(), c.Within)
}

func (c FailsWithin) Label() string { return "until " + c.C + " gets an error" }

func (c FailsWithin) Containers() []string { return names(c.C) }

func (c FailsWithin) Eval(ev *Evidence, t Timing) Result {
	k, why := AfterKill.resolve(ev)
	if why != "" {
		return Result{Why: why}
	}
	e, ok := ev.First(k, func(e Event) bool { return e.Container == c.C && e.IsWorkloadError() })
	if !ok {
		return Result{Why: fmt.Sprintf("no failed read or open of %s after the kill in the workload log", c.C)}
	}
	if e.Time.Sub(k) > c.Within.Resolve(t) {
		return Result{Why: fmt.Sprintf("%s, later than %s", cite(ev, e), c.Within.Explain(t))}
	}
	return Result{OK: true, Why: cite(ev, e)}
}
