package kube

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
)

// kFailedMount is kubelet's FailedMount event (MountVolume.SetUp failed ...): not a container start failure,
// but worth seeing on the timeline.
const kFailedMount scenarios.Kind = "failed_mount"

// podWatch holds the latest state of one pod as the informer delivered it, and wakes up waiters on change.
type podWatch struct {
	mu      sync.Mutex
	pod     *corev1.Pod
	deleted bool
	ch      chan struct{}
}

func newPodWatch() *podWatch { return &podWatch{ch: make(chan struct{})} }

func (w *podWatch) set(p *corev1.Pod, deleted bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if p != nil {
		w.pod = p
	}
	w.deleted = deleted
	close(w.ch)
	w.ch = make(chan struct{})
}

func (w *podWatch) get() (*corev1.Pod, bool, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pod, w.deleted, w.ch
}

// await waits until f holds for the pod's state (timeout 0: no timeout).
func (w *podWatch) await(ctx context.Context, timeout time.Duration, f func(p *corev1.Pod, deleted bool) bool) (*corev1.Pod, error) {
	var deadline <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		deadline = t.C
	}
	for {
		p, deleted, ch := w.get()
		if f(p, deleted) {
			return p, nil
		}
		select {
		case <-ctx.Done():
			return p, ctx.Err()
		case <-deadline:
			return p, fmt.Errorf("timed out after %s", timeout)
		case <-ch:
		}
	}
}

// startInformers watches the run namespace's pods and events: the only way the backend learns about the
// cluster while a scenario runs (no polling of the API server).
func (b *Backend) startInformers() {
	b.workload = newPodWatch()
	b.probe = newPodWatch()
	f := informers.NewSharedInformerFactoryWithOptions(b.cs, 0, informers.WithNamespace(b.n.namespace))
	pods := f.Core().V1().Pods().Informer()
	_, _ = pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { b.onPod(o, false) },
		UpdateFunc: func(_, o any) { b.onPod(o, false) },
		DeleteFunc: func(o any) { b.onPod(o, true) },
	})
	evs := f.Core().V1().Events().Informer()
	_, _ = evs.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { b.onEvent(o) },
		UpdateFunc: func(_, o any) { b.onEvent(o) },
	})
	f.Start(b.ctx.Done())
	f.WaitForCacheSync(b.ctx.Done())
}

func (b *Backend) onPod(o any, deleted bool) {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	p, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	b.logPodState(p, deleted)
	switch {
	case p.Name == b.n.pod:
		b.workload.set(p, deleted)
	case p.Name == b.n.pod+"-probe":
		b.probe.set(p, deleted)
	case p.Labels["app.kubernetes.io/component"] == "node" && p.Labels["app.kubernetes.io/instance"] == releaseName:
		b.onPluginPod(p, deleted)
	}
}

// logPodState writes a line to kube.log when a pod's phase or a container's state changes.
func (b *Backend) logPodState(p *corev1.Pod, deleted bool) {
	var s strings.Builder
	fmt.Fprintf(&s, "pod %s (%s) on %s: %s", p.Name, shortUID(string(p.UID)), p.Spec.NodeName, p.Status.Phase)
	if deleted {
		s.WriteString(" DELETED")
	} else if p.DeletionTimestamp != nil {
		s.WriteString(" terminating")
	}
	for _, cs := range p.Status.ContainerStatuses {
		fmt.Fprintf(&s, "; %s restarts=%d %s", cs.Name, cs.RestartCount, stateText(cs.State))
		if t := cs.LastTerminationState.Terminated; t != nil {
			fmt.Fprintf(&s, " last=exited(%d %s)", t.ExitCode, t.Reason)
		}
	}
	line := s.String()
	b.mu.Lock()
	if b.podStates == nil {
		b.podStates = map[string]string{}
	}
	changed := b.podStates[string(p.UID)] != line
	b.podStates[string(p.UID)] = line
	b.mu.Unlock()
	if changed {
		b.logf("%s", line)
	}
}

func stateText(st corev1.ContainerState) string {
	switch {
	case st.Running != nil:
		return "running"
	case st.Terminated != nil:
		return fmt.Sprintf("exited(%d %s)", st.Terminated.ExitCode, st.Terminated.Reason)
	case st.Waiting != nil:
		if st.Waiting.Message != "" {
			return fmt.Sprintf("waiting(%s: %s)", st.Waiting.Reason, st.Waiting.Message)
		}
		return "waiting(" + st.Waiting.Reason + ")"
	}
	return "unknown"
}

