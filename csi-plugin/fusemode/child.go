package fusemode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/contract"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/spawn"
)

// ChildName is the mode in which the FUSE server runs as a child process of the plugin and dies with it (SIGKILL
// through the parent-death signal), as a FUSE server inside the plugin's container dies with that container.
const ChildName = contract.ModeChild

func init() { Register(ChildName, func(o Options) (Mode, error) { return NewChild(o) }) }

// Child starts FUSE server processes that mount the staging path themselves and die with the plugin.
type Child struct {
	onStagingPath
	opts   Options
	server fuseserver.Server
	spawn  *spawn.Spawner
}

// NewChild checks the server (fuseserver.New: known, executable, settings complete) and returns the mode.
func NewChild(opts Options) (*Child, error) {
	server, err := fuseserver.New(opts.Server)
	if err != nil {
		return nil, fmt.Errorf("child mode: %w", err)
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 10 * time.Second
	}
	return &Child{opts: opts, server: server, spawn: spawn.New()}, nil
}

// Name implements Mode.
func (c *Child) Name() string { return ChildName }

// Recollect implements Mode: a child dies with the plugin, so there is nothing to take back.
func (c *Child) Recollect(Records) (map[string]Server, error) { return nil, nil }

// Close stops the spawner; later Starts fail. Running children are not touched.
func (c *Child) Close() error {
	c.spawn.Close()
	return nil
}

// Start implements Mode: it starts the server on req.Mountpoint and waits until the mount answers.
func (c *Child) Start(ctx context.Context, req Request) (Server, error) {
	out := newTail(4096)
	cmd := fuseserver.Command(c.server, c.server.MountArgs(req.Mountpoint))
	cmd.Stdout = out
	cmd.Stderr = out
	if err := c.spawn.Start(ctx, cmd); err != nil {
		return nil, fmt.Errorf("starting %s on %s: %w", cmd, req.Mountpoint, err)
	}
	p := &childProcess{server: c.server.Name(), cmd: cmd, out: out, volumeID: req.VolumeID, mountpoint: req.Mountpoint, done: make(chan struct{})}
	go p.wait()

	wctx, cancel := context.WithTimeout(ctx, c.opts.StartTimeout)
	defer cancel()
	if err := mounts.WaitAnswering(wctx, req.Mountpoint, ServedFile, p.done); err != nil {
		p.kill()
		if ok, _ := mounts.IsMountPoint(req.Mountpoint); ok && !isAnswering(req.Mountpoint) {
			_ = mounts.UnmountLazy(req.Mountpoint)
		}
		return nil, fmt.Errorf("%s (pid %d) on %s: %w; %s; output: %q", c.server.Name(), p.PID(), req.Mountpoint, err, p.exitState(), out.String())
	}
	klog.V(4).InfoS("FUSE server started", "volumeID", req.VolumeID, "mountpoint", req.Mountpoint, "pid", p.PID())
	return p, nil
}

func isAnswering(path string) bool { return mounts.Answers(path, ServedFile, time.Second) == nil }

// childProcess is a FUSE server child.
type childProcess struct {
	server     string
	cmd        *exec.Cmd
	out        *tail
	volumeID   string
	mountpoint string

	mu       sync.Mutex
	stopping bool
	waitErr  error
	done     chan struct{}
}

func (p *childProcess) PID() int { return p.cmd.Process.Pid }

func (p *childProcess) Done() <-chan struct{} { return p.done }

// InitRecord implements Server: nothing outlives a child's connection, so nothing needs its record.
func (p *childProcess) InitRecord() []byte { return nil }

func (p *childProcess) wait() {
	err := p.cmd.Wait()
	p.mu.Lock()
	p.waitErr = err
	stopping := p.stopping
	p.mu.Unlock()
	close(p.done)
	switch {
	case stopping:
	case err == nil:
		// A server exits 0 when its mount goes away, which is how unstaging ends it (unmount first).
		klog.V(2).InfoS("FUSE server exited after its mount was unmounted", "volumeID", p.volumeID, "mountpoint", p.mountpoint, "pid", p.PID())
	default:
		// The mount is dead from now on: this is the failure the testbed reproduces; say so loudly.
		klog.ErrorS(err, "FUSE server exited", "volumeID", p.volumeID, "mountpoint", p.mountpoint, "pid", p.PID(), "output", p.out.String())
	}
}

func (p *childProcess) exitState() string {
	select {
	case <-p.done:
	default:
		return "still running"
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.waitErr == nil {
		return "exited with status 0"
	}
	return p.waitErr.Error()
}

func (p *childProcess) kill() {
	p.mu.Lock()
	p.stopping = true
	p.mu.Unlock()
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
	case <-time.After(killWait):
		// A server whose own thread waits for a FUSE request nobody answers cannot die yet; the plugin goes on.
		klog.ErrorS(nil, "FUSE server still there after SIGKILL; leaving it", "volumeID", p.volumeID, "pid", p.PID(), "waited", killWait)
	}
}

// Stop sends SIGTERM (a server then unmounts and exits) and SIGKILL when ctx ends first.
func (p *childProcess) Stop(ctx context.Context) error {
	p.mu.Lock()
	p.stopping = true
	p.mu.Unlock()
	select {
	case <-p.done:
		return nil
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stopping %s pid %d: %w", p.server, p.PID(), err)
	}
	select {
	case <-p.done:
		if err := p.exitError(); err != nil {
			klog.InfoS("FUSE server stopped with an error", "volumeID", p.volumeID, "pid", p.PID(), "err", err, "output", p.out.String())
		}
		return nil
	case <-ctx.Done():
	}
	klog.InfoS("FUSE server did not stop after SIGTERM, killing it", "volumeID", p.volumeID, "pid", p.PID())
	p.kill()
	return nil
}

func (p *childProcess) exitError() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waitErr
}

// tail keeps the last max bytes written to it: enough of a dying child's stderr to explain the death.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func newTail(max int) *tail { return &tail{max: max} }

func (t *tail) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(b), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
