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
	// StopTimeout bounds the backend's teardown (default 60s).
	StopTimeout time.Duration
}

// Outcome is the result of one run of a scenario.
type Outcome struct {
	Scenario Scenario
	Backend  string
	Timing   Timing
	Dir      string
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
}

// StepRecord is one executed step.
type StepRecord struct {
	Step       Step
	Start, End time.Time
	TimedOut   bool
	Err        error
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
	if opts.Poll <= 0 {
		opts.Poll = 100 * time.Millisecond
	}
	if opts.StopTimeout <= 0 {
		opts.StopTimeout = 60 * time.Second
	}
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	o := &Outcome{Scenario: sc, Backend: b.Name(), Timing: b.Timing(), Dir: opts.Dir, Start: time.Now()}
	r := &runner{b: b, o: o, poll: opts.Poll, narr: newNarrator(opts.Out, o.Start)}
	if err := sc.Validate(); err != nil {
		o.Err = err
		o.End = time.Now()
		return o
	}

	o.Err = r.run(ctx)
	// The verdicts judge what was observed up to now, before teardown adds its own events.
	if ev, err := r.snapshot(context.WithoutCancel(ctx)); err == nil {
		o.Evidence = ev
		r.narr.update(ev)
	} else if o.Err == nil {
		o.Err = fmt.Errorf("collect evidence: %w", err)
	}
	if o.Evidence == nil {
		o.Evidence = &Evidence{Start: o.Start, Until: time.Now()}
	}
	o.Verdicts = Evaluate(&o.Scenario, o.Evidence, o.Timing)
	if len(sc.Pod.Containers) > 0 {
		o.Measures = o.Evidence.Measure(sc.Pod.Containers[0].Name)
	}

	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opts.StopTimeout)
	defer cancel()
	o.CleanupErr = b.Stop(stopCtx)
	o.End = time.Now()
	o.Measures.Wall = o.End.Sub(o.Start)
	return o
}

type runner struct {
	b    Backend
	o    *Outcome
	poll time.Duration
	narr *narrator
	// own holds the runner's events (steps), merged into every snapshot.
	own []Event
}

func (r *runner) run(ctx context.Context) error {
	sc := &r.o.Scenario
	if err := r.b.Start(ctx, sc, r.o.Dir); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
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
			return fmt.Errorf("step %d (%s): %w", i+1, st.Action, rec.Err)
		}
	}
	return nil
}

// step performs one step; a wait that times out is reported, not an error.
func (r *runner) step(ctx context.Context, st Step) (timedOut bool, err error) {
	switch st.Action {
	case ActKillPlugin:
		err = r.b.KillPlugin(ctx)
	case ActStartPlugin:
		err = r.b.StartPlugin(ctx)
	case ActWaitFor:
		deadline := time.Now().Add(st.Timeout.Resolve(r.o.Timing))
		for {
			ev, err := r.snapshot(ctx)
			if err != nil {
				return false, err
			}
			r.narr.update(ev)
			if st.Until.Eval(ev, r.o.Timing).OK {
				return false, nil
			}
			if time.Now().After(deadline) {
				return true, nil
			}
			if err := Sleep(ctx, r.poll); err != nil {
				return false, err
			}
		}
	case ActObserve:
		end := time.Now().Add(st.For.Resolve(r.o.Timing))
		for time.Now().Before(end) {
			ev, err := r.snapshot(ctx)
			if err != nil {
				return false, err
			}
			r.narr.update(ev)
			if err := Sleep(ctx, min(r.poll, time.Until(end))); err != nil {
				return false, err
			}
		}
	default:
		err = fmt.Errorf("unknown action %q", st.Action)
	}
	if err == nil {
		if ev, serr := r.snapshot(ctx); serr == nil {
			r.narr.update(ev)
		}
	}
	return false, err
}

// snapshot is the backend's evidence with the runner's own events merged in.
func (r *runner) snapshot(ctx context.Context) (*Evidence, error) {
	ev, err := r.b.Evidence(ctx)
	if err != nil {
		return nil, err
	}
	ev.Start = r.o.Start // t = 0 is the start of the run, for every backend
	ev.Events = append(ev.Events, r.own...)
	ev.Sort()
	return ev, nil
}

// ErrCancelled reports whether the run ended because its context was cancelled (e.g. Ctrl-C).
func (o *Outcome) ErrCancelled() bool {
	return errors.Is(o.Err, context.Canceled)
}