func shortUID(uid string) string {
	if len(uid) > 8 {
		return uid[:8]
	}
	return uid
}

// onEvent turns the workload pod's Events into evidence: kubelet's start failures ("Failed", "Error: ..."),
// back-off and mount failures. Repeated events arrive as count increments of one Event object; each
// increment is one occurrence.
func (b *Backend) onEvent(o any) {
	ev, ok := o.(*corev1.Event)
	if !ok || ev.InvolvedObject.Kind != "Pod" {
		return
	}
	count := max(ev.Count, 1)
	b.mu.Lock()
	prev := b.events[string(ev.UID)]
	if count <= prev {
		b.mu.Unlock()
		return
	}
	b.events[string(ev.UID)] = count
	b.mu.Unlock()

	seen := time.Now()
	stamp := ev.LastTimestamp.Time
	if stamp.IsZero() {
		stamp = ev.FirstTimestamp.Time
	}
	if stamp.IsZero() {
		stamp = ev.EventTime.Time
	}
	t := stampTime(stamp, seen)
	b.logf("event %s %s %s %s x%d (at %s): %s", ev.Type, ev.Reason, ev.InvolvedObject.Name, ev.InvolvedObject.FieldPath,
		count, t.UTC().Format("15:04:05.000"), ev.Message)
	if ev.InvolvedObject.Name != b.n.pod || string(ev.InvolvedObject.UID) != b.workloadUID() {
		return
	}
	c := containerOf(ev.InvolvedObject.FieldPath)
	msg := strings.TrimPrefix(ev.Message, "(combined from similar events): ")
	for i := prev; i < count; i++ {
		switch ev.Reason {
		case "Failed":
			if c == "" {
				continue
			}
			e := scenarios.Event{Time: t, Source: scenarios.SrcKubelet, Kind: scenarios.KStartFailed, Container: c,
				Instance: b.starts(c), Message: msg, Errno: errnoIn(msg)}
			if e.Errno == "" && b.kubelet != nil {
				// The cause is only in kubelet's log (e.g. "failed to prepare subPath"): attach it when it shows up.
				b.wg.Add(1)
				go func() {
					defer b.wg.Done()
					if cause, ok := b.kubelet.cause(b.ctx, c, string(ev.InvolvedObject.UID), t); ok {
						e.Detail, e.Errno = cause, errnoIn(cause)
					}
					b.rec.Add(e)
				}()
				continue
			}
			b.rec.Add(e)
		case "BackOff":
			b.rec.Add(scenarios.Event{Time: t, Source: scenarios.SrcKubelet, Kind: scenarios.KBackOff, Container: c,
				Instance: b.starts(c), Message: msg})
		case "FailedMount", "FailedMapVolume", "FailedAttachVolume":
			b.rec.Add(scenarios.Event{Time: t, Source: scenarios.SrcKubelet, Kind: kFailedMount, Message: msg})
		}
	}
}

func (b *Backend) workloadUID() string {
	if b.workload == nil {
		return ""
	}
	p, _, _ := b.workload.get()
	if p == nil {
		return ""
	}
	return string(p.UID)
}

// starts is the number of recorded starts of container c: the instance number its next start gets.
func (b *Backend) starts(c string) int {
	return b.rec.Count(func(e scenarios.Event) bool { return e.Container == c && e.Kind == scenarios.KContainerStarted })
}

// instanceInfo is what the pod status says about one instance (0, 1, … = its restart count) of a container.
type instanceInfo struct {
	id        string
	startedAt time.Time
	// current: the latest instance (logs without --previous); previous: the one before it (--previous);
	// lost: older, its log is gone (kubelet keeps the latest two containers).
	current, previous, lost bool
	term                    *corev1.ContainerStateTerminated
}

