package restore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/state"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
)

// fakeRestorer records the order of calls and how many volumes were in flight at once.
type fakeRestorer struct {
	failStage map[string]bool
	gone      map[string]bool // volumes whose kubelet directories are gone

	mu          sync.Mutex
	staged      map[string]bool
	events      []string
	inFlight    int
	maxInFlight int
	release     chan struct{} // stages wait on it, so that workers pile up
}

func (f *fakeRestorer) RestoreStage(_ context.Context, _ *mounts.Table, rec state.Stage) (string, error) {
	f.mu.Lock()
	f.inFlight++
	if f.inFlight > f.maxInFlight {
		f.maxInFlight = f.inFlight
	}
	f.mu.Unlock()
	<-f.release
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inFlight--
	f.events = append(f.events, "stage "+rec.VolumeID)
	if f.failStage[rec.VolumeID] {
		return "", errors.New("injected failure")
	}
	if f.gone[rec.VolumeID] {
		return "", ErrKubeletDone
	}
	f.staged[rec.VolumeID] = true
	return "remounted", nil
}

func (f *fakeRestorer) RestorePublish(_ context.Context, _ *mounts.Table, rec state.Publish) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gone[rec.VolumeID] {
		f.events = append(f.events, "forget "+rec.TargetPath)
		return "", ErrKubeletDone
	}
	if !f.staged[rec.VolumeID] {
		return "", fmt.Errorf("publish of %s before its stage", rec.VolumeID)
	}
	f.events = append(f.events, "publish "+rec.TargetPath)
	return "stacked", nil
}

// waitInFlight waits until n stages are in flight, all waiting on f.release.
func (f *fakeRestorer) waitInFlight(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		f.mu.Lock()
		got := f.inFlight
		f.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d stages in flight, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestRunOrdersAndBoundsWork(t *testing.T) {
	const volumes, workers = 40, 4
	var stages []state.Stage
	var pubs []state.Publish
	for i := 0; i < volumes; i++ {
		id := fmt.Sprintf("vol-%02d", i)
		stages = append(stages, state.Stage{VolumeID: id, StagingPath: "/s/" + id})
		for _, pod := range []string{"a", "b"} {
			pubs = append(pubs, state.Publish{VolumeID: id, StagingPath: "/s/" + id, TargetPath: "/p/" + pod + "/" + id})
		}
	}
	pubs = append(pubs, state.Publish{VolumeID: "orphan", StagingPath: "/s/orphan", TargetPath: "/p/orphan"})
	f := &fakeRestorer{failStage: map[string]bool{"vol-07": true}, gone: map[string]bool{"vol-13": true}, staged: map[string]bool{}, release: make(chan struct{})}

	done := make(chan Result)
	go func() { done <- Run(context.Background(), stages, pubs, workers, f) }()
	f.waitInFlight(t, workers) // let the workers fill up, then let everything through
	close(f.release)
	res := <-done

	if f.maxInFlight != workers {
		t.Errorf("max volumes in flight = %d, want %d", f.maxInFlight, workers)
	}
	// 38 stages + 76 publishes restored; vol-07's stage failed; its 2 publishes and the orphan skipped; vol-13's
	// stage and its 2 publishes forgotten (the publishes still get their turn, to be forgotten too).
	want := Result{OK: 38 + 76, Failed: 1, Skipped: 3, Forgotten: 3}
	if res != want {
		t.Errorf("Run = %+v, want %+v", res, want)
	}
	if !slices.Contains(f.events, "forget /p/a/vol-13") || !slices.Contains(f.events, "forget /p/b/vol-13") {
		t.Errorf("the publishes of a volume whose stage was forgotten were not offered to the restorer: %v", f.events)
	}
	for _, e := range f.events {
		if e == "publish /p/a/vol-07" || e == "publish /p/orphan" {
			t.Errorf("restored %q although it cannot answer", e)
		}
	}
}

func TestParseStrategy(t *testing.T) {
	for _, s := range []string{"rebind", "stack"} {
		if got, err := ParseStrategy(s); err != nil || string(got) != s {
			t.Errorf("ParseStrategy(%q) = %q, %v", s, got, err)
		}
	}
	if _, err := ParseStrategy("Stack"); err == nil {
		t.Error("ParseStrategy accepted a wrong case")
	}
}

// TestRunStopsStartingWhenItsContextEnds: once the plugin stops (ctx ends), the volumes under way finish and no
// other is started; they count as skipped, for the next start to restore. The plugin's exit never waits for a
// whole restore.
func TestRunStopsStartingWhenItsContextEnds(t *testing.T) {
	const volumes, workers = 10, 2
	var stages []state.Stage
	var pubs []state.Publish
	for i := range volumes {
		id := fmt.Sprintf("vol-%02d", i)
		stages = append(stages, state.Stage{VolumeID: id, StagingPath: "/s/" + id})
		pubs = append(pubs, state.Publish{VolumeID: id, StagingPath: "/s/" + id, TargetPath: "/p/a/" + id})
	}
	f := &fakeRestorer{staged: map[string]bool{}, release: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan Result)
	go func() { done <- Run(ctx, stages, pubs, workers, f) }()
	f.waitInFlight(t, workers)
	cancel()
	close(f.release)
	res := <-done
	want := Result{OK: 2 * workers, Skipped: 2 * (volumes - workers)}
	if res != want {
		t.Errorf("Run after its context ended = %+v, want %+v (the volumes under way restored, no other started)", res, want)
	}
}
