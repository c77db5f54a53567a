package scenarios

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// TestAwaitAfterKill: only an event of the awaited kind after the component's last kill ends the wait.
func TestAwaitAfterKill(t *testing.T) {
	ctx := context.Background()
	t0 := time.Now()
	var r Recorder
	if err := r.AwaitReady(ctx, topology.FuseServer, time.Millisecond); err == nil || !strings.Contains(err.Error(), "not killed") {
		t.Fatalf("before any kill: %v, want \"not killed\"", err)
	}
	r.Add(Event{Time: t0, Component: topology.FuseServer, Kind: KReady})
	r.Add(Event{Time: t0.Add(time.Second), Component: topology.FuseServer, Kind: KKilled})
	r.Add(Event{Time: t0.Add(2 * time.Second), Component: topology.FuseServer, Kind: KStarted})    // not the awaited kind
	r.Add(Event{Time: t0.Add(2 * time.Second), Component: topology.KeeperContainer, Kind: KReady}) // another component
	if err := r.AwaitReady(ctx, topology.FuseServer, 30*time.Millisecond); err == nil || !strings.Contains(err.Error(), "did not serve again") {
		t.Fatalf("no KReady after the kill: %v, want a timeout", err)
	}
	if err := r.AwaitRestart(ctx, topology.FuseServer, time.Millisecond); err != nil {
		t.Fatalf("AwaitRestart with a KStarted after the kill: %v", err)
	}
	go r.Add(Event{Time: t0.Add(3 * time.Second), Component: topology.FuseServer, Kind: KReady})
	if err := r.AwaitReady(ctx, topology.FuseServer, 5*time.Second); err != nil {
		t.Fatalf("KReady after the kill: %v", err)
	}
}

// TestRecorderAwait: the recorder's Await ends with a matching event, or at once with fail's error.
func TestRecorderAwait(t *testing.T) {
	ctx := context.Background()
	var r Recorder
	ready := func(e Event) bool { return e.Kind == KReady && e.Component == topology.KeeperContainer }
	err := r.Await(ctx, 20*time.Millisecond, time.Millisecond, "a keeper to connect", ready, nil)
	if err == nil || err.Error() != "waited 20ms for a keeper to connect" {
		t.Errorf("no event: %v, want a timeout naming what it waited for", err)
	}
	noImage := errors.New("pod keeper-x: ErrImageNeverPull")
	if err := r.Await(ctx, time.Minute, time.Millisecond, "a keeper to connect", ready, func() error { return noImage }); err != noImage {
		t.Errorf("an image problem: %v, want it at once", err)
	}
	go r.Add(Event{Component: topology.KeeperContainer, Kind: KReady})
	if err := r.Await(ctx, 5*time.Second, time.Millisecond, "a keeper to connect", ready, func() error { return nil }); err != nil {
		t.Errorf("a matching event: %v", err)
	}
}
