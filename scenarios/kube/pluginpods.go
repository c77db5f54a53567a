package kube

// Plugin pods: the plugin DaemonSet's pods, their logs and readiness, and NodeUnstageVolume in their log. The
// keeper DaemonSet's pods (keeper.go) are followed the same way.

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// dsPod is one pod of the plugin or the keeper DaemonSet.
type dsPod struct {
	w    *podWatch
	name string
	node string

	mu      sync.Mutex
	started int // instances whose start was recorded
	running bool
	endCh   chan struct{} // closed and replaced when an instance's log ends
}

// observeDSPod hands the pod's new state to its dsPod in pods, made on its first appearance; seen is false then.
func (b *Backend) observeDSPod(pods map[string]*dsPod, p *corev1.Pod, deleted bool) (pp *dsPod, seen bool) {
	b.mu.Lock()
	pp, seen = pods[string(p.UID)]
	if !seen {
		pp = &dsPod{w: newPodWatch(), name: p.Name, endCh: make(chan struct{})}
		pods[string(p.UID)] = pp
	}
	pp.node = p.Spec.NodeName
	b.mu.Unlock()
	pp.w.set(p, deleted)
	return pp, seen
}

// startOnce reports whether instance n's start is still to be recorded, and marks it recorded.
func (pp *dsPod) startOnce(n int) bool {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	pp.running = true
	if n < pp.started {
		return false
	}
	pp.started = n + 1
	return true
}

// endText says how an instance of the pod ended: term is its termination (nil when unknown), gone says the
// pod was deleted.
func (pp *dsPod) endText(term *corev1.ContainerStateTerminated, gone bool) string {
	switch {
	case term != nil:
		return fmt.Sprintf("pod %s exited with code %d (%s)", pp.name, term.ExitCode, term.Reason)
	case gone:
		return "pod " + pp.name + " deleted"
	}
	return "pod " + pp.name + " ended"
}

func (pp *dsPod) markEnded() {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	pp.running = false
	close(pp.endCh)
	pp.endCh = make(chan struct{})
}

// waitDown waits until no instance of the pod runs (its log stream ended).
func (pp *dsPod) waitDown(ctx context.Context, timeout time.Duration) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		pp.mu.Lock()
		running, ch := pp.running, pp.endCh
		pp.mu.Unlock()
		if !running {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("pod %s still logging %s after its deletion", pp.name, timeout)
		case <-ch:
		}
	}
}

// onPluginPod follows every plugin pod from its first appearance: its log (klog lines with the runtime's
// timestamps) into plugin.log, "Ready" as KReady of the plugin container, and its start and end.
func (b *Backend) onPluginPod(p *corev1.Pod, deleted bool) {
	pp, seen := b.observeDSPod(b.plugins, p, deleted)
	if seen {
		return
	}
	b.wg.Add(1)
	go b.follow(pp.w, pluginContainer, true, instanceHandler{
		line: func(n int, info instanceInfo, line []byte, ts time.Time) {
			if pp.startOnce(n) {
				b.nodeEvent(pp, topology.PluginContainer, scenarios.KStarted, stampTime(info.startedAt, ts), fmt.Sprintf("pod %s on %s", pp.name, pp.node), "")
			}
			stamp := writePodLine(b.logs.plugin, pp.name, n, line, ts)
			if strings.Contains(string(line), `] "Ready"`) {
				b.nodeEvent(pp, topology.PluginContainer, scenarios.KReady, stamp, fmt.Sprintf("pod %s: %s", pp.name, klogMessage(line)), "")
			}
			b.watch.unstage.observe(fmt.Sprintf("%s#%d", pp.name, n), klogMessage(line), b.n.volumeHandle)
			b.pluginLine(pp, klogMessage(line), stamp)
		},
		end: func(_ int, _ instanceInfo, term *corev1.ContainerStateTerminated, gone bool) {
			b.nodeEvent(pp, topology.PluginContainer, scenarios.KExited, time.Now(), pp.endText(term, gone), "")
			pp.markEnded()
		},
	})
}

