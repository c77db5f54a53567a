package scenarios

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// Recorder collects a backend's evidence of a run; its methods are safe for concurrent use.
type Recorder struct {
	mu      sync.Mutex
	events  []Event
	stored  []Stored
	paths   map[string]string
	kubelet KubeletVersion
}

// Add records e, stamping it now when it has no time.
func (r *Recorder) Add(e Event) {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// AddStored records an object read from the volume's storage (StorageReader), with an event that says what
// was found.
func (r *Recorder) AddStored(s Stored) {
	r.Add(Event{Source: SrcStorage, Kind: KStored, Container: s.Container, Path: s.Name, Message: s.text()})
	r.mu.Lock()
	r.stored = append(r.stored, s)
	r.mu.Unlock()
}

// SetPaths replaces the named host paths the evidence refers to (PathRoot, PathVolume, PathStaging).
func (r *Recorder) SetPaths(p map[string]string) {
	r.mu.Lock()
	r.paths = maps.Clone(p)
	r.mu.Unlock()
}

// SetKubelet records the version of the kubelet the run is on.
func (r *Recorder) SetKubelet(v KubeletVersion) {
	r.mu.Lock()
	r.kubelet = v
	r.mu.Unlock()
}

// Snapshot returns a sorted copy of everything recorded so far, with Until set to now.
func (r *Recorder) Snapshot() *Evidence {
	r.mu.Lock()
	defer r.mu.Unlock()
	ev := &Evidence{Until: time.Now(), Paths: map[string]string{}, Kubelet: r.kubelet, Events: append([]Event(nil), r.events...),
		Stored: slices.Clone(r.stored)}
	maps.Copy(ev.Paths, r.paths)
	ev.Sort()
	return ev
}

// Count counts the recorded events matching f.
func (r *Recorder) Count(f func(Event) bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if f(e) {
			n++
		}
	}
	return n
}

// AwaitRestart waits until component c has started again after its last kill (a KStarted after its last
// KKilled), at most timeout: for a component that its platform starts again by itself, as kubelet does a native
// sidecar.
func (r *Recorder) AwaitRestart(ctx context.Context, c topology.Component, timeout time.Duration) error {
	return r.awaitAfterKill(ctx, c, KStarted, "start", timeout)
}

// AwaitReady waits until component c serves again after its last kill (a KReady after its last KKilled), at
// most timeout: for a component that another one starts again, as the keeper does its FUSE servers.
func (r *Recorder) AwaitReady(ctx context.Context, c topology.Component, timeout time.Duration) error {
	return r.awaitAfterKill(ctx, c, KReady, "serve", timeout)
}

func (r *Recorder) awaitAfterKill(ctx context.Context, c topology.Component, kind Kind, verb string, timeout time.Duration) error {
	what := fmt.Sprintf("the %s to %s again after its kill", c.Noun(), verb)
	return Await(ctx, timeout, 20*time.Millisecond, what, func() (bool, error) {
		var killed, after time.Time
		r.mu.Lock()
		for _, e := range r.events {
			switch {
			case e.Component != c:
			case e.Kind == KKilled && e.Time.After(killed):
				killed = e.Time
			case e.Kind == kind && e.Time.After(after):
				after = e.Time
			}
		}
		r.mu.Unlock()
		switch {
		case killed.IsZero():
			return true, fmt.Errorf("the %s was not killed", c.Noun())
		case after.After(killed):
			return true, nil
		}
		return false, fmt.Errorf("it did not %s again since its kill at %s", verb, killed.Format("15:04:05.000"))
	})
}

// Await waits until an event that match accepts is recorded, at most timeout, checking at once and then every
// interval (see the function Await, whose what it takes). fail, when not nil, is asked each time the event is not
// there yet: an error of it ends the wait at once, as one that says the event can no longer come.
func (r *Recorder) Await(ctx context.Context, timeout, interval time.Duration, what string, match func(Event) bool, fail func() error) error {
	return Await(ctx, timeout, interval, what, func() (bool, error) {
		if r.Count(match) > 0 {
			return true, nil
		}
		if fail == nil {
			return false, nil
		}
		err := fail()
		return err != nil, err
	})
}
