package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/catalog"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/report"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

var repo = paths{results: "../../results", doc: "../../../docs/outage-matrix.md", svg: "../../../docs/outage-matrix.svg", outcomes: "../../../docs/outcomes.md"}

// rootReadme holds the "Which fix should I use" table that TestReadmeFixTable checks.
const rootReadme = "../../../README.md"

// TestDocsAreGenerated fails when docs/outage-matrix.md, its heatmap or docs/outcomes.md's table is not what the
// files of scenarios/results give.
func TestDocsAreGenerated(t *testing.T) {
	g, err := generate(repo)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct {
		path string
		want []byte
	}{{repo.doc, g.doc}, {repo.svg, g.svg}, {repo.outcomes, g.outcomes}} {
		got, err := os.ReadFile(f.path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, f.want) {
			t.Errorf("%s is not what scenarios/results gives: run make matrix-doc", strings.TrimPrefix(f.path, "../../../"))
		}
	}
}

// TestReadmeFixTable ties the README's "Which fix should I use" table to the records: every row cites a scenario in
// its "shown by" columns, and every scenario they name is in the catalog, recorded, and its newest record on every
// backend, kubelet and server passed (or was NOT RUNNABLE where the row's needs foretell it: an older release).
func TestReadmeFixTable(t *testing.T) {
	readme, err := os.ReadFile(rootReadme)
	if err != nil {
		t.Fatal(err)
	}
	results, _, err := report.LoadResults(repo.results)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range fixTableProblems(string(readme), results) {
		t.Error("README.md: " + p)
	}
}

// TestFixTableProblems: the check above fails on a scenario that is unknown, unrecorded, or whose newest
// record failed, and passes once a newer record passes.
func TestFixTableProblems(t *testing.T) {
	doc := "intro\n\n" + fixTableHead + " what keeps it reading | shown by | what does not help |\n|---|---|---|---|\n" +
		"| a | b | `restart`, `no-such-row` | `subpath` |\n| c | d | `subpath` | x |\n\nafter\n"
	rec := func(sc, result string) report.Record {
		return report.Record{Scenario: sc, Backend: scenarios.BackendLocal, Kubelet: "v1.37.2", Result: result}
	}
	old := &report.Results{Runs: []report.Record{rec("restart", "FAIL")}}
	got := strings.Join(fixTableProblems(doc, []*report.Results{old}), "\n")
	for _, want := range []string{`"restart", but its newest record on local v1.37.2  is FAIL`, `"no-such-row", which is not in the catalog`, `"subpath", which no record holds`} {
		if !strings.Contains(got, want) {
			t.Errorf("problems lack %q:\n%s", want, got)
		}
	}
	newer := &report.Results{Runs: []report.Record{rec("restart", "PASS"), rec("subpath", "PASS")}}
	if got := fixTableProblems(strings.Replace(doc, ", `no-such-row`", "", 1), []*report.Results{old, newer}); len(got) != 0 {
		t.Errorf("with passing newer records: %v", got)
	}
	if got := fixTableProblems("no table", nil); len(got) != 1 {
		t.Errorf("without the table: %v, want one problem", got)
	}
}

// fixTableHead begins the README's fix table; the scenarios its "shown by" columns name are checked.
const fixTableHead = "| your workload |"

