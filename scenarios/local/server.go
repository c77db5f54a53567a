package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver/backing"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// server is the FUSE server program of the run (Plugin.FuseServer, dummy-fuse by default): its executable,
// found in Options.ServersDir or $PATH, and what it reads (package backing: a fake GCS server for gcsfuse, a
// squashfs image for squashfuse), made when the scenario is set up and stopped at the end. The parts that run
// it give the plugin its flags (childServerPart, relayServerPart) or run it themselves (the sidecar:
// sidecarSpec; the keeper of the relay-keeper mode: relayNodeDir).
type server struct {
	name    string
	path    string
	backing *backing.Backing
}

// childServerPart is the FUSE server of the child mode: the plugin's child that serves the volume.
type childServerPart struct {
	noPart
	b *Backend
}

func newChildServerPart(b *Backend, _ *scenarios.Env) (part, error) {
	return &childServerPart{b: b}, nil
}

func newServer(b *Backend, env *scenarios.Env) (*server, error) {
	name := b.sc.Plugin.Server()
	if name == fuseserver.DummyFuse {
		return &server{name: name, path: b.opts.FusePath, backing: &backing.Backing{}}, nil
	}
	if fuseserver.IsSpecFile(name) {
		// A user's server: its spec says where its executable is, and the user gives its settings; what it
		// reads is theirs to provide.
		s, err := fuseserver.New(fuseserver.Spec{Name: name, Opts: b.opts.ServerOpts, Dirs: []string{b.opts.ServersDir}})
		if err != nil {
			return nil, err
		}
		b.logf("FUSE server %s (spec %s): %s, settings %v", s.Name(), name, s.Path(), b.opts.ServerOpts)
		return &server{name: name, path: s.Path(), backing: &backing.Backing{Opts: b.opts.ServerOpts}}, nil
	}
	path := b.opts.findServer(name)
	if path == "" {
		return nil, fmt.Errorf("FUSE server %s: no executable in %s nor in $PATH (make servers builds the real servers)", name, b.opts.ServersDir)
	}
	log, err := env.Log("backing.log")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bk, err := backing.Prepare(ctx, name, backing.Env{Dir: b.dir, Find: b.opts.findServer, Log: log.File()})
	if err != nil {
		return nil, fmt.Errorf("FUSE server %s: what it reads: %w (see %s)", name, err, log.Name())
	}
	b.logf("FUSE server %s: %s, settings %v", name, path, bk.Opts)
	return &server{name: name, path: path, backing: bk}, nil
}

// spec is the server as a process at path runs it.
func (s *server) spec(path string) fuseserver.Spec {
	return fuseserver.Spec{Name: s.name, Path: path, Opts: s.backing.Opts}
}

// pluginArgs are the plugin's flags for the server at path: its executable and settings (its name comes with
// Plugin.Args).
func (s *server) pluginArgs(path string) []string {
	spec := s.spec(path)
	spec.Name = ""
	return spec.Args()
}

// stop stops what the server reads from (a fake GCS server).
func (s *server) stop() { s.backing.Stop() }

// pluginArgs: the server's executable and settings.
func (c *childServerPart) pluginArgs() []string {
	s := c.b.peers.server
	return s.pluginArgs(s.path)
}

// kill kills the FUSE server serving the volume (the plugin's child running the server's executable) while a
// read is inside it, as a crash under load would: it stops the server (SIGSTOP), lets three of the workload's
// read intervals pass so that a read reaches it and waits, then sends SIGKILL.
func (c *childServerPart) kill(ctx context.Context) error {
	b, s := c.b, c.b.peers.server
	if b.plugin == nil {
		return errors.New("kill FUSE server: the plugin is not running")
	}
	pids := childrenRunning(b.plugin.pid(), s.path)
	if len(pids) != 1 {
		return fmt.Errorf("kill FUSE server: the plugin (pid %d) runs %d processes of %s, want 1", b.plugin.pid(), len(pids), s.path)
	}
	pid, name := pids[0], filepath.Base(s.path)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("stop FUSE server %s pid %d: %w", name, pid, err)
	}
	wait := 3 * b.opts.ReadInterval
	b.logf("FUSE server %s pid %d stopped (SIGSTOP); SIGKILL in %s, with a read inside it", name, pid, wait)
	select {
	case <-ctx.Done():
	case <-time.After(wait):
	}
	b.rec.Add(scenarios.Event{Source: scenarios.SrcComponent, Component: topology.FuseServer, Kind: scenarios.KKilled,
		Message: fmt.Sprintf("SIGKILL %s pid %d, stopped for %s with a read inside it", name, pid, wait)})
	// SIGKILL ends a stopped process too; the plugin reaps it.
	return syscall.Kill(pid, syscall.SIGKILL)
}

// sidecarSpec is the FUSE server a sidecar container runs, with its executable bound at dir/<name>: dummy-fuse
// from the project's build, or the scenario's real server.
func (b *Backend) sidecarSpec(dir string) (fuseserver.Spec, initMount) {
	s := b.peers.server
	target := filepath.Join(dir, filepath.Base(s.path))
	return s.spec(target), initMount{Source: s.path, Target: target, Propagation: "rprivate"}
}

// childrenRunning returns the children of parent whose executable is exe.
func childrenRunning(parent int, exe string) []int {
	want, err := filepath.EvalSymlinks(exe)
	if err != nil {
		want = exe
	}
	var pids []int
	for _, pid := range children(parent) {
		if got, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil && got == want {
			pids = append(pids, pid)
		}
	}
	return pids
}

// children returns the children of parent, from the kernel's lists of each of its threads' children.
func children(parent int) []int {
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", parent))
	var pids []int
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", parent, task.Name()))
		if err != nil {
			continue // the thread ended meanwhile
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}
