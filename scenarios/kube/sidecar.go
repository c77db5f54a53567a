package kube

// The pod's FUSE sidecar (sidecar mode): a native sidecar (an init container with restartPolicy: Always), whose
// restarts kubelet reports in initContainerStatuses and makes by itself.

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/contract"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// sidecarCrash is the command that kills the sidecar container's FUSE server (csi-plugin/sidecar.Crash).
const sidecarCrash = "sidecar-crash"

func (b *Backend) sidecarEvent(kind scenarios.Kind, t time.Time, msg string) {
	b.rec.Add(scenarios.Event{Time: t, Source: scenarios.SrcComponent, Component: topology.SidecarContainer, Kind: kind, Message: msg})
}

// trackSidecar follows every instance of the current pod's FUSE sidecar: its log (stamped by the runtime, and
// by the sidecar itself) into sidecar.log; its start (its first line, else the status's startedAt), its
// "received the FUSE descriptor" line as KReady, and its exit with the status's exit code.
func (b *Backend) trackSidecar() {
	name := b.sidecarName
	started := -1      // the last instance whose start is recorded
	var last time.Time // the runtime's time of the current instance's last line
	recordStart := func(n int, info instanceInfo, t time.Time, msg string) {
		if n <= started || startFailed(info.term) {
			return
		}
		started = n
		b.sidecarEvent(scenarios.KStarted, t, fmt.Sprintf("%s#%d (container %s): %s", name, n, shortID(info.id), msg))
	}
	b.wg.Add(1)
	go b.follow(b.workload, name, true, instanceHandler{
		line: func(n int, info instanceInfo, line []byte, ts time.Time) {
			ts = writePodLine(b.logs.sidecar, name, n, line, ts)
			last = ts
			t := scenarios.LineTime(line, ts)
			recordStart(n, info, t, "its first line")
			if bytes.Contains(line, []byte(contract.SidecarReceived)) {
				b.sidecarEvent(scenarios.KReady, t, string(line))
			}
		},
		end: func(n int, info instanceInfo, term *corev1.ContainerStateTerminated, gone bool) {
			if info.lost {
				b.logf("%s#%d: its log is lost (it restarted again before its log was read)", name, n)
				return
			}
			defer func() { last = time.Time{} }()
			recordStart(n, info, stampTime(info.startedAt, time.Now()), "started (pod status), logged nothing")
			switch {
			case term != nil:
				// The status says the second; the last line (its exit's cause, e.g. "dummy-fuse: signal:
				// killed") came in that second and just before the exit.
				t := stampTime(term.FinishedAt.Time, time.Now())
				if !last.Before(term.FinishedAt.Time) {
					t = minTime(t, last)
				}
				b.sidecarEvent(scenarios.KExited, t,
					fmt.Sprintf("%s#%d exited with code %d (%s)", name, n, term.ExitCode, term.Reason))
			case gone:
				b.sidecarEvent(scenarios.KExited, time.Now(), fmt.Sprintf("%s#%d: the pod is gone", name, n))
			}
		},
	})
}

// killSidecar kills the FUSE server in the sidecar container, as a crash does: `csi-plugin sidecar-crash`
// executed in the container sends it SIGKILL (the image has no shell; PID 1 of a container cannot be killed
// from inside), `csi-plugin sidecar` exits with its status, and the container with it. It returns once the
// pod status shows the instance terminated. Kubelet restarts a native sidecar by itself, at once the first
// time: unlike the plugin, the sidecar does not stay down until Start.
func (b *Backend) killSidecar(ctx context.Context) error {
	p, deleted, _ := b.workload.get()
	if p == nil || deleted {
		return fmt.Errorf("no workload pod")
	}
	cs, ok := containerStatus(p, b.sidecarName)
	if !ok || cs.State.Running == nil {
		return fmt.Errorf("the sidecar container %s is not running", b.sidecarName)
	}
	id := cs.ContainerID
	cmd := []string{sidecarCommand(p, b.sidecarName), sidecarCrash}
	b.sidecarEvent(scenarios.KKilled, time.Time{}, fmt.Sprintf("exec %s in container %s (%s): SIGKILL of its FUSE server",
		strings.Join(cmd, " "), b.sidecarName, shortID(id)))
	out, execErr := b.exec(ctx, p.Name, b.sidecarName, cmd)
	b.logf("exec %s in %s: %q, %v", strings.Join(cmd, " "), b.sidecarName, out, execErr)
	if s := strings.TrimSpace(out); s != "" {
		b.logs.sidecar.WriteLine(time.Now().UTC().Format("15:04:05.000000")+" exec", []byte(s))
	}
	// The command may die with the container (PID 1 went, so the kernel killed the rest of its namespace)
	// before its exit status is back: the pod status decides.
	_, err := b.workload.await(ctx, 30*time.Second, func(p *corev1.Pod, deleted bool) bool {
		return deleted || terminationOf(p, b.sidecarName, id) != nil
	})
	if err != nil {
		return fmt.Errorf("the sidecar container %s still runs after %s (exec: %v): %w", b.sidecarName, sidecarCrash, execErr, err)
	}
	b.progress("sidecar container %s (%s) killed: its FUSE server got SIGKILL", b.sidecarName, shortID(id))
	return nil
}

// startSidecar waits until kubelet has started the sidecar again after its kill (it restarts a native sidecar
// by itself) and returns once it runs; it serves only if the plugin has a descriptor for it, which KReady will
// say.
func (b *Backend) startSidecar(ctx context.Context) error {
	if err := b.rec.AwaitRestart(ctx, topology.SidecarContainer, b.opts.SetupTimeout); err != nil {
		return fmt.Errorf("%w (see kube.log)", err)
	}
	b.progress("kubelet started the sidecar container %s again", b.sidecarName)
	return nil
}

// sidecarCommand is the executable of the pod's init container name (the manifest's /usr/local/bin/csi-plugin).
func sidecarCommand(p *corev1.Pod, name string) string {
	for _, c := range p.Spec.InitContainers {
		if c.Name == name && len(c.Command) > 0 {
			return c.Command[0]
		}
	}
	return "/usr/local/bin/csi-plugin"
}

// exec runs cmd in container of pod (kubectl exec), as kubectl does: over WebSocket, falling back to SPDY on
// an older API server. It returns the command's output (stdout and stderr).
func (b *Backend) exec(ctx context.Context, pod, container string, cmd []string) (string, error) {
	req := b.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(b.n.namespace).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: cmd, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(b.cfg, "GET", req.URL().String())
	if err != nil {
		return "", err
	}
	spdy, err := remotecommand.NewSPDYExecutor(b.cfg, "POST", req.URL())
	if err != nil {
		return "", err
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return "", err
	}
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &out})
	return out.String(), err
}

// sidecarPart is the workload pod's FUSE sidecar (a native sidecar), when the scenario's pod has one.
type sidecarPart struct {
	noPart
	b *Backend
}

func newSidecarPart(b *Backend, env *scenarios.Env) (part, error) {
	var err error
	if b.logs.sidecar, err = env.Log("sidecar.log"); err != nil {
		return nil, err
	}
	return &sidecarPart{b: b}, nil
}

func (p *sidecarPart) kill(ctx context.Context) error  { return p.b.killSidecar(ctx) }
func (p *sidecarPart) start(ctx context.Context) error { return p.b.startSidecar(ctx) }
