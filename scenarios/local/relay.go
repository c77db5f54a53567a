package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// The relay modes' parts (topology.Relay, topology.RelayKeeper): the real server behind the relay (relayServerPart, also
// when it cannot start: relayGonePart) and the relay itself (relayPart), all children of the plugin, which runs
// the server through an executable path of the run's own (<dir>/<server>, a symlink to a copy of the real
// executable) so that a step can put another program there: the next build for an upgrade, one that fails for a server that
// cannot come back.

// relayWait bounds how long a step waits for the plugin to start a relay or a server again.
const relayWait = 30 * time.Second

type relayServerPart struct {
	noPart
	b *Backend
	// keeper runs the server in the relay-keeper mode; nil: the plugin does.
	keeper *keeperPart
	dir    string // holds real and exe
	real   string // a copy of the real server's executable (the FUSE server part's)
	exe    string // what the plugin runs: a symlink to real, or a script a step wrote
	// lastKilled is the server a kill step killed last, which start waits to see replaced.
	lastKilled int
}

func newRelayServerPart(b *Backend, _ *scenarios.Env) (part, error) {
	sp := b.peers.server
	s := &relayServerPart{b: b, keeper: b.peers.keeper}
	b.peers.relayServer = s
	if sp.path == "" {
		return s, nil // no binaries configured (a test of the parts alone): nothing to run
	}
	// The plugin runs the server as nobody, which must reach its executable: a directory of its own that
	// anyone may enter, with a copy of the executable (the project's may be under a private directory).
	dir, err := os.MkdirTemp("", "dfc-relay-bin")
	if err != nil {
		return nil, err
	}
	name := filepath.Base(sp.path) // the server's executable: its built-in name, or what a user's spec runs
	s.dir, s.real, s.exe = dir, filepath.Join(dir, "real-"+name), filepath.Join(dir, name)
	if err := s.copyExecutable(sp.path); err != nil {
		_ = os.RemoveAll(dir) // a part that failed to be made gets no teardown
		return nil, fmt.Errorf("the relay's real server %s: %w", sp.path, err)
	}
	return s, nil
}

// copyExecutable puts a copy of the executable at path in s.dir, which anyone may enter, and installs it.
func (s *relayServerPart) copyExecutable(path string) error {
	if err := os.Chmod(s.dir, 0o755); err != nil {
		return err
	}
	exe, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := os.WriteFile(s.real, exe, 0o755); err != nil {
		return err
	}
	return s.install("")
}

// teardown removes the executables.
func (s *relayServerPart) teardown() error {
	if s.dir == "" {
		return nil
	}
	return os.RemoveAll(s.dir)
}

// install puts at s.exe the real executable (script ""), or a shell script, atomically: the plugin may start
// the server at any time.
func (s *relayServerPart) install(script string) error {
	tmp := s.exe + ".new"
	_ = os.Remove(tmp)
	var err error
	if script == "" {
		err = os.Symlink(s.real, tmp)
	} else {
		err = os.WriteFile(tmp, []byte("#!/bin/sh\n"+script+"\n"), 0o755)
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp, s.exe)
}

// pluginArgs: the server's settings, with the run's own path as its executable; the relay is the project's
// dummy-fuse.
func (s *relayServerPart) pluginArgs() []string {
	return append(s.b.peers.server.pluginArgs(s.exe), "--relay-path="+s.b.opts.FusePath)
}

// server returns the pid of the plugin's real server (the real executable's child that is not a relay), 0 if
// none runs, and its command line.
func (s *relayServerPart) server() (int, string) {
	parent := s.b.plugin
	if k := s.keeper; k != nil {
		parent = nil
		if k.cur != nil {
			parent = k.cur.p
		}
	}
	if parent == nil || parent.exited() {
		return 0, ""
	}
	for _, pid := range childrenRunning(parent.pid(), s.real) {
		cmdline := procCmdline(pid)
		if !strings.Contains(cmdline, "--relay-backend") {
			return pid, cmdline
		}
	}
	return 0, ""
}

// killServer sends SIGKILL to the running server. When inFlight, a read is inside it as it dies: gcsfuse's
// fake GCS server is stopped (SIGSTOP) for three read intervals first, so that the read waits in gcsfuse for
// its backend as with a slow bucket; any other server is itself stopped that long.
func (s *relayServerPart) killServer(ctx context.Context, c topology.Component, inFlight bool) (int, error) {
	b := s.b
	pid, _ := s.server()
	if pid == 0 {
		return 0, errors.New("kill: the plugin runs no real FUSE server")
	}
	msg := fmt.Sprintf("SIGKILL %s pid %d", filepath.Base(s.exe), pid)
	if inFlight {
		stopped, what := pid, "it"
		if fake := s.fakeGCS(); fake != 0 {
			stopped, what = fake, fmt.Sprintf("fake-gcs-server pid %d", fake)
			defer func() { _ = syscall.Kill(fake, syscall.SIGCONT) }()
		}
		if err := syscall.Kill(stopped, syscall.SIGSTOP); err != nil {
			return 0, err
		}
		wait := 3 * b.opts.ReadInterval
		b.logf("real FUSE server pid %d: %s stopped (SIGSTOP); SIGKILL in %s, with a read inside the server", pid, what, wait)
		if err := scenarios.Sleep(ctx, wait); err != nil {
			return 0, err
		}
		msg += fmt.Sprintf(", %s stopped for %s with a read inside the server", what, wait)
	}
	b.rec.Add(scenarios.Event{Source: scenarios.SrcComponent, Component: c, Kind: scenarios.KKilled, Message: msg})
	return pid, syscall.Kill(pid, syscall.SIGKILL)
}

