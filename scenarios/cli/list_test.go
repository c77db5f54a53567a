package cli

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/catalog"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// TestListFits: --list fits a 100-column terminal, a row per line (name, mode, what it kills, a summary), and
// a note many rows share is printed once, as a footnote the rows refer to.
func TestListFits(t *testing.T) {
	_, out, _ := runOn(t, okMachine(), "--list")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	for _, l := range lines {
		if n := utf8.RuneCountInString(l); n > listWidth {
			t.Errorf("line of %d columns: %q", n, l)
		}
	}
	// The rows: one line each, in catalog order, the driver-agnostic rows last.
	var want []*scenarios.Scenario
	for _, s := range catalog.All() {
		want = append(want, &s)
	}
	for _, s := range catalog.Drivers() {
		want = append(want, &s)
	}
	if len(lines) < len(want)+1 {
		t.Fatalf("%d lines for %d rows:\n%s", len(lines), len(want), out)
	}
	ref := regexp.MustCompile(` \[([0-9,]+)\]$`)
	notes := map[string]bool{}
	for i, s := range want {
		l := lines[i+1]
		f := strings.Fields(l)
		if len(f) < 4 || f[0] != s.Name {
			t.Errorf("row %d is %q, want %s with its mode, kills and summary", i, l, s.Name)
			continue
		}
		mode := s.Plugin.Topology().String()
		if s.Measured {
			mode = "any" // "any driver"
		}
		if f[1] != mode {
			t.Errorf("%s: mode %q, want %q", s.Name, f[1], mode)
		}
		if m := ref.FindStringSubmatch(l); m != nil {
			for _, n := range strings.Split(m[1], ",") {
				notes[n] = true
			}
		} else if s.OnEveryRelease() || s.Measured {
			t.Errorf("%s: no footnote reference in %q", s.Name, l)
		}
	}
	// Each note referred to is printed once, as a footnote.
	for n := range notes {
		if c := strings.Count(out, "\n["+n+"] "); c != 1 {
			t.Errorf("footnote [%s] printed %d times", n, c)
		}
	}
	for _, note := range []string{"outcome depends on the kubelet version: kubelet < v1.37, kubelet ≥ v1.37", "needs --driver=<your CSI driver's name>"} {
		if c := strings.Count(out, note); c != 1 {
			t.Errorf("%q printed %d times, want once", note, c)
		}
	}
	every := map[string]bool{}
	for _, s := range catalog.All() {
		if s.EveryRelease != "" {
			every[s.EveryRelease] = true
		}
	}
	if c := strings.Count(out, "run on every kubelet release: "); c != len(every) {
		t.Errorf("the every-release notes printed %d times, want once each of %d", c, len(every))
	}
}

// TestDescribe: what a row's line says of it.
func TestDescribe(t *testing.T) {
	s := scenarios.Scenario{Name: "k", Title: "Keeper mode: the plugin and the keeper die together",
		Plugin: scenarios.Plugin{Mode: topology.Keeper},
		Steps:  []scenarios.Step{scenarios.KillPlugin(), scenarios.Kill(topology.KeeperContainer), scenarios.StartPlugin(), scenarios.Upgrade(topology.KeeperContainer), scenarios.KillPlugin()}}
	r := describe(&s, false)
	if got := fmt.Sprintf("%s|%s|%s", r.mode, r.kills, r.title); got != "keeper|plugin+keeper+new keeper|the plugin and the keeper die together" {
		t.Errorf("describe = %s", got)
	}
	if r := describe(&scenarios.Scenario{Name: "c", Title: "Plugin restart"}, false); r.mode != "child" || r.kills != "(none)" || len(r.notes) != 0 {
		t.Errorf("a child row that kills nothing: %+v", r)
	}
	if got := shorten("abcdef", 4); got != "abc…" {
		t.Errorf("shorten = %q", got)
	}
}
