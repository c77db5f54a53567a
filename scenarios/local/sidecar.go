package local

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/contract"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/kubeletpath"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// The pod's FUSE sidecar (scenarios.Pod.Sidecar), as manifests/pod-sidecar.yaml declares it: `csi-plugin
// sidecar` as a native sidecar (an init container with restartPolicy: Always), user 65534 without
// capabilities, with the pod's dfc-sidecar emptyDir mounted. Here it is a container like the workload's (new
// mount and PID namespaces, set up by the container init), which also gets the two binaries it runs
// bind-mounted, standing in for its image.
const (
	// sidecarUser is the sidecar's runAsUser and runAsGroup (nobody), as in manifests/pod-sidecar.yaml.
	sidecarUser = 65534
	// sidecarMount is where the dfc-sidecar emptyDir appears in the sidecar; sidecarBin holds its binaries.
	sidecarMount = "/mnt/" + contract.SidecarVolume
	sidecarBin   = "/mnt/bin"
)

// sidecarCtr is the pod's FUSE sidecar container with kubelet's handling of a native sidecar: started before
// the pod's containers, started again whenever it exits (restartPolicy: Always) after the container restart
// back-off, for the life of the pod.
type sidecarCtr struct {
	noPart
	instances
	b   *Backend
	bo  restartBackoff
	dir string // the pod's emptyDir, on the host
	log *scenarios.LogFile
	// reset is set by restartAll (RestartAllContainers): the sidecar was removed, and starts again at once.
	reset atomic.Bool
}

// newSidecarPart is the pod's FUSE sidecar.
func newSidecarPart(b *Backend, env *scenarios.Env) (part, error) {
	logs, err := env.Logs("sidecar.log")
	if err != nil {
		return nil, err
	}
	b.logs.all = append(b.logs.all, logs[0])
	b.peers.sidecar = &sidecarCtr{b: b, log: logs[0]}
	return b.peers.sidecar, nil
}

// pluginArgs: the flags of the server the sidecar runs, which the plugin gets in every mode.
func (s *sidecarCtr) pluginArgs() []string {
	srv := s.b.peers.server
	return srv.pluginArgs(srv.path)
}

// podPrepare creates the pod's dfc-sidecar emptyDir before the volume is published (kubelet sets up a pod's
// volumes independently; the plugin answers Unavailable until it exists), with mode 0777 as kubelet creates an
// emptyDir (pkg/volume/emptydir/empty_dir.go, setupDir), so that the unprivileged sidecar can use it.
func (s *sidecarCtr) podPrepare() error {
	b := s.b
	s.dir = filepath.Join(kubeletpath.PodDir(b.root, b.pod.uid), kubeletpath.EmptyDirIn(contract.SidecarVolume))
	if err := os.MkdirAll(s.dir, 0o750); err != nil {
		return err
	}
	if err := os.Chmod(s.dir, 0o777); err != nil {
		return err
	}
	b.logf("emptyDir %s: %s (0777)", contract.SidecarVolume, s.dir)
	return nil
}

// podStart starts the native sidecar before the pod's containers (kubelet's SidecarContainers, GA in v1.33)
// and supervises it for the life of the pod; its restart back-off is the new pod's own.
func (s *sidecarCtr) podStart(podCtx context.Context) error {
	s.bo = restartBackoff{base: s.b.opts.BackoffBase, max: s.b.opts.BackoffMax}
	if err := s.startInstance(); err != nil {
		return err
	}
	s.b.pod.wg.Add(1)
	go s.supervise(podCtx)
	return nil
}

// podStop stops the sidecar with the pod's containers.
func (s *sidecarCtr) podStop(logPrefix string) error {
	var err error
	if p := s.current(); p != nil && !p.exited() {
		s.b.logf("%sstop sidecar pid %d", logPrefix, p.pid())
		if err = p.stop(2 * time.Second); err != nil {
			err = fmt.Errorf("stop sidecar: %w", err)
		}
	}
	s.waitOutput()
	return err
}

// start waits for the sidecar's restart: the local kubelet starts it again by itself (supervise), as the real
// one does.
func (s *sidecarCtr) start(ctx context.Context) error {
	return s.b.rec.AwaitRestart(ctx, topology.SidecarContainer, s.b.opts.BackoffMax+10*time.Second)
}

func (s *sidecarCtr) procs() []knownProc {
	p := s.current()
	if p == nil {
		return nil
	}
	return []knownProc{{p, fmt.Sprintf("sidecar container: pid %d (csi-plugin sidecar, uid %d)", p.pid(), sidecarUser)}}
}

