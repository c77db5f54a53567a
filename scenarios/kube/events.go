package kube

// Events: the workload pod's Events (kubelet's start failures, back-off) as evidence.

import (
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/contract"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
)

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
	prev := b.watch.events[string(ev.UID)]
	if count <= prev {
		b.mu.Unlock()
		return
	}
	b.watch.events[string(ev.UID)] = count
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
	current := string(ev.InvolvedObject.UID) == b.workloadUID()
	b.mu.Lock()
	earlier := b.pod.uidSet[string(ev.InvolvedObject.UID)]
	b.mu.Unlock()
	if !current && !(earlier && podEvent(ev.Reason)) {
		// Kubelet's container events count only for the pod followed now; an event on the pod itself (the
		// remediator's deletion) may arrive after the pod's successor was taken up, and still belongs to the run.
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
			if e.Errno == "" && b.watch.kubelet != nil {
				// The cause is only in kubelet's log (e.g. "failed to prepare subPath"): attach it when it shows up.
				b.wg.Add(1)
				go func() {
					defer b.wg.Done()
					if cause, ok := b.watch.kubelet.cause(b.ctx, c, string(ev.InvolvedObject.UID), t); ok {
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
		case scenarios.ReasonVolumeConditionAbnormal, contract.ReasonDeleted, contract.ReasonLeftAlone:
			src, _ := podEventSource(ev.Reason)
			b.rec.Add(scenarios.Event{Time: t, Source: src, Kind: scenarios.KPodEvent, Detail: ev.Reason,
				Message: ev.Type + " " + ev.Reason + ": " + msg})
		case "FailedMount", "FailedMapVolume", "FailedAttachVolume":
			b.rec.Add(scenarios.Event{Time: t, Source: scenarios.SrcKubelet, Kind: kFailedMount, Message: msg})
		}
	}
}

// podEvent says whether reason is one of the events on the pod itself that the checks read (podEventSource).
func podEvent(reason string) bool {
	_, ok := podEventSource(reason)
	return ok
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
