package catalog

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
)

func TestCatalog(t *testing.T) {
	want := []string{"restart", "restart-no-restore", "restore-without-exit", "exit-without-restore", "host-to-container", "subpath",
		"sidecar-plugin-restart", "sidecar-late", "sidecar-killed", "sidecar-new-pod"}
	have := map[string]bool{}
	for _, s := range All() {
		if err := s.Validate(); err != nil {
			t.Errorf("%s: %v", s.Name, err)
		}
		if have[s.Name] {
			t.Errorf("duplicate scenario %s", s.Name)
		}
		have[s.Name] = true
	}
	for _, n := range want {
		if !have[n] {
			t.Errorf("catalog lacks %s", n)
		}
	}
	if Names()[0] != "restart" {
		t.Errorf("the main scenario comes first: %v", Names())
	}
	if _, err := Lookup("nope"); err == nil {
		t.Error("Lookup of an unknown scenario must fail")
	}
}

// TestReadmeCatalog keeps the README's catalog table in step with the catalog.
func TestReadmeCatalog(t *testing.T) {
	rows := map[string]bool{}
	for _, cells := range readmeTable(t, "## The catalog") {
		rows[cells[0]] = true
	}
	for _, n := range Names() {
		if !rows[n] {
			t.Errorf("README.md's catalog table lacks %s", n)
		}
		delete(rows, n)
	}
	for n := range rows {
		t.Errorf("README.md's catalog table names %s, which is not in the catalog", n)
	}
}

// readmeTable returns the rows of README.md's tables under the heading section whose first cell names a
// scenario (`name`), as trimmed cells with the backquotes of the first one removed.
func readmeTable(t *testing.T, section string) [][]string {
	t.Helper()
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var rows [][]string
	in := false
	for _, line := range strings.Split(string(readme), "\n") {
		if strings.HasPrefix(line, "## ") {
			in = line == section
		}
		if !in || !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		cells[0] = strings.Trim(cells[0], "`")
		rows = append(rows, cells)
	}
	if len(rows) == 0 {
		t.Fatalf("README.md has no scenario table under %q", section)
	}
	return rows
}

// TestCatalogVersions: the subPath scenarios (restart-all-subpath too) expect different outcomes before and since kubelet's subPath fix,
// health-report and health-server-kill before and since its volume health manager, every other scenario the same on every kubelet,
// and every scenario has expectations on both sides.
func TestCatalogVersions(t *testing.T) {
	dependent := []string{"subpath", "remediate-subpath", "restart-all-subpath", "health-report", "health-server-kill"}
	for _, sc := range All() {
		if got, want := sc.VersionDependent(), slices.Contains(dependent, sc.Name); got != want {
			t.Errorf("%s: VersionDependent = %t, want %t", sc.Name, got, want)
		}
		for _, v := range []string{"v1.36.3", "v1.37.2"} {
			if len(sc.ExpectFor(scenarios.MustKubeletVersion(v))) == 0 {
				t.Errorf("%s expects nothing on kubelet %s", sc.Name, v)
			}
		}
	}
	sp, err := Lookup("subpath")
	if err != nil {
		t.Fatal(err)
	}
	recovers := func(v string) bool {
		for _, e := range sp.ExpectFor(scenarios.MustKubeletVersion(v)) {
			if _, ok := e.Check.(scenarios.Recovers); ok {
				return true
			}
		}
		return false
	}
	if recovers("v1.36.3") || !recovers("v1.37.2") {
		t.Errorf("subpath recovers on v1.36.3: %t, on v1.37.2: %t; want false, true", recovers("v1.36.3"), recovers("v1.37.2"))
	}
}

// TestReadmeVersions keeps scenarios/README.md's per-version table in step with the catalog: a row per
// scenario and kubelet minor on either side of the subPath fix, and any other row (the generated table has a row
// per recorded release) of a scenario of the catalog.
func TestReadmeVersions(t *testing.T) {
	rows := map[string]bool{}
	for _, cells := range readmeTable(t, "## Outcomes per kubelet version") {
		v, err := scenarios.ParseKubeletVersion(cells[1])
		if err != nil {
			t.Fatalf("README.md's table of outcomes per kubelet version: row %q: %v", cells, err)
		}
		// A row of a real FUSE server ("`restart` with gcsfuse") must be of a scenario that runs with it; it is
		// the scenario's own row when the scenario does not run with dummy-fuse (the rows that write), which also
		// has the rows of a server described in a spec file that a record names (s3fs).
		if name, server, ok := strings.Cut(cells[0], "` with "); ok {
			sc, err := Lookup(name)
			if err != nil || (!slices.Contains(sc.Servers, server) && sc.RunsWithDummyFuse()) {
				t.Errorf("README.md's table of outcomes per kubelet version has a row of %s with %s, which does not run with that server", name, server)
			} else if !sc.RunsWithDummyFuse() {
				rows[name+" "+v.MinorString()] = true
			}
			continue
		}
		rows[cells[0]+" "+v.MinorString()] = true
	}
	for _, n := range Names() {
		for _, v := range []string{"v1.36", scenarios.SubPathFixedIn} {
			if !rows[n+" "+v] {
				t.Errorf("README.md's table of outcomes per kubelet version lacks %s on %s", n, v)
			}
			delete(rows, n+" "+v)
		}
	}
	// Rows of other recorded releases (make kube-release) are fine, as long as their scenario is in the catalog.
	for r := range rows {
		if name, _, _ := strings.Cut(r, " "); !slices.Contains(Names(), name) {
			t.Errorf("README.md's table of outcomes per kubelet version has a row %q that is not in the catalog", r)
		}
	}
}

