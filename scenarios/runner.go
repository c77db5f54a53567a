package scenarios

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// RunOptions configure Run.
type RunOptions struct {
	// Dir is the run directory: the backend's logs, events and the report go there.
	Dir string
	// Out receives the live timeline; nil discards it.
	Out io.Writer
	// Poll is how often the evidence is polled while waiting (default 100ms).
	Poll time.Duration
}

// Outcome is the result of one run of a scenario.
type Outcome struct {
	Scenario Scenario
	Backend  string
	// Kubelet is the kubelet version the run was on, from the evidence; the verdicts are taken against the
	// expectations for it.
	Kubelet KubeletVersion
	Timing  Timing
	Dir     string
	// Artifacts are the files the backend wrote into Dir (its logs), by name; the report adds its own.
	Artifacts []string
	// Start and End bound the whole run, setup and teardown included.
	Start, End time.Time
	// Evidence is the snapshot taken after the last step, before teardown; the verdicts judge it.
	Evidence *Evidence
	Verdicts []Verdict
	Measures Measures
	// Steps records when each step ran and whether it timed out.
	Steps []StepRecord
	// Err says why the run could not be carried out (setup failed, an action failed, cancelled).
	Err error
	// CleanupErr says what teardown could not clean.
	CleanupErr error
	// KeepNote is what the backend left in place (when told to keep it) and how to remove it.
	KeepNote string
}

// StepRecord is one executed step.
type StepRecord struct {
	Step       Step
	Start, End time.Time
	TimedOut   bool
	Err        error
}

// NotRunnableError is a backend's refusal of a scenario its environment cannot run as the catalog means it (a
// cluster whose kubelet lacks a feature gate the scenario needs): the run is neither PASS nor FAIL but NOT
// RUNNABLE, and Fix says what makes it runnable.
type NotRunnableError struct {
	Why, Fix string
}

func (e *NotRunnableError) Error() string {
	return "not runnable on this cluster: " + e.Why + "; to make it runnable: " + e.Fix
}

// NotRunnable returns why the run could not be carried out on this backend as configured, or nil.
func (o *Outcome) NotRunnable() *NotRunnableError {
	var e *NotRunnableError
	if errors.As(o.Err, &e) {
		return e
	}
	return nil
}

// Result is the run's verdict in one word: PASS, FAIL, or NOT RUNNABLE (which is not a pass either); MEASURED
// for a passed run of a Scenario.Measured row (its evidence was collected; nothing was expected of it).
func (o *Outcome) Result() string {
	switch {
	case o.Passed() && o.Scenario.Measured:
		return "MEASURED"
	case o.Passed():
		return "PASS"
	case o.NotRunnable() != nil && o.CleanupErr == nil:
		return "NOT RUNNABLE"
	}
	return "FAIL"
}

// Passed reports whether the run was carried out, cleaned up, and every expected outcome held.
func (o *Outcome) Passed() bool {
	if o.Err != nil || o.CleanupErr != nil || len(o.Verdicts) == 0 {
		return false
	}
	for _, v := range o.Verdicts {
		if !v.Result.OK {
			return false
		}
	}
	return true
}

// Run runs scenario sc on backend b: setup, steps, verdicts, teardown. It never panics on backend errors;
// they end up in Outcome.Err or Outcome.CleanupErr, and Passed is then false.
func Run(ctx context.Context, b Backend, sc Scenario, opts RunOptions) *Outcome {
	r := NewRunner(b, sc, opts)
	if r.Setup(ctx) == nil {
		r.Steps(ctx)
	}
	return r.Teardown(ctx)
}

// Runner runs one scenario on one backend in three phases, Setup, Steps and Teardown, so that a test
// framework can map them onto its own (scenarios/kube/e2e); Run calls all three. The runner owns the run
// directory and the evidence: the backend records into it, the runner snapshots and judges it.
type Runner struct {
	b    Backend
	o    *Outcome
	env  *Env
	poll time.Duration
	narr *Narrator
	// own holds the runner's events (steps), merged into every snapshot.
	own      []Event
	judged   bool
	tornDown bool
}

// NewRunner prepares a run of sc on b.
func NewRunner(b Backend, sc Scenario, opts RunOptions) *Runner {
	if opts.Poll <= 0 {
		opts.Poll = 100 * time.Millisecond
	}
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	o := &Outcome{Scenario: sc, Backend: b.Name(), Timing: b.Timing(), Dir: opts.Dir, Start: time.Now()}
	return &Runner{b: b, o: o, poll: opts.Poll, narr: NewNarrator(opts.Out, o.Start)}
}

// Outcome is the outcome so far: complete after Teardown.
func (r *Runner) Outcome() *Outcome { return r.o }

// Setup validates the scenario and has the backend deploy it. An error is also kept in Outcome.Err.
func (r *Runner) Setup(ctx context.Context) error {
	if err := r.setup(ctx); err != nil {
		r.o.Err = err
		if r.o.NotRunnable() != nil {
			r.judge() // nothing to judge, but the kubelet it was refused on is known now (NotRunnableExpected)
		}
		return err
	}
	return nil
}

func (r *Runner) setup(ctx context.Context) error {
	if err := r.o.Scenario.Validate(); err != nil {
		return err
	}
	if err := r.o.Scenario.RunsOn(r.b.Name()); err != nil {
		return err
	}
	env, err := NewEnv(r.o.Dir)
	if err != nil {
		return fmt.Errorf("run dir: %w", err)
	}
	r.env = env
	if err := r.b.Setup(ctx, &r.o.Scenario, env); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	return nil
}

