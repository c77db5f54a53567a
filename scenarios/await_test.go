package scenarios

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestAwait: Await checks at once, ends with its condition, its context or its timeout, and its timeout's error
// says what it waited for and how long.
func TestAwait(t *testing.T) {
	ctx := context.Background()

	calls := 0
	start := time.Now()
	if err := Await(ctx, time.Minute, time.Hour, "a met condition", func() (bool, error) { calls++; return true, nil }); err != nil || calls != 1 {
		t.Errorf("a met condition: %v after %d checks, want nil after 1", err, calls)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("a met condition took %s: the first check must not wait", d)
	}

	calls = 0
	if err := Await(ctx, time.Minute, time.Millisecond, "the third check", func() (bool, error) { calls++; return calls == 3, nil }); err != nil || calls != 3 {
		t.Errorf("met at the third check: %v after %d checks", err, calls)
	}

	start = time.Now()
	err := Await(ctx, 50*time.Millisecond, 5*time.Millisecond, "the plugin to serve", func() (bool, error) { return false, nil })
	if d := time.Since(start); d < 50*time.Millisecond || d > 5*time.Second {
		t.Errorf("never met: returned after %s, want about 50ms", d)
	}
	if err == nil || err.Error() != "waited 50ms for the plugin to serve" || !IsTimeout(err) {
		t.Errorf("never met: %v, want a timeout naming what and how long", err)
	}

	notYet := errors.New("Probe: not ready")
	err = Await(ctx, 10*time.Millisecond, time.Millisecond, "the plugin to serve", func() (bool, error) { return false, notYet })
	if err == nil || err.Error() != "waited 10ms for the plugin to serve: Probe: not ready" || !errors.Is(err, notYet) || !IsTimeout(err) {
		t.Errorf("never met, with a reason: %v, want a timeout that wraps the last reason", err)
	}

	exited := errors.New("the plugin exited")
	calls = 0
	err = Await(ctx, time.Minute, time.Millisecond, "the plugin to serve", func() (bool, error) { calls++; return calls == 2, exited })
	if err != exited || calls != 2 {
		t.Errorf("given up at the second check: %v after %d checks, want its error at once", err, calls)
	}

	cctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(20*time.Millisecond, cancel)
	start = time.Now()
	err = Await(cctx, time.Hour, time.Millisecond, "nothing", func() (bool, error) { return false, nil })
	if !errors.Is(err, context.Canceled) || IsTimeout(err) || time.Since(start) > 5*time.Second {
		t.Errorf("cancelled: %v after %s, want the context's error at once", err, time.Since(start))
	}

	// An interval of 0 is for a condition that blocks by itself; the wait stays bounded.
	start = time.Now()
	err = Await(ctx, 30*time.Millisecond, 0, "a blocking check", func() (bool, error) { time.Sleep(5 * time.Millisecond); return false, nil })
	if !IsTimeout(err) || time.Since(start) > 5*time.Second {
		t.Errorf("interval 0: %v after %s, want a timeout", err, time.Since(start))
	}
}
