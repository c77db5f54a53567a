package driver

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/fusemode"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/internal/plugintest"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// perTarget is a FUSE mode written as a new one would be, outside the driver: placement OnTargets, with a
// dummy-fuse child of the plugin on every target instead of a sidecar. TestNewModeNeedsNoDriverChange runs it
// through the driver by its name.
type perTarget struct {
	child   *fusemode.Child
	mu      sync.Mutex
	servers map[string]fusemode.Server // by target
}

const perTargetName = "test-per-target"

func init() {
	fusemode.Register(perTargetName, func(o fusemode.Options) (fusemode.Mode, error) {
		c, err := fusemode.NewChild(o)
		if err != nil {
			return nil, err
		}
		return &perTarget{child: c, servers: map[string]fusemode.Server{}}, nil
	})
}

func (m *perTarget) Name() string                  { return perTargetName }
func (m *perTarget) Placement() fusemode.Placement { return fusemode.OnTargets }
func (m *perTarget) Recollect(fusemode.Records) (map[string]fusemode.Server, error) {
	return nil, nil // its servers die with the plugin
}

func (m *perTarget) Start(context.Context, fusemode.Request) (fusemode.Server, error) {
	return nil, errors.New("mounts targets, not staging paths")
}

func (m *perTarget) Publish(ctx context.Context, t fusemode.Target) error {
	s, err := m.child.Start(ctx, fusemode.Request{VolumeID: t.VolumeID, Mountpoint: t.Path})
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.servers[t.Path] = s
	m.mu.Unlock()
	return nil
}

// started returns the servers of the mounted targets (a test kills them).
func (m *perTarget) started() []fusemode.Server {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]fusemode.Server, 0, len(m.servers))
	for _, s := range m.servers {
		out = append(out, s)
	}
	return out
}

func (m *perTarget) Release(target string) {
	m.mu.Lock()
	s := m.servers[target]
	delete(m.servers, target)
	m.mu.Unlock()
	if s != nil {
		_ = s.Stop(context.Background())
	}
}

func (m *perTarget) Close() error {
	m.mu.Lock()
	targets := make([]string, 0, len(m.servers))
	for t := range m.servers {
		targets = append(targets, t)
	}
	m.mu.Unlock()
	for _, t := range targets {
		m.Release(t)
	}
	return m.child.Close()
}

// TestNewModeNeedsNoDriverChange: a mode registered from a file of its own is chosen by name (--fuse-mode) and
// served by the driver as it is: staging records the volume, each target gets the mode's own mount, unpublish
// releases and unmounts it.
func TestNewModeNeedsNoDriverChange(t *testing.T) {
	testenv.RequireFUSE(t)
	h := newHarness(t, true, func(c *Config) {
		c.Mode, c.FuseMode = nil, perTargetName
		c.FuseOptions.Server.Path = bins.Path(t, "dummy-fuse")
	})
	const vol = "vol-1"
	if err := h.stage(vol); err != nil {
		t.Fatal(err)
	}
	if n, _ := mounts.CountMounts(h.stagingPath(vol)); n != 0 {
		t.Errorf("%d mounts on the staging path of a mode that mounts targets, want none", n)
	}
	for _, pod := range []string{"pod-a", "pod-b"} {
		for i := 0; i < 2; i++ { // the second publish finds it mounted: OK
			if err := h.publish(vol, pod, false); err != nil {
				t.Fatalf("publish %d for %s: %v", i+1, pod, err)
			}
		}
		if n, _ := mounts.CountMounts(h.targetPath(vol, pod)); n != 1 {
			t.Errorf("%d mounts on %s's target, want 1", n, pod)
		}
		plugintest.MustRead(t, h.targetPath(vol, pod))
	}
	h.teardown(vol, "pod-a", "pod-b")
}
