package scenarios

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Await checks cond at once, then every interval, until it is done, at most timeout: every wait of the harness
// on a process, a status file or the evidence is this one, so that none can hang and each says, when it fails,
// what it waited for.
//
// cond reports whether the wait is over. Done with a nil error, Await returns nil; done with an error, Await
// returns that error at once (a wait that can no longer succeed, e.g. the process it waits on has exited). Not
// done, its error (if any) says why not yet: the last one is wrapped in the timeout's error.
//
// When timeout has passed at a check, Await returns a *TimeoutError naming what (a phrase that reads after
// "waited 30s for": "the plugin to serve") and timeout. When ctx ends during an interval, it returns ctx's
// error. An interval of 0 is for a cond that itself blocks a while (as a poll(2) with a timeout does).
func Await(ctx context.Context, timeout, interval time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		done, err := cond()
		if done {
			return err
		}
		if time.Now().After(deadline) {
			return &TimeoutError{What: what, Timeout: timeout, Last: err}
		}
		if err := Sleep(ctx, interval); err != nil {
			return err
		}
	}
}

// TimeoutError is Await's error when its time is up.
type TimeoutError struct {
	// What is what was awaited, as it reads after "waited 30s for".
	What    string
	Timeout time.Duration
	// Last is the condition's last word on why it was not met yet, if it said one.
	Last error
}

func (e *TimeoutError) Error() string {
	s := fmt.Sprintf("waited %s for %s", e.Timeout, e.What)
	if e.Last != nil {
		s += ": " + e.Last.Error()
	}
	return s
}

func (e *TimeoutError) Unwrap() error { return e.Last }

// IsTimeout reports whether err is (or wraps) an Await that ran out of time.
func IsTimeout(err error) bool {
	var t *TimeoutError
	return errors.As(err, &t)
}

// Sleep waits for d or until ctx is done, whichever comes first; it returns ctx's error in the latter case.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