// fakeGCS is the fake GCS server gcsfuse reads (this process's child, package backing), 0 for another server.
func (s *relayServerPart) fakeGCS() int {
	if s.b.sc.Plugin.Server() != "gcsfuse" {
		return 0
	}
	bin := s.b.opts.findServer("fake-gcs-server")
	if bin == "" {
		return 0
	}
	if pids := childrenRunning(os.Getpid(), bin); len(pids) == 1 {
		return pids[0]
	}
	return 0
}

// awaitServer waits until a server other than old runs whose command line holds want, and records it ready.
func (s *relayServerPart) awaitServer(ctx context.Context, c topology.Component, old int, want string) error {
	what := fmt.Sprintf("the plugin to start a new real FUSE server (with %q)", want)
	return scenarios.Await(ctx, relayWait, 10*time.Millisecond, what, func() (bool, error) {
		pid, cmdline := s.server()
		if pid == 0 || pid == old || !strings.Contains(cmdline, want) {
			return false, nil
		}
		s.b.rec.Add(scenarios.Event{Source: scenarios.SrcComponent, Component: c, Kind: scenarios.KReady, Message: fmt.Sprintf("pid %d: %s", pid, cmdline)})
		return true, nil
	})
}

func (s *relayServerPart) kill(ctx context.Context) error {
	pid, err := s.killServer(ctx, topology.RelayServer, true)
	s.lastKilled = pid
	return err
}

func (s *relayServerPart) start(ctx context.Context) error {
	return s.awaitServer(ctx, topology.RelayServer, s.lastKilled, "")
}

// upgrade installs the next build (the real executable with the new flag) and kills the running server, which
// the plugin then replaces by the new one.
func (s *relayServerPart) upgrade(ctx context.Context) error {
	flag := scenarios.NextBuildFlag(s.b.sc.Plugin.Server())
	if err := s.install(fmt.Sprintf("exec %q %s \"$@\"", s.real, flag)); err != nil {
		return err
	}
	pid, _ := s.server()
	if pid == 0 {
		return errors.New("upgrade: the plugin runs no real FUSE server")
	}
	s.b.rec.Add(scenarios.Event{Source: scenarios.SrcComponent, Component: topology.RelayServer, Kind: scenarios.KUpgraded, Detail: flag,
		Message: fmt.Sprintf("%s now runs %s %s; SIGKILL pid %d", s.exe, s.real, flag, pid)})
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return err
	}
	return s.awaitServer(ctx, topology.RelayServer, pid, " "+flag+" ")
}

// relayGonePart is the real server when it cannot start.
type relayGonePart struct {
	noPart
	s *relayServerPart
}

func newRelayGonePart(b *Backend, _ *scenarios.Env) (part, error) {
	return &relayGonePart{s: b.peers.relayServer}, nil
}

func (g *relayGonePart) kill(ctx context.Context) error {
	if err := g.s.install("echo 'relay-server-gone: this server cannot start' >&2; exit 1"); err != nil {
		return err
	}
	pid, err := g.s.killServer(ctx, topology.RelayServerGone, false)
	g.s.lastKilled = pid
	return err
}

func (g *relayGonePart) start(ctx context.Context) error {
	if err := g.s.install(""); err != nil {
		return err
	}
	return g.s.awaitServer(ctx, topology.RelayServerGone, g.s.lastKilled, "")
}

// relayPart is the relay serving the staging path.
type relayPart struct {
	noPart
	b          *Backend
	lastKilled int
}

func newRelayPart(b *Backend, _ *scenarios.Env) (part, error) { return &relayPart{b: b}, nil }

// relay returns the pid of the relay that serves: the plugin's dummy-fuse child running --relay-backend that
// has its node table open (a standby successor opens it only once it takes over).
func (r *relayPart) relay() int {
	if r.b.plugin == nil || r.b.plugin.exited() {
		return 0
	}
	for _, pid := range childrenRunning(r.b.plugin.pid(), r.b.opts.FusePath) {
		if strings.Contains(procCmdline(pid), "--relay-backend") && hasOpen(pid, "/nodes") {
			return pid
		}
	}
	return 0
}

func (r *relayPart) kill(context.Context) error {
	pid := r.relay()
	if pid == 0 {
		return errors.New("kill: no relay serves the volume")
	}
	r.lastKilled = pid
	r.b.rec.Add(scenarios.Event{Source: scenarios.SrcComponent, Component: topology.RelayProcess, Kind: scenarios.KKilled, Message: fmt.Sprintf("SIGKILL relay pid %d", pid)})
	return syscall.Kill(pid, syscall.SIGKILL)
}

func (r *relayPart) start(ctx context.Context) error {
	return scenarios.Await(ctx, relayWait, 10*time.Millisecond, "a successor relay to take the connection over", func() (bool, error) {
		pid := r.relay()
		if pid == 0 || pid == r.lastKilled {
			return false, nil
		}
		r.b.rec.Add(scenarios.Event{Source: scenarios.SrcComponent, Component: topology.RelayProcess, Kind: scenarios.KReady, Message: fmt.Sprintf("relay pid %d serves", pid)})
		return true, nil
	})
}

// procCmdline is pid's command line, its arguments separated by spaces and ended by one.
func procCmdline(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return ""
	}
	return strings.ReplaceAll(string(b), "\x00", " ")
}

// hasOpen reports whether pid has a descriptor open on a path ending in suffix.
func hasOpen(pid int, suffix string) bool {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, _ := os.ReadDir(dir)
	return slices.ContainsFunc(ents, func(e os.DirEntry) bool {
		t, err := os.Readlink(filepath.Join(dir, e.Name()))
		return err == nil && strings.HasSuffix(t, suffix)
	})
}