func TestSelect(t *testing.T) {
	for _, tc := range []struct {
		names []string
		want  string // scenario names, or the error
	}{
		{nil, strings.Join(Names(), ",")},
		{[]string{"all"}, strings.Join(Names(), ",")},
		{[]string{"subpath", "restart"}, "subpath,restart"},
		{[]string{"restart", "nope"}, `no scenario "nope"`},
	} {
		got, err := Select(tc.names)
		var s string
		if err != nil {
			s = err.Error()
		} else {
			var ns []string
			for _, sc := range got {
				ns = append(ns, sc.Name)
			}
			s = strings.Join(ns, ",")
		}
		if !strings.Contains(s, tc.want) {
			t.Errorf("Select(%q) = %s, want %s", tc.names, s, tc.want)
		}
	}
}

// TestLabels: every step of the catalog has a short label for the timeline, and a wait is labelled by its check.
func TestLabels(t *testing.T) {
	for _, sc := range All() {
		for i, st := range sc.Steps {
			l := st.Label()
			if l == "" || len(l) > 40 {
				t.Errorf("%s step %d: label %q (want a few words)", sc.Name, i+1, l)
			}
			if st.Action == scenarios.ActWaitFor && l != st.Until.Label() {
				t.Errorf("%s step %d: label %q, want its check's %q", sc.Name, i+1, l, st.Until.Label())
			}
		}
	}
}

// TestReadmeCILists keeps scenarios/README.md's lists of the scenarios CI runs on every kubelet release and
// with every real server (the lines that start "Run on every release" and "Run with every real server") equal
// to the catalog's.
func TestReadmeCILists(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for prefix, in := range map[string]func(*scenarios.Scenario) bool{
		"Run on every release (`dfc-scenario --list --every-release`): ":                          (*scenarios.Scenario).OnEveryRelease,
		"Run with every real server on the real kubelet (`dfc-scenario --list --every-server`): ": (*scenarios.Scenario).OnEveryServer,
	} {
		line, found := "", false
		for _, l := range strings.Split(string(readme), "\n") {
			if strings.HasPrefix(l, prefix) {
				line, found = strings.TrimSuffix(strings.TrimPrefix(l, prefix), "."), true
			}
		}
		if !found {
			t.Errorf("README.md has no line starting %q", prefix)
			continue
		}
		var want []string
		for _, s := range All() {
			if in(&s) {
				want = append(want, "`"+s.Name+"`")
			}
		}
		if len(want) == 0 {
			t.Errorf("%s: the catalog names none", prefix)
		}
		if got := strings.Split(line, ", "); !slices.Equal(got, want) {
			t.Errorf("README.md: %s%s\nthe catalog: %s", prefix, line, strings.Join(want, ", "))
		}
	}
}

// TestRestartAllWithSidecar: a RestartAllContainers rule in a pod with a FUSE sidecar restarts the native
// sidecar too (kubelet resets the init containers with the others; the local model does the same, as measured
// on the real kubelets by restart-all-sidecar), and how kubelet starts a sidecar changes between releases
// (sidecarReleases): such a row runs on every release.
func TestRestartAllWithSidecar(t *testing.T) {
	n := 0
	for _, sc := range All() {
		if sc.Pod.Sidecar == nil || !slices.ContainsFunc(sc.Pod.Containers, func(c scenarios.Container) bool { return c.RestartAllContainers }) {
			continue
		}
		n++
		if sc.EveryRelease == "" {
			t.Errorf("%s: a RestartAllContainers rule with a FUSE sidecar, not run on every release", sc.Name)
		}
	}
	if n == 0 {
		t.Error("no row combines a RestartAllContainers rule with a FUSE sidecar: restart-all-sidecar is gone?")
	}
}
