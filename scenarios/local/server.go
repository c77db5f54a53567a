package local

import (
	"context"
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
)

// serverPart is the real FUSE server a scenario runs instead of dummy-fuse (Plugin.FuseServer): its executable,
// found in Options.ServersDir or $PATH, and what it reads (package backing: a fake GCS server for gcsfuse, a
// squashfs image for squashfuse), made when the scenario is set up and stopped at the end. The plugin gets
// the server's flags; a sidecar runs the same server (sidecarSpec).
type serverPart struct {
	noPart
	b       *Backend
	path    string
	backing *backing.Backing
}

func newServerPart(b *Backend, env *scenarios.Env) (part, error) {
	name := b.sc.Plugin.Server()
	if b.sc.Plugin.FuseMode == scenarios.FuseModeKeeper {
		return nil, nil // the keeper runs dummy-fuse (keeper.go)
	}
	if name == fuseserver.DummyFuse {
		return &serverPart{b: b, path: b.opts.FusePath, backing: &backing.Backing{}}, nil
	}
	if fuseserver.IsSpecFile(name) {
		// A user's server: its spec says where its executable is, and the user gives its settings; what it
		// reads is theirs to provide.
		s, err := fuseserver.New(fuseserver.Spec{Name: name, Opts: b.opts.ServerOpts, Dirs: []string{b.opts.ServersDir}})
		if err != nil {
			return nil, err
		}
		b.logf("FUSE server %s (spec %s): %s, settings %v", s.Name(), name, s.Path(), b.opts.ServerOpts)
		return &serverPart{b: b, path: s.Path(), backing: &backing.Backing{Opts: b.opts.ServerOpts}}, nil
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
	return &serverPart{b: b, path: path, backing: bk}, nil
}

// spec is the server as a process at path runs it.
func (s *serverPart) spec(path string) fuseserver.Spec {
	return fuseserver.Spec{Name: s.b.sc.Plugin.Server(), Path: path, Opts: s.backing.Opts}
}

// pluginArgs: the server's executable and settings (its name comes with Plugin.Args).
func (s *serverPart) pluginArgs() []string {
	spec := s.spec(s.path)
	spec.Name = ""
	return spec.Args()
}

// kill kills the FUSE server serving the volume in the child mode (the plugin's child running the server's
// executable) while a read is inside it, as a crash under load would: it stops the server (SIGSTOP), lets three
// of the workload's read intervals pass so that a read reaches it and waits, then sends SIGKILL. In the sidecar
// mode the sidecar container is the thing to kill.
func (s *serverPart) kill(ctx context.Context) error {
	b := s.b
	if b.plugin == nil || b.sc.Plugin.FuseMode == scenarios.FuseModeSidecar {
		return errUnsupported
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
	b.rec.Add(scenarios.Event{Source: scenarios.SrcComponent, Component: scenarios.FuseServer, Kind: scenarios.KKilled,
		Message: fmt.Sprintf("SIGKILL %s pid %d, stopped for %s with a read inside it", name, pid, wait)})
	// SIGKILL ends a stopped process too; the plugin reaps it.
	return syscall.Kill(pid, syscall.SIGKILL)
}

func (s *serverPart) teardown() error {
	s.backing.Stop()
	return nil
}

// sidecarSpec is the FUSE server a sidecar container runs, with its executable bound at dir/<name>: dummy-fuse
// from the project's build, or the scenario's real server.
func (b *Backend) sidecarSpec(dir string) (fuseserver.Spec, initMount) {
	s := b.parts[scenarios.FuseServer].(*serverPart) // every scenario with a sidecar has one (not the keeper mode)
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