// event records an event of the sidecar container's lifecycle.
func (s *sidecarCtr) event(kind scenarios.Kind, t time.Time, msg string) {
	s.b.rec.Add(scenarios.Event{Time: t, Source: scenarios.SrcComponent, Component: topology.SidecarContainer, Kind: kind, Message: msg})
}

// startInstance starts an instance of the sidecar container and returns once it runs, as kubelet starts the
// workload containers once a native sidecar without a startup probe is running (it does not wait for it to
// serve). KReady is recorded when the sidecar logs that it received the descriptor.
func (s *sidecarCtr) startInstance() error {
	b := s.b
	socket := filepath.Join(sidecarMount, pvName, contract.SidecarSocket)
	server, serverMount := b.sidecarSpec(sidecarBin)
	args := append(b.sc.Pod.Sidecar.Args(socket), server.Args()...)
	plugin := filepath.Join(sidecarBin, "csi-plugin")
	s.mu.Lock()
	inst := s.starts
	s.starts++
	s.mu.Unlock()
	logPath := filepath.Join(b.dir, "containers", fmt.Sprintf("sidecar-%d.log", inst))
	p, err := b.launch(initConfig{
		Mounts: []initMount{
			{Source: s.dir, Target: sidecarMount, Propagation: "rprivate"},
			{Source: b.opts.PluginPath, Target: plugin, Propagation: "rprivate"},
			serverMount,
		},
		Argv: append([]string{plugin}, args...),
		User: &initUser{UID: sidecarUser, GID: sidecarUser},
		Pod:  b.pod.uid,
	}, logPath)
	if err != nil {
		return fmt.Errorf("start sidecar: %w", err)
	}
	logR, err := os.Open(logPath)
	if err != nil {
		_ = p.stop(time.Second)
		return err
	}
	out := make(chan struct{})
	s.mu.Lock()
	s.cur, s.output = p, out
	s.mu.Unlock()
	s.event(scenarios.KStarted, time.Time{}, fmt.Sprintf("pid %d, uid %d, %s", p.pid(), sidecarUser, strings.Join(args, " ")))
	b.logf("sidecar#%d: started pid %d as uid %d: %s %s, log %s", inst, p.pid(), sidecarUser, plugin, strings.Join(args, " "), logPath)
	go func() {
		<-p.done
		s.event(scenarios.KExited, p.exitTime, fmt.Sprintf("sidecar#%d exited with code %d (%s)", inst, p.exitCode(), p.state))
	}()
	go func() {
		defer close(out)
		defer logR.Close()
		prefix := fmt.Sprintf("sidecar#%d", inst)
		scenarios.TailLines(logR, p.done, 20*time.Millisecond, func(line []byte) {
			s.log.WriteLine(prefix, line)
			// The sidecar says it holds the descriptor (csi-plugin/sidecar), or, keeping a descriptor the plugin keeps a
			// copy of (--sidecar-keep-fd), that its FUSE server serves it (csi-plugin/keeper).
			if bytes.Contains(line, []byte(contract.SidecarReceived)) || bytes.Contains(line, []byte(contract.KeeperServed)) {
				s.event(scenarios.KReady, scenarios.LineTime(line, time.Now()), string(line))
			}
		})
	}()
	return nil
}

// supervise is kubelet's handling of the running native sidecar until ctx (the pod's) ends: whenever
// it exits it is started again once the restart back-off allows, the first time at once (the real kubelet
// started it again about 1 s after its FUSE server was killed: its next sync, v1.37.2 and v1.36.3).
func (s *sidecarCtr) supervise(ctx context.Context) {
	b := s.b
	defer b.pod.wg.Done()
	for {
		p := s.current()
		select {
		case <-p.done:
		case <-ctx.Done():
			return // the pod's deletion or the teardown stops it
		}
		s.waitOutput()
		for !s.reset.Swap(false) && !s.bo.sync(p.exitTime, time.Now()) {
			if scenarios.Sleep(ctx, s.bo.base) != nil {
				return
			}
		}
		if ctx.Err() != nil {
			return
		}
		if err := s.startInstance(); err != nil {
			b.logf("sidecar: restart failed: %v", err)
			if scenarios.Sleep(ctx, s.bo.base) != nil {
				return
			}
		}
	}
}

// kill sends SIGKILL to the sidecar container's init (PID 1 of its namespace: dummy-fuse dies with it). Like a
// native sidecar's on a node, it does not stay down: supervise starts it again.
func (s *sidecarCtr) kill(ctx context.Context) error {
	return s.b.killContainer(ctx, s.current(), "sidecar container", s.event)
}
