package local

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"syscall"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/keeper"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// The FUSE server faults beyond a single crash: a successor killed in the middle of the recovery, and servers
// that cannot start at all (a crash loop). Both find the volume's server in the keeper's status file, as the
// single kill does (keeper.go), and watch it every millisecond for the next one.

// statusPoll is how often the keeper's status is read while waiting for a successor: the keeper names it right
// after starting it, and it takes a Go process a few milliseconds to start and take the connection over.
const statusPoll = time.Millisecond

// serverOf returns the PID (in the keeper's namespace) of the server the keeper's status names for the volume,
// 0 while none.
func (k *keeperPart) serverOf() (int, error) {
	if k.cur == nil || k.cur.p.exited() {
		return 0, errors.New("no keeper running")
	}
	st, err := keeper.ReadStatus(filepath.Join(k.cur.statusDir, "status.json"))
	if err != nil {
		return 0, err
	}
	pid, _ := st.ServerOf(volumeHandle)
	return pid, nil
}

// killNS sends SIGKILL to the keeper's FUSE server nsPID (in its namespace) and records it as a kill of the FUSE
// server with why; it returns once the process is gone.
func (k *keeperPart) killNS(ctx context.Context, nsPID int, why string) error {
	pid, err := childInNamespace(k.cur.p.pid(), nsPID)
	if err != nil {
		return fmt.Errorf("FUSE server %d of the keeper: %w", nsPID, err)
	}
	pidfd, err := pidfdOpen(pid)
	if err != nil {
		return err
	}
	defer syscall.Close(pidfd)
	k.serverEvent(scenarios.KKilled, time.Time{}, fmt.Sprintf("SIGKILL pid %d (%d in the keeper's namespace): %s", pid, nsPID, why), "")
	if err := pidfdKill(pidfd); err != nil {
		return fmt.Errorf("kill FUSE server pid %d: %w", pid, err)
	}
	k.b.logf("FUSE server pid %d (%d in keeper#%d): SIGKILL (%s)", pid, nsPID, k.cur.n, why)
	return waitPidfd(ctx, pidfd, 10*time.Second)
}

// nextServer waits until the keeper's status names a server of the volume other than not.
func (k *keeperPart) nextServer(ctx context.Context, not int) (int, error) {
	var next int
	what := fmt.Sprintf("the keeper to name a successor of FUSE server %d (see keeper.log)", not)
	err := scenarios.Await(ctx, 30*time.Second, statusPoll, what, func() (bool, error) {
		pid, err := k.serverOf()
		if err != nil {
			return true, err
		}
		next = pid
		return pid != 0 && pid != not, nil
	})
	if err != nil {
		return 0, err
	}
	return next, nil
}

// successorPart is scenarios.FuseSuccessor: the volume's server, then its successor the moment the keeper names
// it.
type successorPart struct {
	noPart
	k *keeperPart
	// killed are the server and the successor kill killed: start waits for a server that is neither.
	killed [2]int
}

func newSuccessorPart(b *Backend, _ *scenarios.Env) (part, error) {
	return &successorPart{k: b.peers.keeper}, nil
}

func (s *successorPart) kill(ctx context.Context) error {
	first, err := s.k.serverOf()
	if err != nil || first == 0 {
		return fmt.Errorf("no FUSE server serves the volume to kill (%v)", err)
	}
	if err := s.k.killNS(ctx, first, "the volume's FUSE server"); err != nil {
		return err
	}
	next, err := s.k.nextServer(ctx, first)
	if err != nil {
		return err
	}
	s.killed = [2]int{first, next}
	return s.k.killNS(ctx, next, fmt.Sprintf("the successor of %d, as soon as the keeper named it", first))
}

// start waits until a server other than the two killed ones serves the volume: the successor may have said it
// serves in the moment between the record of its kill and the signal, and that says nothing of the next one.
func (s *successorPart) start(ctx context.Context) error {
	what := fmt.Sprintf("a FUSE server other than the killed %d and %d to serve the volume (see keeper.log)", s.killed[0], s.killed[1])
	return scenarios.Await(ctx, 30*time.Second, statusPoll, what, func() (bool, error) {
		pid := int(s.k.servedBy.Load())
		return pid != 0 && pid != s.killed[0] && pid != s.killed[1], nil
	})
}

