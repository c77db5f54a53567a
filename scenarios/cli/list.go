package cli

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/catalog"
)

// listWidth is the terminal width --list fits: its lines ran to 330 columns, a note of 200 characters repeated
// on ten of them, and wrapped into an unreadable block in a terminal.
const listWidth = 100

// maxKillsWidth caps the KILLS column: one row kills three components, and its list would halve every summary.
const maxKillsWidth = 20

// driverNote is the footnote of the driver-agnostic rows.
const driverNote = "needs --driver=<your CSI driver's name> and --backend=kube: runs against a CSI driver you " +
	"installed, measured, nothing expected (its flags: dfc-scenario --help)"

// listLegend says what the columns mean, once, after the footnotes.
const listLegend = "MODE: where the FUSE servers run (the plugin's --fuse-mode). KILLS: what the scenario kills; " +
	"new X: X replaced, as an upgrade or a rollout does. Full titles and expected outcomes: scenarios/README.md."

// listFilter is the selection --list prints the names of, one per line; nil: every scenario, described.
func (cfg config) listFilter() func(*scenarios.Scenario) bool {
	if !cfg.versionDependent && !cfg.everyRelease && !cfg.everyServer && !cfg.writes {
		return nil
	}
	return func(s *scenarios.Scenario) bool {
		return (cfg.versionDependent && s.VersionDependent()) || (cfg.everyRelease && s.OnEveryRelease()) ||
			(cfg.everyServer && s.OnEveryServer()) || (cfg.writes && len(s.Writers()) > 0 && s.RunsOn(cfg.backend) == nil)
	}
}

// list prints the catalog, a row per line that fits listWidth (name, FUSE mode, what it kills, its title
// shortened), the notes many rows share as numbered footnotes; with only, the names it selects, one per line
// and nothing else (CI reads them).
func list(w io.Writer, only func(*scenarios.Scenario) bool) error {
	if only != nil {
		for _, s := range catalog.All() {
			if only(&s) {
				if _, err := fmt.Fprintln(w, s.Name); err != nil {
					return err
				}
			}
		}
		return nil
	}
	var rows []listRow
	for _, s := range catalog.All() {
		rows = append(rows, describe(&s, false))
	}
	for _, s := range catalog.Drivers() {
		rows = append(rows, describe(&s, true))
	}
	var b strings.Builder
	writeList(&b, rows)
	_, err := io.WriteString(w, b.String())
	return err
}

// listRow is a row of --list.
type listRow struct {
	name, mode, kills, title string
	// notes are the row's footnotes' texts.
	notes []string
}

// describe is the --list row of s (driver: a driver-agnostic row).
func describe(s *scenarios.Scenario, driver bool) listRow {
	r := listRow{name: s.Name, mode: s.Plugin.Topology().String(), title: s.Title}
	if driver {
		r.mode = "any driver"
		r.notes = append(r.notes, driverNote)
	}
	// The MODE column says the mode: "Keeper mode: " before the title only takes the summary's room.
	if p := len(r.mode) + len(" mode: "); len(r.title) > p && strings.EqualFold(r.title[:p], r.mode+" mode: ") {
		r.title = r.title[p:]
	}
	var kills []string
	for _, st := range s.Steps {
		k := string(st.Component)
		switch st.Action {
		case scenarios.ActKill:
		case scenarios.ActUpgrade:
			k = "new " + k
		default:
			continue
		}
		if !slices.Contains(kills, k) {
			kills = append(kills, k)
		}
	}
	r.kills = strings.Join(kills, "+")
	if r.kills == "" {
		r.kills = "(none)"
	}
	if s.VersionDependent() {
		r.notes = append(r.notes, "outcome depends on the kubelet version: "+strings.Join(kubeletRanges(s), ", "))
	}
	if s.EveryRelease != "" {
		r.notes = append(r.notes, "run on every kubelet release: "+s.EveryRelease)
	}
	if s.ServersWhy != "" {
		note := "runs with " + strings.Join(s.Servers, ", ") + " only (--fuse-server)"
		if len(s.Writers()) > 0 {
			note = "runs with " + strings.Join(s.Servers, ", ") + " or a server spec with objectURL (--fuse-server)"
		}
		if len(s.Backends) > 0 {
			note += ", on the " + strings.Join(s.Backends, ", ") + " backend"
		}
		r.notes = append(r.notes, note)
	}
	for _, n := range s.Needs() {
		r.notes = append(r.notes, "needs "+n.String()+": NOT RUNNABLE on an older kubelet, as expected there")
	}
	return r
}

// writeList writes rows as columns within listWidth, then their notes, each once, numbered in order of first
// use, then the legend.
func writeList(b *strings.Builder, rows []listRow) {
	nameW, modeW, killsW := len("NAME"), len("MODE"), len("KILLS")
	for _, r := range rows {
		nameW = max(nameW, utf8.RuneCountInString(r.name))
		modeW = max(modeW, utf8.RuneCountInString(r.mode))
		killsW = max(killsW, min(maxKillsWidth, utf8.RuneCountInString(r.kills)))
	}
	summaryW := listWidth - nameW - modeW - killsW - 3*len("  ")
	line := func(name, mode, kills, summary string) {
		l := fmt.Sprintf("%-*s  %-*s  %-*s  %s", nameW, name, modeW, mode, killsW, shorten(kills, killsW), summary)
		b.WriteString(strings.TrimRight(l, " ") + "\n")
	}
	line("NAME", "MODE", "KILLS", "SUMMARY [NOTE]")
	var notes []string
	for _, r := range rows {
		var refs []string
		for _, n := range r.notes {
			i := slices.Index(notes, n)
			if i < 0 {
				notes, i = append(notes, n), len(notes)
			}
			refs = append(refs, fmt.Sprint(i+1))
		}
		summary := shorten(r.title, summaryW)
		if len(refs) > 0 {
			ref := " [" + strings.Join(refs, ",") + "]"
			summary = shorten(r.title, summaryW-utf8.RuneCountInString(ref)) + ref
		}
		line(r.name, r.mode, r.kills, summary)
	}
	b.WriteString("\n")
	for i, n := range notes {
		wrap(b, fmt.Sprintf("[%d] ", i+1), n)
	}
	wrap(b, "", listLegend)
}

// shorten cuts s to at most w runes, ending in "…" when cut.
func shorten(s string, w int) string {
	if utf8.RuneCountInString(s) <= w {
		return s
	}
	if w <= 1 {
		return "…"
	}
	return strings.TrimRight(string([]rune(s)[:w-1]), " ,;:") + "…"
}

// wrap writes prefix and text, wrapped at spaces within listWidth, the next lines indented as far as prefix.
func wrap(b *strings.Builder, prefix, text string) {
	indent := strings.Repeat(" ", utf8.RuneCountInString(prefix))
	l := prefix
	for _, word := range strings.Fields(text) {
		switch {
		case l == prefix || l == indent:
			l += word
		case utf8.RuneCountInString(l)+1+utf8.RuneCountInString(word) > listWidth:
			b.WriteString(l + "\n")
			l = indent + word
		default:
			l += " " + word
		}
	}
	b.WriteString(l + "\n")
}

// kubeletRanges lists the distinct kubelet ranges of a scenario's expectations.
func kubeletRanges(s *scenarios.Scenario) []string {
	var out []string
	for _, e := range s.Expect {
		if r := e.Kubelet.String(); !e.Kubelet.All() && !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out
}
