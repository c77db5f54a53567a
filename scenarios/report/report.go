package report

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
)

// FormatMeasure formats a measured interval; zero means it did not happen.
func FormatMeasure(d time.Duration) string {
	if d == 0 {
		return "never"
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

// seconds formats a measured interval in seconds; zero means it did not happen.
func seconds(s float64) string {
	if s == 0 {
		return "never"
	}
	return fmt.Sprintf("%.2fs", s)
}

// kill formats a measure from the kill: "–" for a scenario whose steps kill nothing.
func (m Measured) kill(s float64) string {
	if !m.Kills {
		return "–"
	}
	return seconds(s)
}

// recovery formats a time to recover from the kill: "no failure" when there was nothing to recover from
// (failed false), where a bare "never" would read as a failure to recover.
func (m Measured) recovery(s float64, failed bool) string {
	if s == 0 && !failed && m.Kills {
		return "no failure"
	}
	return m.kill(s)
}

// stallWords name the stall wherever the report or the picture states it (Measured.stall gives its figure):
// one fact, in the same words, with the same figure.
const stallWords = "longest open/read/write after the kill (stall)"

// stall formats the longest open or read after the kill, in milliseconds: a stall is short.
func (m Measured) stall() string {
	if !m.Kills {
		return "–"
	}
	return fmt.Sprintf("%.1fms", m.Stall)
}

// sidecar formats a measure from the sidecar's start: "–" for a pod without a FUSE sidecar.
func (m Measured) sidecar(s float64) string {
	if !m.Sidecar {
		return "–"
	}
	return seconds(s)
}

// wall formats the run's wall time as the summary does.
func (m Measured) wall() string {
	return time.Duration(m.Wall * float64(time.Second)).Round(10 * time.Millisecond).String()
}

// measuredLine says what was measured (m, the record's), in one line.
func measuredLine(o *scenarios.Outcome, m Measured) string {
	var parts []string
	if o.NotRunnable() != nil {
		return "nothing: the run did not start (NOT RUNNABLE) · wall " + m.wall()
	}
	if m.Kills {
		parts = append(parts, "kill → first ENOTCONN "+m.kill(m.KillToError), "kill → volume dir restored "+m.recovery(m.KillToRestore, m.VolumeDied),
			"kill → first good read again "+m.recovery(m.KillToRecovery, m.Failed), stallWords+" "+m.stall())
	} else {
		parts = append(parts, "no step kills anything")
	}
	if sc := o.Scenario.Pod.Sidecar; sc != nil {
		parts = append(parts, fmt.Sprintf("sidecar (delay %s) start → served %s → first good read %s", sc.Delay,
			m.sidecar(m.SidecarToServe), m.sidecar(m.SidecarToRead)))
	}
	return strings.Join(append(parts, "wall "+m.wall()), " · ")
}

// PrintVerdicts prints one PASS/FAIL line per expected outcome, the measures as the run's record states them,
// and why a run failed.
func PrintVerdicts(w io.Writer, o *scenarios.Outcome) {
	root := ""
	for _, v := range o.Verdicts {
		if o.Evidence != nil && strings.Contains(shortenFor(o, v.Result.Why), "$ROOT") {
			root = fmt.Sprintf("; $ROOT is %s", o.Evidence.Paths[scenarios.PathRoot])
		}
	}
	fmt.Fprintf(w, "verdicts (kubelet %s%s):\n", o.Kubelet, root)
	for _, v := range o.Verdicts {
		mark := "PASS"
		if !v.Result.OK {
			mark = "FAIL"
		}
		src := ""
		if v.Expectation.Source != "" {
			src = " [" + v.Expectation.Source + "]"
		}
		fmt.Fprintf(w, "  %s  %s%s\n        %s\n", mark, v.Expectation.Describe(), src, shortenFor(o, v.Result.Why))
	}
	if nr := o.NotRunnable(); nr != nil {
		fmt.Fprintf(w, "  NOT RUNNABLE  %s\n        to make it runnable: %s\n", nr.Why, nr.Fix)
	} else if o.Err != nil {
		fmt.Fprintf(w, "  FAIL  the run: %v\n", o.Err)
	}
	if o.CleanupErr != nil {
		fmt.Fprintf(w, "  FAIL  cleanup: %v\n", o.CleanupErr)
	}
	rec := RecordOf(o)
	fmt.Fprintf(w, "measured: %s\n", measuredLine(o, rec.Measured))
	PrintProfile(w, rec.Profile, rec.Measured.IO)
}

// PrintSummary prints one line per outcome: its result, the measured intervals and its report.
func PrintSummary(w io.Writer, outcomes []*scenarios.Outcome) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  scenario\tkubelet\tresult\tkill→ENOTCONN\tkill→volume restored\tkill→good read\tstall\tsidecar→good read\twall\treport")
	for _, o := range outcomes {
		m := measuredOf(o)
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", o.Scenario.Name, o.Kubelet, o.Result(),
			m.kill(m.KillToError), m.recovery(m.KillToRestore, m.VolumeDied), m.recovery(m.KillToRecovery, m.Failed), m.stall(),
			m.sidecar(m.SidecarToRead), m.wall(), filepath.Join(o.Dir, "report.md"))
	}
	tw.Flush()
}

