package local

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver/backing"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
)

// The writers' end (scenarios.StorageReader): the runner has the backend stop each writer container as a job
// that ends, then read what it wrote from the storage behind every FUSE layer, without any mount: at the
// objectURL of the server's spec, with the settings the run gives the server (for gcsfuse, the fake GCS server
// of its backing, internal/fuseserver/backing, which the backend runs beside the plugin).

var _ scenarios.StorageReader = (*Backend)(nil)

// CollectWrites implements scenarios.StorageReader: it stops each writer container for good (SIGTERM, then
// SIGKILL after scenarios.WriterGrace; never started again) and records each one's objects as the storage holds them
// (fuseserver.Kind.ObjectURL), also when one cannot be read.
func (b *Backend) CollectWrites(ctx context.Context) error {
	b.mu.Lock()
	containers := append([]*container(nil), b.pod.containers...)
	b.mu.Unlock()
	for _, c := range containers {
		if !c.spec.Write {
			continue
		}
		if err := c.halt(ctx, scenarios.WriterGrace); err != nil {
			return err
		}
	}
	if b.peers.server == nil {
		return errors.New("no FUSE server was set up: nothing to read the storage of")
	}
	srv := b.peers.server
	k, err := fuseserver.Lookup(srv.name)
	if err != nil {
		return err
	}
	b.sc.StoreWrites(ctx, b.rec, func(ctx context.Context, name string) ([]byte, error) {
		u, err := k.ObjectURL(srv.backing.Opts, name)
		if err != nil {
			return nil, err
		}
		return backing.Read(ctx, u)
	}, b.logf)
	return nil
}

// halt stops the container for good, as the end of its job: its kubelet loop starts it no more, its instance
// gets SIGTERM and, after grace, SIGKILL, and halt returns once the loop has ended and its output is read.
func (c *container) halt(ctx context.Context, grace time.Duration) error {
	c.halted.Store(true)
	deadline := time.After(grace + 10*time.Second)
	for {
		// An instance the loop started just before it saw halted is stopped too.
		if p := c.current(); p != nil && !p.exited() {
			c.b.logf("container %s: SIGTERM pid %d: the run collects what it wrote", c.spec.Name, p.pid())
			if err := p.stop(grace); err != nil {
				return fmt.Errorf("stop writer %s: %w", c.spec.Name, err)
			}
		}
		select {
		case <-c.loopDone:
			c.waitOutput()
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			return fmt.Errorf("writer %s: its kubelet loop did not end within %s of the stop", c.spec.Name, grace+10*time.Second)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
