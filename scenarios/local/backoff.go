package local

import "time"

// restartBackoff is kubelet's container restart back-off (its crashLoopBackOff, a client-go flowcontrol.Backoff
// keyed by pod and container), shrunk by a factor for fast runs:
//   - before a restart, kubelet checks whether now - (the exited container's FinishedAt) < the current delay;
//     if so it waits ("Back-off restarting failed container"), otherwise it doubles the delay (starting at
//     base, capped at max) and tries to start;
//   - a failed start attempt (CreateContainerError, e.g. the failed stat) leaves no exited container behind,
//     so FinishedAt stays that of the last run, and the pod worker syncs the pod again after its back-off
//     period (10 s plus up to 50 % jitter; here one base, no jitter); a sync starts the container when the
//     doubled delay has passed since FinishedAt: attempts at +0, +1, +2, +4, +8 … bases after an exit, then,
//     once the delay is capped, at every sync;
//   - the entry resets when the last update is older than 10 minutes (kubelet's HasExpiredFunc), scaled here
//     like the base (60 bases).
type restartBackoff struct {
	base, max time.Duration
	delay     time.Duration // 0: no entry
	updated   time.Time
}

func (b *restartBackoff) expired(eventTime time.Time) bool {
	return b.delay == 0 || eventTime.Sub(b.updated) > 60*b.base
}

// wait returns how long to wait before a restart attempt of a container that finished at finished.
func (b *restartBackoff) wait(finished, now time.Time) time.Duration {
	if b.expired(finished) {
		return 0
	}
	if d := b.delay - now.Sub(finished); d > 0 {
		return d
	}
	return 0
}

// next records an attempt made now for a container that finished at finished, growing the delay.
func (b *restartBackoff) next(finished, now time.Time) {
	if b.expired(finished) {
		b.delay = b.base
	} else {
		b.delay = min(2*b.delay, b.max)
	}
	b.updated = now
}

// sync is one kubelet sync of the pod at now for a container that finished at finished: it reports whether
// kubelet starts the container (and then grows the delay) or leaves it in back-off.
func (b *restartBackoff) sync(finished, now time.Time) bool {
	if b.wait(finished, now) > 0 {
		return false
	}
	b.next(finished, now)
	return true
}
