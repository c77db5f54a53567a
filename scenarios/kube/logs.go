package kube

// Logs: following the log of every instance of a container, one after the other.

import (
	"bufio"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// instanceInfo is what the pod status says about one instance (0, 1, … = its restart count) of a container.
type instanceInfo struct {
	id        string
	startedAt time.Time
	// current: the latest instance (logs without --previous); previous: the one before it (--previous);
	// lost: older, its log is gone (kubelet keeps the latest two containers).
	current, previous, lost bool
	// removed: RestartAllContainers removed it (removedForRestartAll): its log is read from the node's file.
	removed bool
	term    *corev1.ContainerStateTerminated
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
		if removedForRestartAll(last) {
			info.removed, info.term = true, last
			return info, true
		}
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
		case last != nil && !removedForRestartAll(last): // that record is instance n-1's: n has not started
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
	// The pod the watch holds now: a pod created again under the same name is another pod, followed anew.
	p0, _, _ := w.get()
	for n := 0; b.ctx.Err() == nil; n++ {
		var info instanceInfo
		p, err := w.await(b.ctx, 0, func(p *corev1.Pod, deleted bool) bool {
			if p == nil {
				return deleted
			}
			if p0 != nil && p.UID != p0.UID {
				return true // another pod: this one is gone
			}
			var ok bool
			info, ok = instanceOf(p, container, n)
			return ok || deleted
		})
		if err != nil || p == nil || (p0 != nil && p.UID != p0.UID) {
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
		seen := b.streamInstance(w, p, container, n, info, timestamps, h)
		term, gone := b.awaitTermination(w, p.UID, container, n, info.id)
		if !info.removed && removedForRestartAll(term) {
			// The live stream may have ended before the last lines: the node's file has them all.
			b.readRemovedLog(p, container, n, info, seen, timestamps, h)
		}
		h.end(n, info, term, gone)
		if gone {
			return
		}
	}
}

// streamInstance reads instance n's log to its end and returns how many lines it delivered.
func (b *Backend) streamInstance(w *podWatch, p *corev1.Pod, container string, n int, info instanceInfo, timestamps bool, h instanceHandler) int {
	if info.removed {
		return b.readRemovedLog(p, container, n, info, 0, timestamps, h)
	}
	pod := p.Name
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
			return seen
		}
		// A followed stream ends when the container exits; if it still runs, the stream broke: resume. The pod
		// status learns of an exit up to a PLEG relist (1 s) later, and kubelet may have started the next
		// instance by then (a native sidecar's restart comes at once), whose log a resumed stream would read as
		// this one's: a stream is resumed only when the instance still runs 5 s after the stream ended.
		_, err = w.await(b.ctx, 5*time.Second, func(p *corev1.Pod, deleted bool) bool {
			return deleted || p == nil || !stillRunning(p, container, info.id)
		})
		if err == nil || b.ctx.Err() != nil || attempt > 20 {
			return seen
		}
		b.logf("logs %s %s#%d: the stream ended while it still runs: resumed", pod, container, n)
	}
	return seen
}

func stillRunning(p *corev1.Pod, container, id string) bool {
	cs, ok := containerStatus(p, container)
	return ok && cs.State.Running != nil && cs.ContainerID == id
}

// awaitTermination waits (at most 10 s) until the status shows how instance n (id) ended, or the pod (uid) is
// gone. An instance RestartAllContainers removed has no record of its own: kubelet's stand-in is taken.
func (b *Backend) awaitTermination(w *podWatch, uid types.UID, container string, n int, id string) (*corev1.ContainerStateTerminated, bool) {
	var term *corev1.ContainerStateTerminated
	var gone bool
	_, _ = w.await(b.ctx, 10*time.Second, func(p *corev1.Pod, deleted bool) bool {
		if p != nil && p.UID != uid {
			gone = true // created again: the pod of this instance is gone
			return true
		}
		if p != nil {
			term = terminationOf(p, container, id)
			if info, ok := instanceOf(p, container, n); term == nil && ok && info.removed {
				term = info.term
			}
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

// writePodLine writes a line of instance n of a pod's container to w, prefixed with its time (the API server's
// timestamp, or now when the stream had none) and the instance, and returns that time.
func writePodLine(w *scenarios.LogFile, pod string, n int, line []byte, ts time.Time) time.Time {
	if ts.IsZero() {
		ts = time.Now()
	}
	w.WriteLine(fmt.Sprintf("%s %s#%d", ts.UTC().Format("15:04:05.000000"), pod, n), line)
	return ts
}
