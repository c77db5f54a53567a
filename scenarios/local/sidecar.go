package local

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/contract"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/kubeletpath"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
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

// makeSidecarVolume creates the pod's dfc-sidecar emptyDir before the volume is published (kubelet sets up a
// pod's volumes independently; the plugin answers Unavailable until it exists), with mode 0777 as kubelet
// creates an emptyDir (pkg/volume/emptydir/empty_dir.go, setupDir), so that the unprivileged sidecar can use it.
func (b *Backend) makeSidecarVolume() error {
	b.sidecarDir = filepath.Join(kubeletpath.PodDir(b.root, b.podUID), kubeletpath.EmptyDirIn(contract.SidecarVolume))
	if err := os.MkdirAll(b.sidecarDir, 0o750); err != nil {
		return err
	}
	if err := os.Chmod(b.sidecarDir, 0o777); err != nil {
		return err
	}
	b.logf("emptyDir %s: %s (0777)", contract.SidecarVolume, b.sidecarDir)
	return nil
}

// sidecarCtr is the pod's FUSE sidecar container with kubelet's handling of a native sidecar: started before
// the pod's containers, started again whenever it exits (restartPolicy: Always) after the container restart
// back-off, for the life of the pod.
type sidecarCtr struct {
	instances
	bo restartBackoff
}

// sidecarEvent records an event of the sidecar container's lifecycle.
func (b *Backend) sidecarEvent(kind scenarios.Kind, t time.Time, msg string) {
	b.rec.Add(scenarios.Event{Time: t, Source: scenarios.SrcComponent, Component: scenarios.SidecarContainer, Kind: kind, Message: msg})
}

// startSidecar starts an instance of the sidecar container and returns once it runs, as kubelet starts the
// workload containers once a native sidecar without a startup probe is running (it does not wait for it to
// serve). KReady is recorded when the sidecar logs that it received the descriptor.
func (b *Backend) startSidecar() error {
	s := b.sidecar
	socket := filepath.Join(sidecarMount, pvName, contract.SidecarSocket)
	args := append(b.sc.Pod.Sidecar.Args(socket), "--dummy-fuse-path="+filepath.Join(sidecarBin, "dummy-fuse"))
	plugin := filepath.Join(sidecarBin, "csi-plugin")
	s.mu.Lock()
	inst := s.starts
	s.starts++
	s.mu.Unlock()
	logPath := filepath.Join(b.dir, "containers", fmt.Sprintf("sidecar-%d.log", inst))
	p, err := b.launch(initConfig{
		Mounts: []initMount{
			{Source: b.sidecarDir, Target: sidecarMount, Propagation: "rprivate"},
			{Source: b.opts.PluginPath, Target: plugin, Propagation: "rprivate"},
			{Source: b.opts.FusePath, Target: filepath.Join(sidecarBin, "dummy-fuse"), Propagation: "rprivate"},
		},
		Argv: append([]string{plugin}, args...),
		User: &initUser{UID: sidecarUser, GID: sidecarUser},
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
	b.sidecarEvent(scenarios.KStarted, time.Time{}, fmt.Sprintf("pid %d, uid %d, %s", p.pid(), sidecarUser, strings.Join(args, " ")))
	b.logf("sidecar#%d: started pid %d as uid %d: %s %s, log %s", inst, p.pid(), sidecarUser, plugin, strings.Join(args, " "), logPath)
	go func() {
		<-p.done
		b.sidecarEvent(scenarios.KExited, p.exitTime, fmt.Sprintf("sidecar#%d exited with code %d (%s)", inst, p.exitCode(), p.state))
	}()
	go func() {
		defer close(out)
		defer logR.Close()
		prefix := fmt.Sprintf("sidecar#%d", inst)
		scenarios.TailLines(logR, p.done, 20*time.Millisecond, func(line []byte) {
			b.sidecarLog.WriteLine(prefix, line)
			// The sidecar says it holds the descriptor (csi-plugin/sidecar), or, keeping a descriptor the plugin keeps a
			// copy of (--sidecar-keep-fd), that its FUSE server serves it (csi-plugin/keeper).
			if bytes.Contains(line, []byte(contract.SidecarReceived)) || bytes.Contains(line, []byte(contract.KeeperServed)) {
				b.sidecarEvent(scenarios.KReady, scenarios.LineTime(line, time.Now()), string(line))
			}
		})
	}()
	return nil
}

// superviseSidecar is kubelet's handling of the running native sidecar until ctx (the pod's) ends: whenever
// it exits it is started again once the restart back-off allows, the first time at once (the real kubelet
// started it again about 1 s after its FUSE server was killed: its next sync, v1.37.2 and v1.36.3).
func (b *Backend) superviseSidecar(ctx context.Context) {
	defer b.wg.Done()
	s := b.sidecar
	for {
		p := s.current()
		select {
		case <-p.done:
		case <-ctx.Done():
			return // the pod's deletion or the teardown stops it
		}
		s.waitOutput()
		for !s.bo.sync(p.exitTime, time.Now()) {
			if scenarios.Sleep(ctx, s.bo.base) != nil {
				return
			}
		}
		if ctx.Err() != nil {
			return
		}
		if err := b.startSidecar(); err != nil {
			b.logf("sidecar: restart failed: %v", err)
			if scenarios.Sleep(ctx, s.bo.base) != nil {
				return
			}
		}
	}
}

// killSidecar sends SIGKILL to the sidecar container's init (PID 1 of its namespace: dummy-fuse dies with it).
// Like a native sidecar's on a node, it does not stay down: superviseSidecar starts it again.
func (b *Backend) killSidecar(ctx context.Context) error {
	return b.killContainer(ctx, b.sidecar.current(), "sidecar container", b.sidecarEvent)
}