// Steps performs the scenario's steps, has the backend collect what the writers wrote (collectWrites), then
// judges the evidence observed so far: the verdicts and measures.
// It returns the error that stopped the steps (also kept in Outcome.Err); a wait that timed out is recorded
// in the step, not an error.
func (r *Runner) Steps(ctx context.Context) error {
	if r.o.Err == nil {
		r.o.Err = r.steps(ctx)
	}
	if r.o.Err == nil {
		r.o.Err = r.collectWrites(ctx)
	}
	r.judge()
	return r.o.Err
}

func (r *Runner) steps(ctx context.Context) error {
	if r.env == nil {
		return errors.New("steps without a successful setup")
	}
	sc := &r.o.Scenario
	for i, st := range sc.Steps {
		rec := StepRecord{Step: st, Start: time.Now()}
		r.own = append(r.own, Event{Time: rec.Start, Source: SrcRunner, Kind: KStep,
			Message: fmt.Sprintf("step %d/%d: %s", i+1, len(sc.Steps), st.Describe(r.o.Timing))})
		rec.TimedOut, rec.Err = r.step(ctx, st)
		rec.End = time.Now()
		r.o.Steps = append(r.o.Steps, rec)
		if rec.TimedOut {
			r.own = append(r.own, Event{Time: rec.End, Source: SrcRunner, Kind: KStepTimeout,
				Message: fmt.Sprintf("step %d timed out: %s", i+1, st.Until.Describe())})
		}
		if rec.Err != nil {
			return fmt.Errorf("step %d (%s): %w", i+1, st.Label(), rec.Err)
		}
	}
	return nil
}

// judge evaluates the expectations against what was observed up to now, before teardown adds its own events;
// a run the backend found not runnable has none judged (its report says NOT RUNNABLE and why, nothing else).
func (r *Runner) judge() {
	if r.judged {
		return
	}
	r.judged = true
	r.o.Evidence = r.snapshot()
	r.narr.Update(r.o.Evidence)
	r.o.Kubelet = r.o.Evidence.Kubelet
	if r.o.NotRunnable() != nil {
		return // the backend refused the run before any step: no expected outcome is judged, none is a FAIL
	}
	r.o.Verdicts = Evaluate(&r.o.Scenario, r.o.Evidence, r.o.Timing)
	if cs := r.o.Scenario.Pod.Containers; len(cs) > 0 {
		r.o.Measures = r.o.Evidence.Measure(cs[0].Name)
	}
}

// Teardown has the backend stop everything (bounded by Timing.Teardown, also when ctx is cancelled) and
// completes the outcome. A run whose Steps did not run is judged on what setup observed.
func (r *Runner) Teardown(ctx context.Context) *Outcome {
	if r.tornDown {
		return r.o
	}
	r.tornDown = true
	r.judge()
	timeout := r.o.Timing.Teardown
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	r.o.CleanupErr = r.b.Stop(stopCtx)
	r.o.KeepNote = r.b.KeepNote()
	if r.env != nil {
		r.o.Artifacts = r.env.Artifacts()
	}
	r.o.End = time.Now()
	r.o.Measures.Wall = r.o.End.Sub(r.o.Start)
	return r.o
}

// step performs one step; a wait that times out is reported, not an error.
func (r *Runner) step(ctx context.Context, st Step) (timedOut bool, err error) {
	switch st.Action {
	case ActKill:
		err = r.b.Kill(ctx, st.Component)
	case ActStart:
		err = r.b.Start(ctx, st.Component)
	case ActUpgrade:
		err = r.b.Upgrade(ctx, st.Component)
	case ActWaitFor:
		err = Await(ctx, st.Timeout.Resolve(r.o.Timing), r.poll, st.Until.Describe(), func() (bool, error) {
			ev := r.snapshot()
			r.narr.Update(ev)
			return st.Until.Eval(ev, r.o.Timing).OK, nil
		})
		if IsTimeout(err) {
			return true, nil
		}
		return false, err
	case ActObserve:
		end := time.Now().Add(st.For.Resolve(r.o.Timing))
		for time.Now().Before(end) {
			r.narr.Update(r.snapshot())
			if err := Sleep(ctx, min(r.poll, time.Until(end))); err != nil {
				return false, err
			}
		}
	default:
		err = fmt.Errorf("unknown action %q", st.Action)
	}
	if err == nil {
		r.narr.Update(r.snapshot())
	}
	return false, err
}

// runnerEvent is an event of the runner's own, now.
func runnerEvent(k Kind, msg string) Event {
	return Event{Time: time.Now(), Source: SrcRunner, Kind: k, Message: msg}
}

// snapshot is the recorded evidence with the runner's own events merged in.
func (r *Runner) snapshot() *Evidence {
	var ev *Evidence
	if r.env != nil {
		ev = r.env.Rec.Snapshot()
	} else {
		ev = &Evidence{Until: time.Now(), Paths: map[string]string{}}
	}
	ev.Start = r.o.Start // t = 0 is the start of the run, for every backend
	ev.Events = append(ev.Events, r.own...)
	ev.Sort()
	return ev
}

// ErrCancelled reports whether the run ended because its context was cancelled (e.g. Ctrl-C).
func (o *Outcome) ErrCancelled() bool {
	return errors.Is(o.Err, context.Canceled)
}
