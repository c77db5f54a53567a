package report

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
)

// Profile is the outage profile of a driver-agnostic run (scenarios.Scenario.Measured) beyond what every
// record holds: what kubelet said after the fault (the first kill or rollout). What each kind of I/O saw is the
// record's Measured.IO, as for every run.
type Profile struct {
	// IO is where records written before Measured.IO held a driver-agnostic run's outcomes; new ones leave it
	// out.
	IO      []IOOutcome    `json:"io,omitempty"`
	Kubelet KubeletProfile `json:"kubelet"`
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

// PrintProfile prints the outage profile, one line per I/O kind of ios (the record's Measured.IO).
func PrintProfile(w io.Writer, p *Profile, ios []IOOutcome) {
	if p == nil {
		return
	}
	fmt.Fprintln(w, "outage profile (times from the fault):")
	for _, io := range ios {
		fmt.Fprintf(w, "  %-12s %s\n", io.Kind, io.summary())
	}
	fmt.Fprintf(w, "  kubelet      %s\n", p.Kubelet.summary())
}

func (io IOOutcome) summary() string {
	var parts []string
	if io.ReadsBefore == 0 && io.Kind != IOInFlight { // the in-flight read is one read, not reads before the fault
		parts = append(parts, "no good read before the fault (not measured)")
	}
	if io.FirstError != "" {
		parts = append(parts, fmt.Sprintf("first error %s at +%.1fs (%d errors)", io.FirstError, io.FaultToFirstError, io.Errors))
	} else {
		parts = append(parts, "no error")
	}
	switch {
	case io.FaultToGood > 0:
		parts = append(parts, fmt.Sprintf("good read again at +%.1fs", io.FaultToGood))
	case io.FirstError != "":
		parts = append(parts, "never read again")
	}
	if io.Gap > 0 {
		parts = append(parts, gapWords+" "+io.gap())
	}
	if io.Restarts > 0 || io.StartFailures > 0 {
		parts = append(parts, fmt.Sprintf("%d restarts, %d failed starts", io.Restarts, io.StartFailures))
	}
	return strings.Join(parts, "; ")
}

// gapWords name IOOutcome.Gap in the profile, apart from the stall (the longest open or read).
const gapWords = "longest without a good read"

func (io IOOutcome) gap() string {
	return FormatMeasure(time.Duration(io.Gap * float64(time.Millisecond)))
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

// profileMarkdown is the report's section for the profile, with the I/O kinds ios.
func profileMarkdown(b *strings.Builder, p *Profile, ios []IOOutcome) {
	if p == nil {
		return
	}
	b.WriteString("\n## Outage profile (measured, nothing expected)\n\n| I/O kind | good reads before | first error | errors | good read again | " + gapWords + " | restarts / failed starts |\n|---|---|---|---|---|---|---|\n")
	for _, io := range ios {
		first, again := "no error", "—"
		if io.FirstError != "" {
			first = fmt.Sprintf("%s at +%.1fs", io.FirstError, io.FaultToFirstError)
			again = "never"
			if io.FaultToGood > 0 {
				again = fmt.Sprintf("+%.1fs", io.FaultToGood)
			}
		}
		fmt.Fprintf(b, "| %s | %d | %s | %d | %s | %s | %d / %d |\n", io.Kind, io.ReadsBefore, first, io.Errors, again, io.gap(), io.Restarts, io.StartFailures)
	}
	fmt.Fprintf(b, "\nKubelet said: %s\n", mdCell(p.Kubelet.summary()))
}