// crashLoopPart is scenarios.FuseCrashLoop: every server the keeper runs for the volume is killed as soon as
// the keeper names it, until start (or the teardown) ends the loop.
type crashLoopPart struct {
	noPart
	k    *keeperPart
	stop context.CancelFunc
	done chan struct{}
}

func newCrashLoopPart(b *Backend, _ *scenarios.Env) (part, error) {
	return &crashLoopPart{k: b.peers.keeper}, nil
}

// kill kills the running server and starts the loop that kills each successor.
func (c *crashLoopPart) kill(ctx context.Context) error {
	if c.stop != nil {
		return errors.New("the crash loop runs already")
	}
	first, err := c.k.serverOf()
	if err != nil || first == 0 {
		return fmt.Errorf("no FUSE server serves the volume to kill (%v)", err)
	}
	if err := c.k.killNS(ctx, first, "the first of a crash loop"); err != nil {
		return err
	}
	loopCtx, stop := context.WithCancel(context.Background())
	c.stop, c.done = stop, make(chan struct{})
	go func() {
		defer close(c.done)
		last := first
		for {
			if err := scenarios.Sleep(loopCtx, statusPoll); err != nil {
				return
			}
			pid, err := c.k.serverOf()
			if err != nil || pid == 0 || pid == last {
				continue // none right now (the keeper's back-off), or the connection is over
			}
			last = pid
			// A server gone by itself meanwhile is no failure of the loop: it is logged, and the loop goes on.
			if err := c.k.killNS(loopCtx, pid, "crash loop: a successor as soon as the keeper named it"); err != nil && loopCtx.Err() == nil {
				c.k.b.logf("crash loop: %v", err)
			}
		}
	}()
	return nil
}

// start ends the loop and waits until a server serves the volume again.
func (c *crashLoopPart) start(ctx context.Context) error {
	c.end()
	return c.k.b.rec.AwaitReady(ctx, topology.FuseServer, 30*time.Second)
}

// end stops the loop and waits until it stopped.
func (c *crashLoopPart) end() {
	if c.stop == nil {
		return
	}
	c.stop()
	<-c.done
	c.stop = nil
}

func (c *crashLoopPart) teardown() error {
	c.end()
	return nil
}

// recollectPart is scenarios.PluginRecollecting: the plugin killed while the keeper hands its copies back.
type recollectPart struct {
	noPart
	k *keeperPart
}

func newRecollectPart(b *Backend, _ *scenarios.Env) (part, error) {
	return &recollectPart{k: b.peers.keeper}, nil
}

// kill starts the plugin and kills it once the keeper's status says that its session with it is up: the
// keeper has sent its hello and a hold with a descriptor per connection, and the plugin is checking them
// against the mount table and adopting them (milliseconds).
func (r *recollectPart) kill(ctx context.Context) error {
	b, k := r.k.b, r.k
	if b.plugin != nil && !b.plugin.exited() {
		return errors.New("the plugin is running: kill it first, this step starts it")
	}
	if k.cur == nil || k.cur.p.exited() {
		return errors.New("no keeper running to hand the plugin its copies")
	}
	since := time.Now()
	p, err := b.launchPlugin()
	if err != nil {
		return err
	}
	status := filepath.Join(k.cur.statusDir, "status.json")
	err = scenarios.Await(ctx, 30*time.Second, statusPoll, "the keeper to reach the restarted plugin (see keeper.log)", func() (bool, error) {
		if st, err := keeper.ReadStatus(status); err == nil && st.Plugin && st.Time.After(since) {
			return true, nil
		}
		if p.exited() {
			return true, fmt.Errorf("the plugin exited before the keeper reached it (%s); see %s", p.state, b.logs.plugin.Name())
		}
		return false, nil
	})
	if err != nil {
		return err
	}
	return b.killPlugin(ctx)
}

func (r *recollectPart) start(ctx context.Context) error { return r.k.b.startPlugin(ctx) }
