package scenarios

import (
	"context"
	"os"
	"sync"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/contract"
)

// probedPaths are the host paths every backend watches, in the order they are probed.
var probedPaths = []string{PathVolume, PathStaging}

// ProbeStates records a KProbe event whenever the result of probing a path changes; safe for concurrent use.
type ProbeStates struct {
	rec  *Recorder
	mu   sync.Mutex
	last map[string]string
}

// NewProbeStates returns a ProbeStates recording into rec.
func NewProbeStates(rec *Recorder) *ProbeStates {
	return &ProbeStates{rec: rec, last: map[string]string{}}
}

// Observe records that probing the path labelled label gave state ("" for success, else an errno name or
// error text) at t, found by how ("stat", "read through a probe pod"), if that differs from the last result.
func (p *ProbeStates) Observe(label, state string, t time.Time, how string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if prev, seen := p.last[label]; seen && prev == state {
		return
	}
	p.last[label] = state
	p.rec.Add(Event{Time: t, Source: SrcProbe, Kind: KProbe, Path: label, Errno: state, Message: how})
}

// StatHostPaths stats the volume and staging dirs in paths (label → host path) every interval until ctx ends
// and records every change of the result into rec. A stat that hangs (a FUSE server alive but stuck) stalls
// the probe, not the run; dummy-fuse never hangs.
func StatHostPaths(ctx context.Context, rec *Recorder, paths map[string]string, interval time.Duration) {
	states := NewProbeStates(rec)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		for _, label := range probedPaths {
			_, err := os.Stat(paths[label])
			states.Observe(label, statState(err), time.Now(), "stat")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// statState is a probe's state for the error of a stat: "" for success, else the errno's name or the text.
func statState(err error) string {
	if err == nil {
		return ""
	}
	if s := contract.ErrnoName(err); s != "" {
		return s
	}
	return err.Error()
}