// instanceOf reports whether instance n of container name exists in p's status, and what it says about it.
func instanceOf(p *corev1.Pod, name string, n int) (instanceInfo, bool) {
	cs, ok := containerStatus(p, name)
	if !ok {
		return instanceInfo{}, false
	}
	rc := int(cs.RestartCount)
	last := cs.LastTerminationState.Terminated
	switch {
	case rc > n+1:
		return instanceInfo{lost: true}, true
	case rc == n+1:
		info := instanceInfo{previous: true}
		if last != nil && last.ContainerID != cs.ContainerID {
			info.id, info.startedAt, info.term = last.ContainerID, last.StartedAt.Time, last
		}
		return info, true
	case rc == n:
		switch {
		case cs.State.Running != nil:
			return instanceInfo{id: cs.ContainerID, startedAt: cs.State.Running.StartedAt.Time, current: true}, true
		case cs.State.Terminated != nil:
			t := cs.State.Terminated
			return instanceInfo{id: t.ContainerID, startedAt: t.StartedAt.Time, current: true, term: t}, true
		case last != nil:
			return instanceInfo{id: last.ContainerID, startedAt: last.StartedAt.Time, current: true, term: last}, true
		}
	}
	return instanceInfo{}, false
}

// terminationOf returns the termination of the container instance with ID id, if the status shows it.
func terminationOf(p *corev1.Pod, name, id string) *corev1.ContainerStateTerminated {
	cs, ok := containerStatus(p, name)
	if !ok || id == "" {
		return nil
	}
	if t := cs.State.Terminated; t != nil && t.ContainerID == id {
		return t
	}
	if t := cs.LastTerminationState.Terminated; t != nil && t.ContainerID == id {
		return t
	}
	return nil
}

// startFailed reports a termination of a container that never ran: runc failed to start it (kubelet's
// RunContainerError; the "Failed" event reports it).
func startFailed(t *corev1.ContainerStateTerminated) bool {
	return t != nil && (t.Reason == "StartError" || t.Reason == "ContainerCannotRun")
}

// instanceHandler receives one container's instances and their log lines, in order.
type instanceHandler struct {
	// line is called for every log line; ts is the runtime's timestamp when timestamps were asked for.
	line func(n int, info instanceInfo, line []byte, ts time.Time)
	// end is called when instance n's log ended; term is its termination (nil when unknown) and gone says
	// the pod was deleted.
	end func(n int, info instanceInfo, term *corev1.ContainerStateTerminated, gone bool)
}

// follow streams the log of every instance of one container of the pod w watches, one after the other, until
// the pod is deleted or the backend stops. Each instance's log is read with Follow while it is the latest
// (the stream ends when it exits) and with Previous when a restart came first; a broken stream is resumed
// without repeating lines.
func (b *Backend) follow(w *podWatch, container string, timestamps bool, h instanceHandler) {
	defer b.wg.Done()
	for n := 0; b.ctx.Err() == nil; n++ {
		var info instanceInfo
		p, err := w.await(b.ctx, 0, func(p *corev1.Pod, deleted bool) bool {
			if p == nil {
				return deleted
			}
			var ok bool
			info, ok = instanceOf(p, container, n)
			return ok || deleted
		})
		if err != nil || p == nil {
			return
		}
		if info == (instanceInfo{}) { // the pod was deleted before this instance existed
			return
		}
		if info.lost {
			b.logf("%s %s#%d: log lost (kubelet keeps only the previous instance's)", p.Name, container, n)
			h.end(n, info, nil, false)
			continue
		}
		b.streamInstance(w, p.Name, container, n, info, timestamps, h)
		term, gone := b.awaitTermination(w, container, info.id)
		h.end(n, info, term, gone)
		if gone {
			return
		}
	}
}

// streamInstance reads instance n's log to its end.
func (b *Backend) streamInstance(w *podWatch, pod, container string, n int, info instanceInfo, timestamps bool, h instanceHandler) {
	seen := 0
	for attempt := 0; b.ctx.Err() == nil; attempt++ {
		opts := &corev1.PodLogOptions{Container: container, Follow: info.current, Previous: info.previous, Timestamps: timestamps}
		rc, err := b.cs.CoreV1().Pods(b.n.namespace).GetLogs(pod, opts).Stream(b.ctx)
		if err == nil {
			i := 0
			readLines(rc, func(line []byte) {
				i++
				if i <= seen {
					return // already delivered before the stream broke
				}
				seen++
				var ts time.Time
				if timestamps {
					ts, line = splitTimestamp(line)
				}
				h.line(n, info, line, ts)
			})
			rc.Close()
		} else {
			b.logf("logs %s %s#%d: %v", pod, container, n, err)
		}
		if !info.current {
			return
		}
		// A followed stream ends when the container exits; if it still runs, the stream broke: resume.
		p, deleted, _ := w.get()
		if deleted || p == nil || !stillRunning(p, container, info.id) || attempt > 20 {
			return
		}
		if scenarios.Sleep(b.ctx, time.Second) != nil {
			return
		}
	}
}

