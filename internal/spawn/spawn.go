// Package spawn starts child processes that die with their parent: the parent-death signal (SIGKILL) that a
// container kill would deliver to everything inside it, for processes started outside a container.
package spawn

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// Spawner starts every child from one goroutine locked to its OS thread. The kernel sends the parent-death
// signal when the *thread* that forked the child exits, not the process (golang/go#27505): a child forked from
// an ordinary goroutine would be killed whenever the Go runtime retires that thread. This thread is never
// retired while children may run: on Close the goroutine unlocks it first, which returns it to the runtime's
// pool instead of terminating it.
type Spawner struct {
	reqs chan request
	quit chan struct{}
	once sync.Once
}

type request struct {
	cmd  *exec.Cmd
	done chan error
}

// New starts a spawner; Close stops it.
func New() *Spawner {
	s := &Spawner{reqs: make(chan request), quit: make(chan struct{})}
	go s.loop()
	return s
}

func (s *Spawner) loop() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for {
		select {
		case r := <-s.reqs:
			r.done <- r.cmd.Start()
		case <-s.quit:
			return
		}
	}
}

// ErrClosed is returned by Start after Close.
var ErrClosed = errors.New("spawner closed")

// Start starts cmd with SIGKILL as its parent-death signal (on top of cmd.SysProcAttr, if set), or fails
// when ctx ends first.
func (s *Spawner) Start(ctx context.Context, cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	done := make(chan error, 1)
	select {
	case s.reqs <- request{cmd: cmd, done: done}:
	case <-s.quit:
		return ErrClosed
	case <-ctx.Done():
		return fmt.Errorf("starting %s: %w", cmd.Path, ctx.Err())
	}
	return <-done
}

// Close stops the spawner; later Starts fail with ErrClosed. Running children are not touched.
func (s *Spawner) Close() {
	s.once.Do(func() { close(s.quit) })
}