func shortenFor(o *scenarios.Outcome, s string) string {
	if o.Evidence == nil {
		return s
	}
	return scenarios.Shorten(o.Evidence, s)
}

// WriteReport writes the run's report into o.Dir: report.md with the timeline picture timeline.svg, the full
// evidence as events.log (one line per event) and events.json, and the verdict and measures as result.json
// (Record). The record is computed once and report.md and the picture state its figures.
func WriteReport(o *scenarios.Outcome) error {
	if o.Dir == "" || o.Evidence == nil {
		return fmt.Errorf("nothing to report")
	}
	ev := o.Evidence
	var log strings.Builder
	if root := ev.Paths[scenarios.PathRoot]; root != "" {
		fmt.Fprintf(&log, "# $ROOT is %s, the run's kubelet root dir\n", root)
	}
	kill, killed := ev.KillTime()
	for _, e := range ev.Events {
		rel := ""
		if killed && !e.Time.Before(kill) {
			rel = fmt.Sprintf("kill+%.3fs", e.Time.Sub(kill).Seconds())
		}
		fmt.Fprintf(&log, "t+%8.3fs %-13s %-8s %-17s %-10s %s\n", e.Time.Sub(ev.Start).Seconds(), rel, e.Source, e.Kind, scenarios.Actor(e), scenarios.Shorten(ev, scenarios.EventText(e)))
	}
	if err := os.WriteFile(filepath.Join(o.Dir, "events.log"), []byte(log.String()), 0o644); err != nil {
		return err
	}
	js, err := json.MarshalIndent(ev, "", " ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(o.Dir, "events.json"), js, 0o644); err != nil {
		return err
	}
	rec := RecordOf(o)
	b, err := json.MarshalIndent(rec, "", " ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(o.Dir, ResultFile), append(b, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(o.Dir, "timeline.svg"), TimelineSVG(o, rec), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(o.Dir, "report.md"), []byte(Markdown(o, rec)), 0o644)
}

// Markdown renders the run's report with the figures of its record, rec (RecordOf).
func Markdown(o *scenarios.Outcome, rec Record) string {
	var b strings.Builder
	sc := &o.Scenario
	fmt.Fprintf(&b, "# Scenario `%s` on kubelet %s: %s\n\n", sc.Name, o.Kubelet, o.Result())
	fmt.Fprintf(&b, "**%s.** %s\n\n", sc.Title, sc.Shows)
	t := o.Timing
	fmt.Fprintf(&b, "Kubelet %s", o.Kubelet)
	if o.Backend == "local" {
		b.WriteString(" (as the local backend models it)")
	}
	fmt.Fprintf(&b, ", backend `%s`, run %s, read interval %s, restart back-off %s doubling to %s",
		o.Backend, o.Start.UTC().Format(time.RFC3339), t.ReadInterval, t.BackoffBase, t.BackoffMax)
	if o.Backend == "local" {
		b.WriteString(" (shortened for a fast run; kubelet uses 10s doubling to 5m)")
	}
	b.WriteString(".")
	if sc.VersionDependent() {
		fmt.Fprintf(&b, " The expected outcomes of this scenario depend on the kubelet version; %d of its %d apply to %s.",
			len(sc.ExpectFor(o.Kubelet)), len(sc.Expect), o.Kubelet)
	}
	b.WriteString("\n\n")
	if sc.Note != "" {
		fmt.Fprintf(&b, "> **Note.** %s\n\n", sc.Note)
	}
	b.WriteString("![timeline of the workload's reads](timeline.svg)\n\n")

	b.WriteString("## Verdicts\n\n")
	if root := o.Evidence.Paths[scenarios.PathRoot]; root != "" {
		fmt.Fprintf(&b, "`$ROOT` is the run's kubelet root dir, `%s`.\n\n", root)
	}
	b.WriteString("| | expected outcome | evidence |\n|---|---|---|\n")
	for _, v := range o.Verdicts {
		exp := v.Expectation.Describe()
		if v.Expectation.Source != "" {
			exp += " *(" + v.Expectation.Source + ")*"
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", passFail(v.Result.OK), mdCell(exp), mdCell(shortenFor(o, v.Result.Why)))
	}
	if nr := o.NotRunnable(); nr != nil {
		fmt.Fprintf(&b, "| NOT RUNNABLE | the cluster can run it | %s; to make it runnable: %s |\n", mdCell(nr.Why), mdCell(nr.Fix))
	} else if o.Err != nil {
		fmt.Fprintf(&b, "| FAIL | the run is carried out | %s |\n", mdCell(o.Err.Error()))
	}
	if o.CleanupErr != nil {
		fmt.Fprintf(&b, "| FAIL | everything is stopped and unmounted | %s |\n", mdCell(o.CleanupErr.Error()))
	}

	m := rec.Measured
	profileMarkdown(&b, rec.Profile, m.IO)
	b.WriteString("\n## Measured\n\n| kill → first ENOTCONN | kill → volume dir restored | kill → first good read again | " + stallWords + " | sidecar start → served | sidecar start → first good read | wall time of the run |\n|---|---|---|---|---|---|---|\n")
	fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n\n", m.kill(m.KillToError), m.recovery(m.KillToRestore, m.VolumeDied),
		m.recovery(m.KillToRecovery, m.Failed), m.stall(), m.sidecar(m.SidecarToServe), m.sidecar(m.SidecarToRead), m.wall())
	if len(sc.Pod.Containers) > 0 {
		fmt.Fprintf(&b, "Times are for container `%s`; \"never\" means it did not happen during the run.\n", sc.Pod.Containers[0].Name)
	}

	b.WriteString("\n## Setup\n\n")
	pargs := strings.Join(sc.Plugin.Args(), " ")
	if pargs == "" {
		pargs = "(no restore flags)"
	}
	fmt.Fprintf(&b, "- plugin: `csi-plugin %s`\n", pargs)
	fmt.Fprintf(&b, "- pod: restartPolicy `%s`, one CSI volume (static PV), %d container(s):\n\n", sc.Pod.RestartPolicy, len(sc.Pod.Containers))
	b.WriteString("| container | workload flags | mountPath | subPath | propagation |\n|---|---|---|---|---|\n")
	for _, c := range sc.Pod.Containers {
		sub := c.SubPath
		if sub == "" {
			sub = "—"
		}
		fmt.Fprintf(&b, "| %s | `%s` | %s | %s | %s |\n", c.Name, strings.Join(c.WorkloadArgs(t.ReadInterval), " "), c.Mount(), sub, c.Prop())
	}

	b.WriteString("\n## Steps\n\n")
	for i, st := range sc.Steps {
		line := st.Describe(t)
		if i < len(o.Steps) {
			r := o.Steps[i]
			line += fmt.Sprintf(" — %s → %s", o.Evidence.Since(r.Start), o.Evidence.Since(r.End))
			if r.TimedOut {
				line += " **(timed out)**"
			}
			if r.Err != nil {
				line += " **(failed: " + r.Err.Error() + ")**"
			}
		} else {
			line += " — not run"
		}
		fmt.Fprintf(&b, "%d. %s\n", i+1, mdCell(line))
	}

	b.WriteString("\n## Timeline\n\nNotable events (every event is in `events.log`)")
	b.WriteString(".\n\n```text\n")
	var nb strings.Builder
	scenarios.NewNarrator(&nb, o.Start).Update(o.Evidence)
	b.WriteString(nb.String())
	b.WriteString("```\n\n## Files\n\n")
	b.WriteString("- `plugin.log`: the plugin's klog output for every start of its container, with its `GRPC call` lines\n")
	b.WriteString("- `workload.log`: every line every workload container instance wrote, prefixed with `<container>#<instance>`\n")
	if o.Backend == "local" {
		b.WriteString("- `kubelet.log`: what the local kubelet did: CSI calls, container starts, start failures with their causes, teardown\n")
	}
	b.WriteString("- `events.log`, `events.json`: the whole evidence the verdicts were taken from\n")
	b.WriteString("- `result.json`: the verdict and the measured times, machine-readable (what `make scenarios-doc` tables)\n")
	b.WriteString("- `timeline.svg`: the picture above\n")
	return b.String()
}

func mdCell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.ReplaceAll(s, "\n", " ")
}

func passFail(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}