func stillRunning(p *corev1.Pod, container, id string) bool {
	cs, ok := containerStatus(p, container)
	return ok && cs.State.Running != nil && cs.ContainerID == id
}

// awaitTermination waits (at most 10 s) until the status shows how instance id ended, or the pod is gone.
func (b *Backend) awaitTermination(w *podWatch, container, id string) (*corev1.ContainerStateTerminated, bool) {
	var term *corev1.ContainerStateTerminated
	var gone bool
	_, _ = w.await(b.ctx, 10*time.Second, func(p *corev1.Pod, deleted bool) bool {
		if p != nil {
			term = terminationOf(p, container, id)
		}
		gone = deleted
		return term != nil || deleted
	})
	return term, gone
}

// readLines calls f for every line of r (without the newline), also a last line without one.
func readLines(r io.Reader, f func([]byte)) {
	br := bufio.NewReaderSize(r, 64*1024)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			f([]byte(strings.TrimRight(string(line), "\r\n")))
		}
		if err != nil {
			return
		}
	}
}

// splitTimestamp splits a line of `kubectl logs --timestamps` into the runtime's RFC3339Nano time and the text.
func splitTimestamp(line []byte) (time.Time, []byte) {
	s := string(line)
	sp := strings.IndexByte(s, ' ')
	if sp < 0 {
		return time.Time{}, line
	}
	t, err := time.Parse(time.RFC3339Nano, s[:sp])
	if err != nil {
		return time.Time{}, line
	}
	return t, []byte(s[sp+1:])
}

// trackContainer follows the workload container c: its log lines (with their own times) and, from the pod
// status, each instance's start and exit.
func (b *Backend) trackContainer(c string) {
	type inst struct {
		started bool
		exitAt  time.Time // the workload's own "exit" line
	}
	var cur inst
	recordStart := func(n int, info instanceInfo, first time.Time) {
		if cur.started || startFailed(info.term) {
			return
		}
		cur.started = true
		t := stampTime(info.startedAt, time.Now())
		if !first.IsZero() && first.After(info.startedAt) {
			t = minTime(t, first)
		}
		b.rec.Add(scenarios.Event{Time: t, Source: scenarios.SrcKubelet, Kind: scenarios.KContainerStarted,
			Container: c, Instance: n, Message: "container " + shortID(info.id)})
	}
	b.wg.Add(1)
	go b.follow(b.workload, c, false, instanceHandler{
		line: func(n int, info instanceInfo, line []byte, _ time.Time) {
			b.workloadLog.WriteLine(fmt.Sprintf("%s#%d", c, n), line)
			e := scenarios.ParseWorkloadLine(line, c, n, time.Now())
			recordStart(n, info, e.Time)
			if e.Kind == scenarios.KWorkloadExit {
				cur.exitAt = e.Time
			}
			b.rec.Add(e)
		},
		end: func(n int, info instanceInfo, term *corev1.ContainerStateTerminated, gone bool) {
			defer func() { cur = inst{} }()
			if info.lost {
				b.rec.Add(scenarios.Event{Source: scenarios.SrcWorkload, Kind: scenarios.KLog, Container: c, Instance: n,
					Message: "(this instance's log is lost: it restarted again before its log was read)"})
				return
			}
			if startFailed(term) {
				b.logf("%s#%d never ran: %s (%s)", c, n, term.Reason, term.Message)
				return
			}
			recordStart(n, info, time.Time{})
			if term == nil {
				return // still running when the pod was deleted: teardown, not evidence
			}
			t := stampTime(term.FinishedAt.Time, time.Now())
			if !cur.exitAt.IsZero() {
				t = cur.exitAt
			}
			b.rec.Add(scenarios.Event{Time: t, Source: scenarios.SrcKubelet, Kind: scenarios.KContainerExited,
				Container: c, Instance: n, ExitCode: scenarios.IntPtr(int(term.ExitCode)), Message: term.Reason})
		},
	})
}

