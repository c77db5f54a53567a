package kube

// Workload evidence: the workload containers' log lines, starts and exits.

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
)

// trackContainer follows the workload container c of the current pod: its log lines (with their own times)
// and, from the pod status, each instance's start and exit. Instance n of the pod is recorded as base+n.
func (b *Backend) trackContainer(c string, base int) {
	type inst struct {
		started  bool
		exitAt   time.Time // the workload's own "exit" line
		exitCode *int      // and the code it says
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
			e := scenarios.ParseWorkloadLine(line, c, base+n, time.Now())
			b.logs.workload.WriteLine(fmt.Sprintf("%s#%d", c, base+n), line)
			recordStart(base+n, info, e.Time)
			if e.Kind == scenarios.KWorkloadExit {
				cur.exitAt, cur.exitCode = e.Time, e.ExitCode
			}
			b.rec.Add(e)
		},
		end: func(n int, info instanceInfo, term *corev1.ContainerStateTerminated, gone bool) {
			defer func() { cur = inst{} }()
			n += base
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
			code, why := int(term.ExitCode), term.Reason
			if removedForRestartAll(term) {
				code, why = removedExit(term, cur.exitCode)
			}
			b.rec.Add(scenarios.Event{Time: t, Source: scenarios.SrcKubelet, Kind: scenarios.KContainerExited,
				Container: c, Instance: n, ExitCode: scenarios.IntPtr(code), Message: why})
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