// fixTableProblems says what in readme's fix table the records do not support.
func fixTableProblems(readme string, results []*report.Results) []string {
	i := strings.Index(readme, fixTableHead)
	if i < 0 {
		return []string{"no \"Which fix should I use\" table"}
	}
	sec := readme[i:]
	if j := strings.Index(sec, "\n\n"); j >= 0 {
		sec = sec[:j]
	}
	newest := map[[4]string]report.Record{}
	for _, rs := range results {
		for _, r := range rs.Runs {
			newest[[4]string{r.Scenario, r.Backend, r.Kubelet, r.Server}] = r
		}
	}
	lines := strings.Split(sec, "\n")
	var shownBy []int
	for i, h := range strings.Split(lines[0], "|") {
		if strings.TrimSpace(h) == "shown by" {
			shownBy = append(shownBy, i)
		}
	}
	if len(shownBy) == 0 {
		return []string{"the fix table has no \"shown by\" column"}
	}
	name := regexp.MustCompile("`([a-z0-9-]+)`")
	var problems []string
	n := 0
	for _, line := range lines[2:] {
		cols := strings.Split(line, "|")
		if len(cols) <= slices.Max(shownBy) {
			problems = append(problems, fmt.Sprintf("a row of the fix table has %d columns: %q", len(cols), line))
			continue
		}
		var shown [][]string
		for _, c := range shownBy {
			shown = append(shown, name.FindAllStringSubmatch(cols[c], -1)...)
		}
		if len(shown) == 0 {
			problems = append(problems, fmt.Sprintf("the row %q cites no scenario in its \"shown by\" cells", strings.TrimSpace(cols[1])))
		}
		for _, m := range shown {
			n++
			if _, i := findScenario(catalog.All(), m[1]); i < 0 {
				problems = append(problems, fmt.Sprintf("the fix table shows %q, which is not in the catalog", m[1]))
				continue
			}
			found := false
			for k, r := range newest {
				if k[0] != m[1] {
					continue
				}
				found = true
				if r.Result != "PASS" && !foretold(m[1], r) {
					problems = append(problems, fmt.Sprintf("the fix table shows %q, but its newest record on %s %s %s is %s: %v", m[1], k[1], k[2], k[3], r.Result, r.Failed))
				}
			}
			if !found {
				problems = append(problems, fmt.Sprintf("the fix table shows %q, which no record holds", m[1]))
			}
		}
	}
	if n == 0 {
		problems = append(problems, "the fix table names no scenario")
	}
	return problems
}

// foretold reports whether record r of scenario name is a NOT RUNNABLE that the row's needs foretell: its
// kubelet is older than the first release with what the row needs (a restart-all row on v1.35).
func foretold(name string, r report.Record) bool {
	sc, i := findScenario(catalog.All(), name)
	v, err := scenarios.ParseKubeletVersion(r.Kubelet)
	if r.Result != notRunnableText || i < 0 || err != nil {
		return false
	}
	return sc.Predates(v)
}