func shortID(id string) string {
	if i := strings.Index(id, "://"); i >= 0 {
		id = id[i+3:]
	}
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// pluginPod is one pod of the plugin DaemonSet.
type pluginPod struct {
	w    *podWatch
	name string
	node string

	mu      sync.Mutex
	started int // instances whose start was recorded
	running bool
	endCh   chan struct{} // closed and replaced when an instance's log ends
}

// startOnce reports whether instance n's start is still to be recorded, and marks it recorded.
func (pp *pluginPod) startOnce(n int) bool {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	pp.running = true
	if n < pp.started {
		return false
	}
	pp.started = n + 1
	return true
}

func (pp *pluginPod) markEnded() {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	pp.running = false
	close(pp.endCh)
	pp.endCh = make(chan struct{})
}

// waitDown waits until no instance of the pod runs (its log stream ended).
func (pp *pluginPod) waitDown(ctx context.Context, timeout time.Duration) error {
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
			return fmt.Errorf("plugin pod %s still logging %s after its deletion", pp.name, timeout)
		case <-ch:
		}
	}
}

// onPluginPod follows every plugin pod from its first appearance: its log (klog lines with the runtime's
// timestamps) into plugin.log, "Ready" as KPluginReady, and its start and end.
func (b *Backend) onPluginPod(p *corev1.Pod, deleted bool) {
	uid := string(p.UID)
	b.mu.Lock()
	pp, known := b.plugins[uid]
	if !known {
		pp = &pluginPod{w: newPodWatch(), name: p.Name, node: p.Spec.NodeName, endCh: make(chan struct{})}
		b.plugins[uid] = pp
	}
	pp.node = p.Spec.NodeName
	b.mu.Unlock()
	pp.w.set(p, deleted)
	if known {
		return
	}
	b.wg.Add(1)
	go b.follow(pp.w, pluginContainer, true, instanceHandler{
		line: func(n int, info instanceInfo, line []byte, ts time.Time) {
			if pp.startOnce(n) {
				b.pluginEvent(pp, scenarios.KStarted, stampTime(info.startedAt, ts), fmt.Sprintf("pod %s on %s", pp.name, pp.node))
			}
			stamp := ts
			if stamp.IsZero() {
				stamp = time.Now()
			}
			b.pluginLog.WriteLine(fmt.Sprintf("%s %s#%d", stamp.UTC().Format("15:04:05.000000"), pp.name, n), line)
			if strings.Contains(string(line), `] "Ready"`) {
				b.pluginEvent(pp, scenarios.KReady, stamp, fmt.Sprintf("pod %s: %s", pp.name, klogMessage(line)))
			}
			b.unstage.observe(fmt.Sprintf("%s#%d", pp.name, n), klogMessage(line), b.n.volumeHandle)
		},
		end: func(n int, _ instanceInfo, term *corev1.ContainerStateTerminated, gone bool) {
			msg := "pod " + pp.name
			switch {
			case term != nil:
				msg += fmt.Sprintf(" exited with code %d (%s)", term.ExitCode, term.Reason)
			case gone:
				msg += " deleted"
			}
			b.pluginEvent(pp, scenarios.KExited, time.Now(), msg)
			pp.markEnded()
		},
	})
}

func (b *Backend) pluginEvent(pp *pluginPod, kind scenarios.Kind, t time.Time, msg string) {
	// Only the plugin on the workload's node matters to the scenario; the others go to kube.log.
	if b.node != "" && pp.node != b.node {
		b.logf("plugin %s on another node: %s %s", pp.name, kind, msg)
		return
	}
	b.rec.Add(scenarios.Event{Time: t, Source: scenarios.SrcComponent, Component: scenarios.PluginContainer, Kind: kind, Message: msg})
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
}

func newUnstageWatch() *unstageWatch {
	return &unstageWatch{calls: map[string]bool{}, ours: map[string]bool{}, done: make(chan struct{})}
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
	case "request":
		if u.calls[key] && strings.Contains(m[3], `"volume_id":"`+handle+`"`) {
			u.ours[key] = true
		}
	case "response":
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

// wait waits until NodeUnstageVolume of the run's volume succeeded.
func (u *unstageWatch) wait(ctx context.Context, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-u.done:
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
