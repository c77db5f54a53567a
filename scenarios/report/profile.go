package report

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
)

// Profile is the outage profile of a driver-agnostic run (scenarios.Scenario.Measured): for each I/O kind what
// the workload saw after the fault, and what kubelet said. Times are from the fault (the first kill or
// rollout), in seconds; 0 with its flag false means it did not happen.
type Profile struct {
	IO      []IOProfile    `json:"io"`
	Kubelet KubeletProfile `json:"kubelet"`
}

// IOProfile is one I/O kind: a workload container's reads (kept fd, new open, subPath, direct read), or the
// stat of the pod's volume dir on the node (kind "stat": the probe records only changes of its result, so
// ReadsBefore counts those and Stall is how long it failed).
type IOProfile struct {
	Kind string `json:"kind"`
	// ReadsBefore counts the successful reads (stats) before the fault: the kind was measured.
	ReadsBefore int `json:"reads_before"`
	// Failed: an error after the fault; FirstErrno its errno, ToFirstError when; Errors how many.
	Failed       bool    `json:"failed"`
	FirstErrno   string  `json:"first_errno,omitempty"`
	ToFirstError float64 `json:"fault_to_first_error_s,omitempty"`
	Errors       int     `json:"errors"`
	// Recovered: a successful read after the first error (or, without error, after the fault); ToGoodRead when.
	Recovered  bool    `json:"recovered"`
	ToGoodRead float64 `json:"fault_to_good_read_s,omitempty"`
	// Stall is the longest time without a successful read from the fault on, in milliseconds: from the last
	// good read before the fault to the next one (to the end of the run when none came).
	Stall float64 `json:"stall_ms"`
	// Restarts counts the container's starts after the fault; StartFailures its failed start attempts.
	Restarts      int `json:"restarts"`
	StartFailures int `json:"start_failures"`
}

// KubeletProfile is what kubelet said after the fault: events on the pod (start failures, failed mounts,
// volume conditions) and pod.status.volumeHealth.
type KubeletProfile struct {
	// FailedToStat: a start failed with kubelet's "failed to stat" of the volume dir.
	FailedToStat bool `json:"failed_to_stat"`
	// Messages are the distinct messages, in order, at most ten, each with its time from the fault.
	Messages []string `json:"messages,omitempty"`
	// VolumeHealth lists the changes of the pod's status.volumeHealth for the volume (with their times).
	VolumeHealth []string `json:"volume_health,omitempty"`
}

// ProfileOf computes the outage profile of o, nil when o is not a driver-agnostic run or nothing was killed.
func ProfileOf(o *scenarios.Outcome) *Profile {
	ev := o.Evidence
	if !o.Scenario.Measured || ev == nil {
		return nil
	}
	fault, ok := ev.KillTime()
	if !ok {
		return nil
	}
	since := func(t time.Time) float64 { return t.Sub(fault).Seconds() }
	p := &Profile{}
	for _, c := range o.Scenario.Pod.Containers {
		good := func(e scenarios.Event) bool {
			return e.Container == c.Name && e.Source == scenarios.SrcWorkload && e.Kind == scenarios.KRead && e.Errno == ""
		}
		bad := func(e scenarios.Event) bool { return e.Container == c.Name && e.IsWorkloadError() }
		p.IO = append(p.IO, ioProfile(ev, c.Name, fault, good, bad, since))
		io := &p.IO[len(p.IO)-1]
		for _, e := range ev.Events {
			if e.Container != c.Name || e.Time.Before(fault) {
				continue
			}
			switch e.Kind {
			case scenarios.KContainerStarted:
				io.Restarts++
			case scenarios.KStartFailed:
				io.StartFailures++
			}
		}
	}
	stat := func(ok bool) func(scenarios.Event) bool {
		return func(e scenarios.Event) bool {
			return e.Kind == scenarios.KProbe && e.Path == scenarios.PathVolume && (e.Errno == "") == ok
		}
	}
	// The probe records changes of stat's result only: the stall is the time it failed.
	st := ioProfile(ev, "stat", fault, stat(true), stat(false), since)
	st.Stall = 0
	if st.Failed {
		end := ev.Until.Sub(fault).Seconds()
		if st.Recovered {
			end = st.ToGoodRead
		}
		st.Stall = (end - st.ToFirstError) * 1000
	}
	p.IO = append(p.IO, st)
	seen := map[string]bool{}
	for _, e := range ev.Events {
		if e.Time.Before(fault) {
			continue
		}
		switch {
		case e.Kind == scenarios.KVolumeHealth:
			msg := e.Message
			if msg == "" {
				msg = "(no condition)"
			}
			p.Kubelet.VolumeHealth = append(p.Kubelet.VolumeHealth, fmt.Sprintf("+%.1fs %s", since(e.Time), msg))
		case e.Source == scenarios.SrcKubelet && (e.Kind == scenarios.KStartFailed || e.Kind == scenarios.KPodEvent || e.Kind == "failed_mount"):
			p.Kubelet.FailedToStat = p.Kubelet.FailedToStat || strings.Contains(e.Message, "failed to stat")
			if key := string(e.Kind) + e.Message; !seen[key] && len(p.Kubelet.Messages) < 10 {
				seen[key] = true
				p.Kubelet.Messages = append(p.Kubelet.Messages, fmt.Sprintf("+%.1fs %s", since(e.Time), e.Message))
			}
		}
	}
	return p
}