// TestBuild: a record of a row the catalog does not know (a foreign driver's) is placed by its own fields and
// shown with its driver; an older record's outcome is derived from its first container; a run that kills
// nothing has no row; unknown fields are ignored.
func TestBuild(t *testing.T) {
	var foreign report.Results
	if err := json.Unmarshal([]byte(`{"backend":"kube","kubelet":"v1.37.2","command":"dfc-scenario --driver","runs":[
		{"scenario":"driver-pod-delete","backend":"kube","kubelet":"v1.37.2","driver":"gcsfuse.csi.storage.gke.io",
		 "killed":"node plugin pod deleted","placement":"sidecar","result":"PASS","start":"2026-11-26T19:00:00Z",
		 "some_new_field":{"x":1},
		 "measured":{"kills":true,"io":[{"kind":"new-open","first_error":"EIO","kill_to_first_error_s":0.5,"stall_ms":3},
		   {"kind":"a-new-kind","first_error":"ENOTCONN"}]}}]}`), &foreign); err != nil {
		t.Fatal(err)
	}
	old := &report.Results{Backend: scenarios.BackendLocal, Kubelet: "v1.36.3", Command: "make matrix (x)", Commit: "abc", Runs: []report.Record{
		{Scenario: "restart", Backend: scenarios.BackendLocal, Kubelet: "v1.36.3", Start: "2026-11-26T18:00:00Z",
			Measured: report.Measured{Kills: true, Failed: true, KillToError: 0.5, KillToRecovery: 1.5, VolumeDied: true, KillToRestore: 1, Wall: 60}},
		{Scenario: "sidecar-late", Backend: scenarios.BackendLocal, Kubelet: "v1.36.3", Start: "2026-11-26T18:01:00Z", Measured: report.Measured{Wall: 30}},
	}}
	m := build(catalog.All(), []*report.Results{old, &foreign}, []string{"a.json", "b.json"})
	if len(m.rows) != 2 || len(m.columns) != 2 {
		t.Fatalf("rows %+v, columns %+v: want 2 and 2", m.rows, m.columns)
	}
	if m.columns[0] != (column{"v1.37.2", "kube"}) {
		t.Errorf("first column %+v, want the newest kubelet", m.columns[0])
	}
	var fr, rr row
	for _, r := range m.rows {
		if r.Scenario == "restart" {
			rr = r
		} else {
			fr = r
		}
	}
	if fr.Driver != "gcsfuse.csi.storage.gke.io" || fr.Killed != "node plugin pod deleted" || fr.Placement != "sidecar" {
		t.Errorf("foreign row %+v", fr)
	}
	if o, ok := m.cells[fr][m.columns[0]].outcome(report.IONewOpen); !ok || text(o) != "EIO +0.50s · never ok" {
		t.Errorf("foreign new-open outcome %q, %v", text(o), ok)
	}
	if rr.Killed != "plugin killed" || rr.Placement != topology.Child.String() {
		t.Errorf("restart row %+v: want it placed from the catalog", rr)
	}
	c := m.cells[rr][column{"v1.36.3", scenarios.BackendLocal}]
	if o, ok := c.outcome(report.IOKeptFD); !c.legacy || !ok || text(o) != "ENOTCONN +0.50s · ok +1.50s" {
		t.Errorf("restart's kept fd from the older record: %q, legacy %v", text(o), c.legacy)
	}
	if got := c.mdCell(report.IONewOpen); got != "" {
		t.Errorf("an older record's kind it does not hold: %q, want a blank (unknown, not absent)", got)
	}
	if got := m.cells[fr][m.columns[0]].mdCell(report.IOSubPath); got != "–" {
		t.Errorf("a new record's kind it does not have: %q, want –", got)
	}
	if strings.Join(m.quiet, ",") != "sidecar-late" {
		t.Errorf("quiet %v, want sidecar-late", m.quiet)
	}
	if len(m.passes) != 1 || m.passes[0].runs != 2 || m.passes[0].end.Sub(m.passes[0].start).Seconds() != 90 {
		t.Errorf("passes %+v: want one of 2 runs over 90 s", m.passes)
	}
	doc := m.markdown()
	for _, want := range []string{"| driver |", "gcsfuse.csi.storage.gke.io", "EIO +0.50s · never ok", "ENOTCONN +0.50s · ok +1.50s ¹", "1m30s"} {
		if !strings.Contains(doc, want) {
			t.Errorf("the doc lacks %q:\n%s", want, doc)
		}
	}
	svg := string(m.heatmap())
	if !strings.Contains(svg, "NOTCONN→1.5s¹") || !strings.HasSuffix(svg, "</svg>\n") {
		t.Errorf("the heatmap lacks restart's cell or its end:\n%s", svg)
	}
	if tbl := m.outcomeTable(); strings.Contains(tbl, "gcsfuse.csi") || strings.Contains(tbl, "`restart`") {
		t.Errorf("the README table shows a foreign driver or an older record:\n%s", tbl)
	}
}

func TestSummarize(t *testing.T) {
	mk := func(col, srv string, o report.IOOutcome) member {
		return member{cell{io: []report.IOOutcome{o}}, srv, col}
	}
	sub := func(errno string, good float64) report.IOOutcome {
		return report.IOOutcome{Kind: report.IOSubPath, FirstError: errno, FaultToGood: good}
	}
	got := summarize([]member{
		mk("v1.37.2 model", "dummy-fuse", sub("ENOTCONN", 1.2)), mk("v1.37.2 model", "gcsfuse", sub("ENOTCONN", 2.7)),
		mk("v1.36.3 model", "dummy-fuse", sub("ENOTCONN", 0)),
	}, report.IOSubPath)
	if want := "ENOTCONN, ok again after 1.2–2.7 s (2 runs: v1.37.2 model); ENOTCONN, never ok again (1 run: v1.36.3 model)"; got != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
	if got := summarize(nil, report.IOStat); got != "–" {
		t.Errorf("no runs: %q", got)
	}
}

