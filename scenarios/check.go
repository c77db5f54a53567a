package scenarios

import (
	"fmt"
	"strings"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// Check is a statement about the evidence of a run. A wait-for step polls it until it holds; an expectation
// must hold at the end of the run.
type Check interface {
	// Describe says in one sentence what must hold.
	Describe() string
	// Label says it in a few words, for a wait step in the timeline picture ("until reader gets ENOTCONN").
	Label() string
	// Eval evaluates the statement against ev, with t to resolve durations that scale with the backend.
	Eval(ev *Evidence, t Timing) Result
	// Containers names the containers the check is about (for validation).
	Containers() []string
}

// Result is a check's outcome and the evidence that decided it.
type Result struct {
	OK bool
	// Why cites the deciding evidence, e.g. "reader#0 read_error ENOTCONN at t+3.21s (kill+0.52s)".
	Why string
}

// Verdict is an expectation with its result.
type Verdict struct {
	// Index is the expectation's position in Scenario.Expect.
	Index       int
	Expectation Expectation
	Result      Result
}

// Anchor is a moment of the run that checks refer to.
type Anchor string

// Anchors.
const (
	// AfterKill: after a step first killed a component (the plugin, the sidecar).
	AfterKill Anchor = "kill"
	// AfterPluginBack: after the plugin served again following the kill.
	AfterPluginBack Anchor = "plugin-back"
	// AfterVolumeRestored: after stat of the volume dir succeeded again following a failure after the kill.
	AfterVolumeRestored Anchor = "volume-restored"
	// AfterRestart: after the component killed first was started again following the kill (whether or not
	// it serves: a restarted sidecar may have nothing to serve).
	AfterRestart Anchor = "restart"
	// FromStart: from the start of the run.
	FromStart Anchor = "start"
)

func (a Anchor) phrase() string {
	switch a {
	case AfterKill:
		return "after the kill"
	case AfterPluginBack:
		return "after the plugin is back"
	case AfterVolumeRestored:
		return "after the host volume dir is restored"
	case AfterRestart:
		return "after the killed component is started again"
	case FromStart:
		return "in the whole run"
	}
	return "after " + string(a)
}

// resolve returns the anchor's time, or a reason why the evidence has none.
func (a Anchor) resolve(ev *Evidence) (time.Time, string) {
	var t time.Time
	var ok bool
	switch a {
	case AfterKill:
		t, ok = ev.KillTime()
	case AfterPluginBack:
		t, ok = ev.PluginBackTime()
	case AfterVolumeRestored:
		t, ok = ev.VolumeRestoredTime()
	case AfterRestart:
		t, ok = ev.RestartTime()
	case FromStart:
		t, ok = ev.Start, true
	}
	if !ok {
		return time.Time{}, fmt.Sprintf("no evidence of the moment %q (%s)", a, a.phrase())
	}
	return t, ""
}

// at formats an event's time relative to the run start and, when known, the kill.
func at(ev *Evidence, t time.Time) string {
	s := ev.Since(t)
	if k, ok := ev.KillTime(); ok && !t.Before(k) {
		s += fmt.Sprintf(" (kill+%.2fs)", t.Sub(k).Seconds())
	}
	return s
}

func cite(ev *Evidence, e Event) string {
	s := fmt.Sprintf("%s %s", e.Who(), e.Kind)
	if e.Errno != "" {
		s += " " + e.Errno
	}
	if e.ExitCode != nil {
		s += fmt.Sprintf(" code %d", *e.ExitCode)
	}
	return s + " at " + at(ev, e.Time)
}

// GoodReads holds when container C (every container when C is empty) has read the file's content N times.
type GoodReads struct {
	C string
	N int
}

func (c GoodReads) Describe() string {
	who := c.C
	if who == "" {
		who = "every container"
	}
	return fmt.Sprintf("%s has read %q %d times", who, Content, c.N)
}

func (c GoodReads) Label() string { return "warm-up reads" }

func (c GoodReads) Containers() []string { return names(c.C) }

func (c GoodReads) Eval(ev *Evidence, _ Timing) Result {
	counts := map[string]int{}
	var order []string
	for _, e := range ev.Events {
		if e.Source == SrcWorkload && e.Container != "" {
			if _, seen := counts[e.Container]; !seen {
				order = append(order, e.Container)
				counts[e.Container] = 0
			}
			if e.IsGoodRead() {
				counts[e.Container]++
			}
		}
	}
	check := order
	if c.C != "" {
		check = []string{c.C}
	}
	if len(check) == 0 {
		return Result{Why: "no workload log yet"}
	}
	var parts []string
	ok := true
	for _, name := range check {
		parts = append(parts, fmt.Sprintf("%s: %d good reads", name, counts[name]))
		if counts[name] < c.N {
			ok = false
		}
	}
	return Result{OK: ok, Why: strings.Join(parts, ", ")}
}

// FailsWith holds when a read or open of container C fails with Errno after the kill, within Within (zero:
// any time).
type FailsWith struct {
	C      string
	Errno  string
	Within Dur
}

func (c FailsWith) Describe() string {
	s := fmt.Sprintf("%s: a read or open fails with %s %s", c.C, c.Errno, AfterKill.phrase())
	if c.Within != (Dur{}) {
		s += " (within " + c.Within.String() + ")"
	}
	return s
}

func (c FailsWith) Label() string { return "until " + c.C + " gets " + c.Errno }

func (c FailsWith) Containers() []string { return names(c.C) }

func (c FailsWith) Eval(ev *Evidence, t Timing) Result {
	k, why := AfterKill.resolve(ev)
	if why != "" {
		return Result{Why: why}
	}
	e, ok := ev.First(k, func(e Event) bool { return e.Container == c.C && e.IsWorkloadError() && e.Errno == c.Errno })
	if !ok {
		other, found := ev.First(k, func(e Event) bool { return e.Container == c.C && e.IsWorkloadError() })
		if found {
			return Result{Why: "no " + c.Errno + " in the workload log; first error: " + cite(ev, other)}
		}
		return Result{Why: fmt.Sprintf("no failed read or open of %s after the kill in the workload log", c.C)}
	}
	if c.Within != (Dur{}) && e.Time.Sub(k) > c.Within.Resolve(t) {
		return Result{Why: fmt.Sprintf("%s, later than %s", cite(ev, e), c.Within.Explain(t))}
	}
	return Result{OK: true, Why: cite(ev, e)}
}

// Exits holds when container C exits with Code after the kill (as the container runtime saw it).
type Exits struct {
	C    string
	Code int
}

func (c Exits) Describe() string {
	return fmt.Sprintf("%s exits with code %d %s", c.C, c.Code, AfterKill.phrase())
}

func (c Exits) Label() string { return "until " + c.C + " exits" }

func (c Exits) Containers() []string { return names(c.C) }

func (c Exits) Eval(ev *Evidence, _ Timing) Result {
	k, why := AfterKill.resolve(ev)
	if why != "" {
		return Result{Why: why}
	}
	e, ok := ev.First(k, func(e Event) bool { return e.Container == c.C && e.Kind == KContainerExited })
	if !ok {
		return Result{Why: fmt.Sprintf("%s did not exit after the kill", c.C)}
	}
	if e.ExitCode == nil || *e.ExitCode != c.Code {
		return Result{Why: cite(ev, e)}
	}
	return Result{OK: true, Why: cite(ev, e)}
}

// StartFails holds when at least Min (default 1) starts of container C fail after the anchor with a message
// containing Contains — where "{volume}" stands for the host volume dir — and, if set, with Errno as the
// cause and a Detail (what kubelet only logs) containing Detail.
type StartFails struct {
	C        string
	After    Anchor
	Contains string
	Errno    string
	Detail   string
	Min      int
}

func (c StartFails) min() int { return max(c.Min, 1) }

func (c StartFails) Describe() string {
	n := "a start"
	if c.min() > 1 {
		n = fmt.Sprintf("at least %d starts", c.min())
	}
	verb := "fail"
	if c.min() == 1 {
		verb = "fails"
	}
	s := fmt.Sprintf("%s: %s of the container %s %s with `%s`", c.C, n, verb, c.after().phrase(),
		strings.ReplaceAll(c.Contains, "{volume}", "<volume dir>"))
	if c.Errno != "" {
		s += " (" + c.Errno + ")"
	}
	if c.Detail != "" {
		s += fmt.Sprintf(", cause mentioning %q", c.Detail)
	}
	return s
}

func (c StartFails) after() Anchor {
	if c.After == "" {
		return AfterKill
	}
	return c.After
}

func (c StartFails) Label() string { return "until a start fails" }

func (c StartFails) Containers() []string { return names(c.C) }

func (c StartFails) Eval(ev *Evidence, _ Timing) Result {
	from, why := c.after().resolve(ev)
	if why != "" {
		return Result{Why: why}
	}
	want := strings.ReplaceAll(c.Contains, "{volume}", ev.Paths[PathVolume])
	var first *Event
	n := 0
	var other []string
	for _, e := range ev.Events {
		if e.Time.Before(from) || e.Container != c.C || e.Kind != KStartFailed {
			continue
		}
		if strings.Contains(e.Message, want) && (c.Errno == "" || e.Errno == c.Errno) && strings.Contains(e.Detail, c.Detail) {
			n++
			if first == nil {
				e := e
				first = &e
			}
		} else if len(other) < 2 {
			other = append(other, fmt.Sprintf("%q (%s)", e.Message, e.Errno))
		}
	}
	if n < c.min() {
		why := fmt.Sprintf("%d matching start failures %s", n, c.after().phrase())
		if len(other) > 0 {
			why += "; others: " + strings.Join(other, ", ")
		}
		return Result{Why: why}
	}
	why = fmt.Sprintf("%d matching, first at %s: %q", n, at(ev, first.Time), first.Message)
	if c.Detail != "" {
		why += fmt.Sprintf(" (cause: %s)", first.Detail)
	}
	return Result{OK: true, Why: why}
}

// Instance says which container instance must do something.
type Instance string

// Instances.
const (
	AnyInstance  Instance = ""
	SameInstance Instance = "same" // the instance that ran at the kill: no restart
	NewInstance  Instance = "new"  // a later instance: after a restart
)

// Recovers holds when container C reads the file's content again after its first failure after the kill,
// in the required instance.
type Recovers struct {
	C        string
	Instance Instance
}

func (c Recovers) Describe() string {
	s := fmt.Sprintf("%s reads %q again after its failure", c.C, Content)
	switch c.Instance {
	case SameInstance:
		s += ", without a container restart"
	case NewInstance:
		s += ", in a new container (restarted, or a new pod's)"
	}
	return s
}

func (c Recovers) Label() string { return "until " + c.C + " reads again" }

func (c Recovers) Containers() []string { return names(c.C) }

func (c Recovers) Eval(ev *Evidence, _ Timing) Result {
	f, ok := ev.FirstFailureAfterKill(c.C)
	if !ok {
		return Result{Why: fmt.Sprintf("%s never failed after the kill, so it cannot recover", c.C)}
	}
	killInst := instanceAt(ev, c.C, f.Time)
	e, ok := ev.First(f.Time, func(e Event) bool {
		if e.Container != c.C || !e.IsGoodRead() {
			return false
		}
		switch c.Instance {
		case SameInstance:
			return e.Instance == killInst
		case NewInstance:
			return e.Instance > killInst
		}
		return true
	})
	if !ok {
		any, found := ev.First(f.Time, func(e Event) bool { return e.Container == c.C && e.IsGoodRead() })
		if found {
			return Result{Why: "recovered, but in the wrong instance: " + cite(ev, any)}
		}
		return Result{Why: fmt.Sprintf("no good read of %s after its failure (%s)", c.C, cite(ev, f))}
	}
	return Result{OK: true, Why: fmt.Sprintf("%s read %q at %s", e.Who(), e.Content, at(ev, e.Time))}
}

// instanceAt is the instance of container c that ran (or last ran) at time t.
func instanceAt(ev *Evidence, c string, t time.Time) int {
	inst := 0
	for _, e := range ev.Events {
		if e.Time.After(t) {
			break
		}
		if e.Container == c && e.Source == SrcWorkload {
			inst = e.Instance
		}
	}
	return inst
}

// NeverRecovers holds when container C never reads the file's content after its first failure after the kill,
// and the evidence covers at least For after the anchor (so "never" was watched long enough).
type NeverRecovers struct {
	C     string
	After Anchor
	For   Dur
}

func (c NeverRecovers) Describe() string {
	return fmt.Sprintf("%s never reads %q again (watched for %s %s)", c.C, Content, c.For, c.After.phrase())
}

func (c NeverRecovers) Label() string { return "while " + c.C + " reads nothing" }

func (c NeverRecovers) Containers() []string { return names(c.C) }

func (c NeverRecovers) Eval(ev *Evidence, t Timing) Result {
	f, ok := ev.FirstFailureAfterKill(c.C)
	if !ok {
		return Result{Why: fmt.Sprintf("%s never failed after the kill", c.C)}
	}
	if e, ok := ev.First(f.Time, func(e Event) bool { return e.Container == c.C && e.IsGoodRead() }); ok {
		return Result{Why: "it recovered: " + cite(ev, e)}
	}
	from, why := c.After.resolve(ev)
	if why != "" {
		return Result{Why: why}
	}
	watched := ev.Until.Sub(from)
	if watched < c.For.Resolve(t) {
		return Result{Why: fmt.Sprintf("watched only %.2fs %s, need %s", watched.Seconds(), c.After.phrase(), c.For.Explain(t))}
	}
	return Result{OK: true, Why: fmt.Sprintf("no good read from %s (first failure) to the end, %.2fs %s", at(ev, f.Time), watched.Seconds(), c.After.phrase())}
}

// KeepsFailing holds when the running container C fails with Errno after the anchor and its last read or open
// in the evidence failed with Errno too.
type KeepsFailing struct {
	C     string
	Errno string
	After Anchor
}

func (c KeepsFailing) Describe() string {
	return fmt.Sprintf("%s: reads keep failing with %s %s", c.C, c.Errno, c.After.phrase())
}

func (c KeepsFailing) Label() string { return "while " + c.C + " fails" }

func (c KeepsFailing) Containers() []string { return names(c.C) }

func (c KeepsFailing) Eval(ev *Evidence, _ Timing) Result {
	from, why := c.After.resolve(ev)
	if why != "" {
		return Result{Why: why}
	}
	n := ev.Count(from, func(e Event) bool { return e.Container == c.C && e.IsWorkloadError() && e.Errno == c.Errno })
	if n == 0 {
		return Result{Why: fmt.Sprintf("no %s of %s %s", c.Errno, c.C, c.After.phrase())}
	}
	last, _ := ev.Last(func(e Event) bool { return e.Container == c.C && (e.IsWorkloadError() || e.Kind == KRead) })
	if !last.IsWorkloadError() || last.Errno != c.Errno {
		return Result{Why: "the last read did not fail with " + c.Errno + ": " + cite(ev, last)}
	}
	return Result{OK: true, Why: fmt.Sprintf("%d × %s %s; last: %s", n, c.Errno, c.After.phrase(), cite(ev, last))}
}

// Restarts holds when container C was restarted (started again after its first start) between Min and Max
// times; Max < 0 means no upper bound.
type Restarts struct {
	C        string
	Min, Max int
}

func (c Restarts) Describe() string {
	switch {
	case c.Min == 0 && c.Max == 0:
		return fmt.Sprintf("%s is never restarted (restart count 0)", c.C)
	case c.Max < 0:
		return fmt.Sprintf("%s is restarted at least %d times", c.C, c.Min)
	}
	return fmt.Sprintf("%s is restarted %d to %d times", c.C, c.Min, c.Max)
}

func (c Restarts) Label() string { return "restarts of " + c.C }

func (c Restarts) Containers() []string { return names(c.C) }

func (c Restarts) Eval(ev *Evidence, _ Timing) Result {
	n := ev.Starts(c.C) - 1
	if n < 0 {
		return Result{Why: fmt.Sprintf("%s never started", c.C)}
	}
	why := fmt.Sprintf("restart count %d", n)
	return Result{OK: n >= c.Min && (c.Max < 0 || n <= c.Max), Why: why}
}

// VolumeDir holds when the last stat of the host volume dir after the anchor gave Errno ("" = success).
type VolumeDir struct {
	Errno string
	After Anchor
}

func (c VolumeDir) Describe() string {
	if c.Errno == "" {
		return "stat of the host volume dir fails after the kill and succeeds again " + c.After.phrase() + " (mounts restored)"
	}
	return fmt.Sprintf("stat of the host volume dir fails with %s %s", c.Errno, c.After.phrase())
}

func (c VolumeDir) Label() string {
	if c.Errno != "" {
		return "until volume dir " + c.Errno
	}
	return "until volume dir restored"
}

func (c VolumeDir) Containers() []string { return nil }

func (c VolumeDir) Eval(ev *Evidence, _ Timing) Result {
	from, why := c.After.resolve(ev)
	if why != "" {
		return Result{Why: why}
	}
	last, ok := ev.Last(func(e Event) bool { return e.Kind == KProbe && e.Path == PathVolume })
	if !ok {
		return Result{Why: "no stat of the volume dir in the evidence"}
	}
	state := func(e string) string {
		if e == "" {
			return "ok"
		}
		return e
	}
	// A probe event is recorded on change; the state at the end is the last one, and it must have been seen
	// after the anchor (or still be in force then).
	why = fmt.Sprintf("stat %s: %s since %s", ev.Paths[PathVolume], state(last.Errno), at(ev, last.Time))
	if last.Errno != c.Errno {
		return Result{Why: why}
	}
	if _, restored := ev.VolumeRestoredTime(); c.Errno == "" && !restored {
		// "restored" needs a failure after the kill first: a stat answered from the attribute cache
		// right after the kill proves nothing.
		return Result{Why: why + ", but it was never seen failing after the kill"}
	}
	if ev.Until.Before(from) {
		return Result{Why: "the evidence ends before the anchor"}
	}
	return Result{OK: true, Why: why}
}

// NeverFails holds when container C never fails during the whole run (no failed open or read, no non-zero
// exit, no failed start, no restart) and reads the file's content at least Reads times after the anchor: what
// "the workload never sees an error" means in the evidence.
type NeverFails struct {
	C     string
	After Anchor
	Reads int
}

func (c NeverFails) Describe() string {
	return fmt.Sprintf("%s never fails nor restarts during the whole run, and reads %q at least %d times %s",
		c.C, Content, c.Reads, c.After.phrase())
}

func (c NeverFails) Label() string { return "while " + c.C + " reads" }

func (c NeverFails) Containers() []string { return names(c.C) }

func (c NeverFails) Eval(ev *Evidence, _ Timing) Result {
	if f, ok := ev.First(time.Time{}, IsFailure(c.C)); ok {
		return Result{Why: "it failed: " + cite(ev, f)}
	}
	if n := ev.Starts(c.C); n != 1 {
		return Result{Why: fmt.Sprintf("%s started %d times, want once", c.C, n)}
	}
	from, why := c.After.resolve(ev)
	if why != "" {
		return Result{Why: why}
	}
	n := ev.Count(from, func(e Event) bool { return e.Container == c.C && e.IsGoodRead() })
	total := ev.Count(time.Time{}, func(e Event) bool { return e.Container == c.C && e.IsGoodRead() })
	why = fmt.Sprintf("no failure of %s in the run; %d good reads in all, %d %s", c.C, total, n, c.After.phrase())
	return Result{OK: n >= c.Reads, Why: why}
}

// BlocksUntilServed holds, for a pod whose FUSE sidecar was held back by Delay, when container C's first good
// read comes only after the sidecar has received the descriptor, at least Delay after the sidecar started,
// and C never fails: every access blocked until the sidecar served, and none failed.
type BlocksUntilServed struct {
	C     string
	Delay time.Duration
}

func (c BlocksUntilServed) Describe() string {
	return fmt.Sprintf("%s's first read waits, without an error, until the sidecar held back by %s serves", c.C, c.Delay)
}

func (c BlocksUntilServed) Label() string { return "until " + c.C + " reads" }

func (c BlocksUntilServed) Containers() []string { return names(c.C) }

func (c BlocksUntilServed) Eval(ev *Evidence, _ Timing) Result {
	started, served, first := ev.SidecarServes(c.C)
	switch {
	case started.IsZero():
		return Result{Why: "no start of the sidecar in the evidence"}
	case served.IsZero():
		return Result{Why: "the sidecar never received the descriptor"}
	}
	if f, ok := ev.First(time.Time{}, IsFailure(c.C)); ok {
		return Result{Why: "it failed: " + cite(ev, f)}
	}
	if first.IsZero() {
		return Result{Why: fmt.Sprintf("no good read of %s", c.C)}
	}
	why := fmt.Sprintf("sidecar started at %s, served %.3fs later; %s's first good read %.3fs after the sidecar started",
		ev.Since(started), served.Sub(started).Seconds(), c.C, first.Sub(started).Seconds())
	if s, ok := ev.First(time.Time{}, func(e Event) bool { return e.Container == c.C && e.Kind == KContainerStarted }); ok {
		why += fmt.Sprintf(" (its container started %.3fs after the sidecar)", s.Time.Sub(started).Seconds())
	}
	switch {
	case first.Before(served):
		return Result{Why: why + ": it read before the sidecar served"}
	case first.Sub(started) < c.Delay:
		return Result{Why: why + fmt.Sprintf(": sooner than the sidecar's delay %s", c.Delay)}
	}
	return Result{OK: true, Why: why}
}

// VolumeDirAlive holds when every stat of the host volume dir in the run succeeded (at least one was made):
// the mount never died, so nothing had to be mounted again.
type VolumeDirAlive struct{}

func (VolumeDirAlive) Describe() string {
	return "stat of the host volume dir never fails during the run"
}

func (VolumeDirAlive) Label() string { return "while the volume dir lives" }

func (VolumeDirAlive) Containers() []string { return nil }

func (VolumeDirAlive) Eval(ev *Evidence, _ Timing) Result {
	probe := func(e Event) bool { return e.Kind == KProbe && e.Path == PathVolume }
	first, ok := ev.First(time.Time{}, probe)
	if !ok {
		return Result{Why: "no stat of the volume dir in the evidence"}
	}
	if bad, ok := ev.First(time.Time{}, func(e Event) bool { return probe(e) && e.Errno != "" }); ok {
		return Result{Why: fmt.Sprintf("stat %s: %s at %s", ev.Paths[PathVolume], bad.Errno, at(ev, bad.Time))}
	}
	return Result{OK: true, Why: fmt.Sprintf("stat %s: ok from %s to the end (%s)", ev.Paths[PathVolume], at(ev, first.Time), ev.Since(ev.Until))}
}

// SidecarNeverServes holds when the pod's FUSE sidecar, started again after the anchor, never received a
// descriptor, and the evidence covers at least For after the anchor.
type SidecarNeverServes struct {
	After Anchor
	For   Dur
}

func (c SidecarNeverServes) Describe() string {
	return fmt.Sprintf("the sidecar never receives a descriptor again (watched for %s %s)", c.For, c.After.phrase())
}

func (c SidecarNeverServes) Label() string { return "while the sidecar has nothing" }

func (c SidecarNeverServes) Containers() []string { return nil }

func (c SidecarNeverServes) Eval(ev *Evidence, t Timing) Result {
	from, why := c.After.resolve(ev)
	if why != "" {
		return Result{Why: why}
	}
	if e, ok := ev.First(from, func(e Event) bool { return e.Component == topology.SidecarContainer && e.Kind == KReady }); ok {
		return Result{Why: "it served: " + cite(ev, e)}
	}
	if _, ok := ev.First(from, func(e Event) bool { return e.Component == topology.SidecarContainer && e.Kind == KStarted }); !ok {
		return Result{Why: "no start of the sidecar " + c.After.phrase()}
	}
	watched := ev.Until.Sub(from)
	if watched < c.For.Resolve(t) {
		return Result{Why: fmt.Sprintf("watched only %.2fs %s, need %s", watched.Seconds(), c.After.phrase(), c.For.Explain(t))}
	}
	return Result{OK: true, Why: fmt.Sprintf("no descriptor received in %.2fs %s", watched.Seconds(), c.After.phrase())}
}

// NoGoodReadUntil holds when container C, after its first failure after the kill, reads the file's content
// no more until Component is killed (e.g. the pod deleted): nothing short of that brought it back.
type NoGoodReadUntil struct {
	C         string
	Component topology.Component
}

func (c NoGoodReadUntil) Describe() string {
	return fmt.Sprintf("%s reads %q no more until the %s is killed", c.C, Content, c.Component.Noun())
}

func (c NoGoodReadUntil) Label() string { return "while " + c.C + " reads nothing" }

func (c NoGoodReadUntil) Containers() []string { return names(c.C) }

func (c NoGoodReadUntil) Eval(ev *Evidence, _ Timing) Result {
	f, ok := ev.FirstFailureAfterKill(c.C)
	if !ok {
		return Result{Why: fmt.Sprintf("%s never failed after the kill", c.C)}
	}
	k, ok := ev.First(f.Time, func(e Event) bool { return e.Kind == KKilled && e.Component == c.Component })
	if !ok {
		return Result{Why: fmt.Sprintf("the %s was not killed after %s's failure", c.Component.Noun(), c.C)}
	}
	if e, ok := ev.First(f.Time, func(e Event) bool { return e.Container == c.C && e.IsGoodRead() }); ok && e.Time.Before(k.Time) {
		return Result{Why: "it read again before: " + cite(ev, e)}
	}
	n := ev.Count(f.Time, func(e Event) bool { return e.Container == c.C && e.IsWorkloadError() && !e.Time.After(k.Time) })
	return Result{OK: true, Why: fmt.Sprintf("%d failed reads or opens and no good read from %s to the %s's kill at %s",
		n, at(ev, f.Time), c.Component.Noun(), at(ev, k.Time))}
}

func names(c string) []string {
	if c == "" {
		return nil
	}
	return []string{c}
}

// Evaluate checks the expectations of s that apply to the kubelet version of ev against ev. An expectation
// that depends on the version fails when the evidence does not say which kubelet the run was on.
func Evaluate(s *Scenario, ev *Evidence, t Timing) []Verdict {
	out := make([]Verdict, 0, len(s.Expect))
	for i, e := range s.Expect {
		switch {
		case !e.Kubelet.All() && !ev.Kubelet.Known():
			out = append(out, Verdict{Index: i, Expectation: e, Result: Result{
				Why: "the evidence does not say which kubelet version the run was on, and this outcome depends on it"}})
		case e.Kubelet.Contains(ev.Kubelet):
			out = append(out, Verdict{Index: i, Expectation: e, Result: e.Check.Eval(ev, t)})
		}
	}
	return out
}