// nodeEvent records an event of component c from pod pp. Only the pods on the workload's node matter to the
// scenario; the others go to kube.log.
func (b *Backend) nodeEvent(pp *dsPod, c topology.Component, kind scenarios.Kind, t time.Time, msg, detail string) {
	if b.node != "" && pp.node != b.node {
		b.logf("%s %s on another node: %s %s", c.Noun(), pp.name, kind, msg)
		return
	}
	b.rec.Add(scenarios.Event{Time: t, Source: scenarios.SrcComponent, Component: c, Kind: kind, Message: msg, Detail: detail})
}

// klogMessage strips klog's header ("I1122 04:50:01.123456   1 server.go:158] ") from a line.
func klogMessage(line []byte) string {
	s := string(line)
	if i := strings.Index(s, "] "); i >= 0 && i < 60 {
		return s[i+2:]
	}
	return s
}

// unstageWatch notices in the plugin's log (GRPC call, request, response lines of -v=5) that NodeUnstageVolume
// of the run's volume succeeded: the one sign of kubelet's unstage that every cluster shows (a CSI volume
// without attach is not listed in node.status.volumesInUse).
type unstageWatch struct {
	mu      sync.Mutex
	calls   map[string]bool // "<pod>#<instance>[ID:n]" of NodeUnstageVolume calls
	ours    map[string]bool // those for the run's volume
	done    chan struct{}
	closed  bool
	lastErr string
	// stageCalls, stages and staged track NodeStageVolume the same way: only a volume that was staged is ever
	// unstaged, and a run whose pod never existed (the API server refused it) must not wait for that.
	stageCalls, stages map[string]bool
	staged             bool
}

func newUnstageWatch() *unstageWatch {
	return &unstageWatch{calls: map[string]bool{}, ours: map[string]bool{}, stageCalls: map[string]bool{}, stages: map[string]bool{},
		done: make(chan struct{})}
}

// stagedSeen reports whether a NodeStageVolume of the run's volume succeeded since the last reset.
func (u *unstageWatch) stagedSeen() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.staged
}

var grpcLine = regexp.MustCompile(`^(\[ID:\d+\]) GRPC (call|request|response|error): (.*)$`)

func (u *unstageWatch) observe(who, msg, handle string) {
	m := grpcLine.FindStringSubmatch(msg)
	if m == nil {
		return
	}
	key := who + m[1]
	u.mu.Lock()
	defer u.mu.Unlock()
	switch m[2] {
	case "call":
		if strings.HasSuffix(m[3], "/NodeUnstageVolume") {
			u.calls[key] = true
		}
		if strings.HasSuffix(m[3], "/NodeStageVolume") {
			u.stageCalls[key] = true
		}
	case "request":
		if u.calls[key] && strings.Contains(m[3], `"volume_id":"`+handle+`"`) {
			u.ours[key] = true
		}
		if u.stageCalls[key] && strings.Contains(m[3], `"volume_id":"`+handle+`"`) {
			u.stages[key] = true
		}
	case "response":
		if u.stages[key] {
			u.staged = true
		}
		if u.ours[key] && !u.closed {
			u.closed = true
			close(u.done)
		}
	case "error":
		if u.ours[key] {
			u.lastErr = m[3]
		}
	}
}

// reset forgets a NodeUnstageVolume seen so far: the next wait waits for another one (of a new pod's volume).
func (u *unstageWatch) reset() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.calls, u.ours, u.lastErr = map[string]bool{}, map[string]bool{}, ""
	u.stageCalls, u.stages, u.staged = map[string]bool{}, map[string]bool{}, false
	if u.closed {
		u.done, u.closed = make(chan struct{}), false
	}
}

// wait waits until NodeUnstageVolume of the run's volume succeeded.
func (u *unstageWatch) wait(ctx context.Context, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	u.mu.Lock()
	done := u.done
	u.mu.Unlock()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		u.mu.Lock()
		defer u.mu.Unlock()
		if u.lastErr != "" {
			return fmt.Errorf("NodeUnstageVolume failed: %s", u.lastErr)
		}
		return fmt.Errorf("no successful NodeUnstageVolume in the plugin's log within %s", timeout)
	}
}
