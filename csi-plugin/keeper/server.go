package keeper

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"syscall"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fdpass"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/handover"
)

// server is one FUSE server process (dummy-fuse --session) and the session the keeper hands it connections on.
type server struct {
	id       int
	pid      int
	version  string // as it reported in its first served
	cmd      *exec.Cmd
	session  *handover.Conn
	volumes  map[string]bool // the connections handed to it and not ended
	started  time.Time
	stopping bool // the keeper stops it: its exit is no crash
	done     chan struct{}
}

// startServer starts a server process; its messages and its exit arrive as events.
func (k *Keeper) startServer() (*server, error) {
	session, child, err := handover.Pair()
	if err != nil {
		return nil, err
	}
	// A server sends no descriptor: the kernel refuses any (one the keeper had to close could keep it waiting,
	// see fdpass.Closer), and what an older kernel lets through goes to the keeper's Closer.
	if err := session.RefuseDescriptors(); err != nil && !errors.Is(err, fdpass.ErrRightsUnsupported) {
		session.Close()
		child.Close()
		return nil, fmt.Errorf("server session: %w", err)
	}
	session.CloseVia(k.closer)
	cmd := k.serverCmd(child)
	err = k.spawn.Start(context.Background(), cmd)
	child.Close()
	if err != nil {
		session.Close()
		return nil, fmt.Errorf("starting %s: %w", cmd, err)
	}
	k.nextID++
	s := &server{id: k.nextID, pid: cmd.Process.Pid, cmd: cmd, session: session, volumes: map[string]bool{}, started: time.Now(), done: make(chan struct{})}
	k.servers = append(k.servers, s)
	k.logf("started FUSE server pid %d (%s)", s.pid, cmd)
	go func() {
		for {
			m, f, err := session.Recv()
			if err != nil {
				return // the process exited (or broke the protocol: it is killed below)
			}
			if f != nil {
				session.Discard(f) // servers send no descriptors
			}
			k.emit(event{kind: serverMsg, srv: s, msg: m})
		}
	}()
	go func() {
		err := cmd.Wait()
		session.Close()
		close(s.done)
		k.emit(event{kind: serverGone, srv: s, err: exitReason(err)})
	}()
	return s, nil
}

// stop sends SIGTERM (a server exits at once, unmounting nothing) and SIGKILL after grace, and waits for its
// exit at most killWait more: a server whose thread waits for a FUSE request no one answers (a FLUSH to a
// stopped real server) cannot die, and the keeper must not wait for it for ever.
func (s *server) stop(grace time.Duration) {
	s.stopping = true
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(grace):
		s.kill()
		select {
		case <-s.done:
		case <-time.After(killWait):
		}
	}
}

// serverGrace is how long a server may take to exit after SIGTERM (it exits at once, unmounting nothing), and
// killWait how long the keeper waits for its exit after SIGKILL: together well within the 10 s in which the
// keeper must be gone after SIGTERM.
const (
	serverGrace = 3 * time.Second
	killWait    = 2 * time.Second
)

// kill ends a server that misbehaves; the keeper sees it exit and hands its connections to another one.
func (s *server) kill() { _ = s.cmd.Process.Kill() }

func deleteServer(list []*server, s *server) []*server {
	return slices.DeleteFunc(list, func(x *server) bool { return x == s })
}

// exitReason describes how a server ended ("signal: killed", "exit status 1").
func exitReason(err error) error {
	if err == nil {
		return fmt.Errorf("exit status 0")
	}
	return err
}