// TestNotRunnableCells: a run the backend refused (a kubelet without the feature the row needs) is a cell of its
// own, NOT RUNNABLE in the matrix, its heatmap and the outcome table, never a FAIL or a missing cell; a run of
// the same row elsewhere keeps its outcome beside it.
func TestNotRunnableCells(t *testing.T) {
	const sc = "restart-all-containers"
	rs := &report.Results{Backend: scenarios.BackendKube, Runs: []report.Record{
		{Scenario: sc, Backend: scenarios.BackendKube, Kubelet: "v1.34.4", Result: notRunnableText, Start: "2026-11-29T01:00:00Z"},
		{Scenario: sc, Backend: scenarios.BackendKube, Kubelet: "v1.37.2", Result: "PASS", Start: "2026-11-29T02:00:00Z",
			Measured: report.Measured{Kills: true, IO: []report.IOOutcome{{Kind: report.IOKeptFD, FirstError: "ENOTCONN", FaultToFirstError: 0.8, FaultToGood: 17}}}},
	}}
	m := build(catalog.All(), []*report.Results{rs}, []string{"a.json"})
	if len(m.rows) != 1 || len(m.columns) != 2 {
		t.Fatalf("rows %+v, columns %+v: want 1 and 2", m.rows, m.columns)
	}
	c := m.cells[m.rows[0]][column{"v1.34.4", scenarios.BackendKube}]
	if !c.notRunnable || c.mdCell(report.IOKeptFD) != notRunnableText {
		t.Errorf("the refused run's cell: %+v, %q", c, c.mdCell(report.IOKeptFD))
	}
	if svg := string(m.heatmap()); !strings.Contains(svg, ">n/r<") {
		t.Error("the heatmap does not show the refused run")
	}
	tbl := m.outcomeTable()
	if !strings.Contains(tbl, "NOT RUNNABLE (1 run: v1.34.4 real)") || !strings.Contains(tbl, "ENOTCONN, ok again after") {
		t.Errorf("the outcome table:\n%s", tbl)
	}
	if strings.Contains(tbl, "FAIL") {
		t.Errorf("the outcome table calls a refused run a failure:\n%s", tbl)
	}
}

// TestProfileRecord: a driver-agnostic run recorded before the per-I/O outcomes has only its profile, whose
// stall_ms was the longest time without a good read: its cells show that as the stall, as they always have,
// and its recovery only where it failed.
func TestProfileRecord(t *testing.T) {
	var rs report.Results
	if err := json.Unmarshal([]byte(`{"backend":"kube","kubelet":"v1.37.2","runs":[
		{"scenario":"driver-pod-delete","backend":"kube","kubelet":"v1.37.2","driver":"blackbox.example.com","killed":"driver-pod killed",
		 "placement":"keeper","result":"MEASURED","start":"2026-11-26T19:00:00Z","measured":{"kills":true},
		 "profile":{"io":[{"kind":"kept-fd","reads_before":3,"failed":false,"errors":0,"recovered":true,"fault_to_good_read_s":0.57,"stall_ms":1053.9},
		   {"kind":"stat","reads_before":1,"failed":true,"first_errno":"ENOTCONN","fault_to_first_error_s":0.85,"errors":1,"recovered":true,
		    "fault_to_good_read_s":1.95,"stall_ms":1097}],"kubelet":{"failed_to_stat":false}}}]}`), &rs); err != nil {
		t.Fatal(err)
	}
	m := build(catalog.All(), []*report.Results{&rs}, []string{"a.json"})
	if len(m.rows) != 1 || len(m.columns) != 1 {
		t.Fatalf("rows %+v, columns %+v: want 1 and 1", m.rows, m.columns)
	}
	c := m.cells[m.rows[0]][m.columns[0]]
	for kind, want := range map[string]string{report.IOKeptFD: "no error · stall 1.05s", report.IOStat: "ENOTCONN +0.85s · ok +1.95s", report.IONewOpen: "–"} {
		if got := c.mdCell(kind); got != want {
			t.Errorf("%s: %q, want %q", kind, got, want)
		}
	}
}