// ioProfile measures one I/O kind from its good and bad events.
func ioProfile(ev *scenarios.Evidence, kind string, fault time.Time, good, bad func(scenarios.Event) bool, since func(time.Time) float64) IOProfile {
	io := IOProfile{Kind: kind}
	var lastGood time.Time
	for _, e := range ev.Events {
		if e.Time.Before(fault) && good(e) {
			io.ReadsBefore++
			lastGood = e.Time
		}
	}
	from := fault
	if first, ok := ev.First(fault, bad); ok {
		io.Failed, io.FirstErrno, io.ToFirstError = true, first.Errno, since(first.Time)
		if io.FirstErrno == "" {
			io.FirstErrno = "error"
		}
		io.Errors = ev.Count(fault, bad)
		from = first.Time
	}
	end := ev.Until
	if g, ok := ev.First(from, good); ok {
		io.Recovered, io.ToGoodRead = true, since(g.Time)
	}
	// The stall: the longest gap between consecutive good reads from the last one before the fault on.
	prev := lastGood
	if prev.IsZero() {
		prev = fault
	}
	var longest time.Duration
	for _, e := range ev.Events {
		if e.Time.After(fault) && good(e) {
			longest = max(longest, e.Time.Sub(prev))
			prev = e.Time
		}
	}
	// Up to the end of the run only when the reads failed again after the last good one (or none came): else
	// the run merely ended between two reads.
	if _, failedAgain := ev.First(prev, bad); failedAgain || !io.Recovered {
		longest = max(longest, end.Sub(prev))
	}
	io.Stall = float64(longest.Microseconds()) / 1000
	return io
}

// PrintProfile prints the outage profile, one line per I/O kind.
func PrintProfile(w io.Writer, p *Profile) {
	if p == nil {
		return
	}
	fmt.Fprintln(w, "outage profile (times from the fault):")
	for _, io := range p.IO {
		fmt.Fprintf(w, "  %-12s %s\n", io.Kind, io.summary())
	}
	fmt.Fprintf(w, "  kubelet      %s\n", p.Kubelet.summary())
}

func (io IOProfile) summary() string {
	var parts []string
	if io.ReadsBefore == 0 {
		parts = append(parts, "no good read before the fault (not measured)")
	}
	if io.Failed {
		parts = append(parts, fmt.Sprintf("first error %s at +%.1fs (%d errors)", io.FirstErrno, io.ToFirstError, io.Errors))
	} else {
		parts = append(parts, "no error")
	}
	switch {
	case io.Recovered && io.Failed:
		parts = append(parts, fmt.Sprintf("good read again at +%.1fs", io.ToGoodRead))
	case io.Failed:
		parts = append(parts, "never read again")
	}
	if io.Stall > 0 {
		parts = append(parts, fmt.Sprintf("stall %s", FormatMeasure(time.Duration(io.Stall*float64(time.Millisecond)))))
	}
	if io.Restarts > 0 || io.StartFailures > 0 {
		parts = append(parts, fmt.Sprintf("%d restarts, %d failed starts", io.Restarts, io.StartFailures))
	}
	return strings.Join(parts, "; ")
}

func (k KubeletProfile) summary() string {
	var parts []string
	if k.FailedToStat {
		parts = append(parts, `"failed to stat" of the volume dir`)
	}
	parts = append(parts, slices.Concat(k.Messages, prefixed("volumeHealth ", k.VolumeHealth))...)
	if len(parts) == 0 {
		return "nothing (no event, no volumeHealth condition)"
	}
	return strings.Join(parts, "\n               ")
}

func prefixed(p string, s []string) []string {
	out := make([]string, len(s))
	for i, x := range s {
		out[i] = p + x
	}
	return out
}

// profileMarkdown is the report's section for the profile.
func profileMarkdown(b *strings.Builder, p *Profile) {
	if p == nil {
		return
	}
	b.WriteString("\n## Outage profile (measured, nothing expected)\n\n| I/O kind | good reads before | first error | errors | good read again | stall | restarts / failed starts |\n|---|---|---|---|---|---|---|\n")
	for _, io := range p.IO {
		first, again := "no error", "—"
		if io.Failed {
			first = fmt.Sprintf("%s at +%.1fs", io.FirstErrno, io.ToFirstError)
			again = "never"
			if io.Recovered {
				again = fmt.Sprintf("+%.1fs", io.ToGoodRead)
			}
		}
		fmt.Fprintf(b, "| %s | %d | %s | %d | %s | %s | %d / %d |\n", io.Kind, io.ReadsBefore, first, io.Errors, again,
			FormatMeasure(time.Duration(io.Stall*float64(time.Millisecond))), io.Restarts, io.StartFailures)
	}
	fmt.Fprintf(b, "\nKubelet said: %s\n", mdCell(p.Kubelet.summary()))
}

// Outcomes are the profile's I/O kinds as the I/O outcomes of an ordinary record (the matrix's cells): the
// direct read, which the matrix has no column for, left out.
func (p *Profile) Outcomes() []IOOutcome {
	var out []IOOutcome
	for _, io := range p.IO {
		if !slices.Contains(IOKinds, io.Kind) {
			continue
		}
		o := IOOutcome{Kind: io.Kind, Stall: io.Stall}
		if io.Failed {
			o.FirstError, o.KillToFirstError = cmp.Or(io.FirstErrno, "failed"), io.ToFirstError
			if io.Recovered {
				o.KillToGood = io.ToGoodRead
			}
		}
		out = append(out, o)
	}
	return out
}
