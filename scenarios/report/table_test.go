package report

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/catalog"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/scenariotest"
)

// TestReadmeTableIsGenerated fails when the per-version table in scenarios/README.md is not the one the files
// of scenarios/results give: a figure changed by hand, or a recorded run whose table was not regenerated.
func TestReadmeTableIsGenerated(t *testing.T) {
	results, files, err := LoadResults("../results")
	if err != nil {
		t.Fatal(err)
	}
	if len(results) == 0 {
		t.Fatal("no results file in scenarios/results")
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	want, err := SpliceVersionTable(readme, VersionTable(catalog.All(), results, files))
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != string(readme) {
		t.Error("scenarios/README.md's per-version table is not the one scenarios/results gives: run make scenarios-doc")
	}
}

// TestRecordRoundTrip: a run's result.json, collected into a results file and read back, gives the table the
// same verdict and times as the run's own summary line.
func TestRecordRoundTrip(t *testing.T) {
	runs := t.TempDir()
	sc := restartScenario(t)
	o := scenarios.Run(context.Background(), &scenariotest.Backend{RestartRecovers: true, BackendName: scenarios.BackendLocal}, sc,
		scenarios.RunOptions{Dir: filepath.Join(runs, "20261126-120000-restart"), Poll: time.Millisecond})
	if err := WriteReport(o); err != nil {
		t.Fatal(err)
	}
	// Before the run: nothing; after it: the run.
	if got, err := Collect(o.Start.Add(time.Hour), runs); err != nil || len(got) != 0 {
		t.Fatalf("Collect after the run: %v, %v", got, err)
	}
	all, err := Collect(o.Start, runs)
	if err != nil || len(all) != 1 || len(all[0].Runs) != 1 {
		t.Fatalf("Collect: %v, %v", all, err)
	}
	rs := all[0]
	rs.Commit, rs.Command = "abc1234", "make scenarios"
	out := t.TempDir()
	path, err := rs.Write(out)
	if err != nil {
		t.Fatal(err)
	}
	if want := "-abc1234-local-v1.37.2.json"; !strings.HasSuffix(path, want) {
		t.Errorf("results file %s, want a name ending in %s", path, want)
	}
	loaded, files, err := LoadResults(out)
	if err != nil || len(loaded) != 1 {
		t.Fatalf("LoadResults: %v, %v", loaded, err)
	}
	r := loaded[0].Runs[0]
	if r.Scenario != "restart" || r.Result != "PASS" || r.Held != len(o.Verdicts) || r.Expected != r.Held || r.Kernel == "" {
		t.Errorf("record %+v", r)
	}
	var sum strings.Builder
	PrintSummary(&sum, []*scenarios.Outcome{o})
	m := measuredOf(o)
	for _, want := range []string{m.kill(m.KillToError), m.recovery(m.KillToRecovery, m.Failed)} {
		if !strings.Contains(sum.String(), want) {
			t.Errorf("summary %q lacks %q", sum.String(), want)
		}
	}
	table := VersionTable([]scenarios.Scenario{sc}, loaded, files)
	held := strconv.Itoa(r.Held)
	want := "| `restart` | v1.37.2 | PASS (" + held + "/" + held + ") | ENOTCONN " + m.kill(m.KillToError) + " · good read " + m.recovery(m.KillToRecovery, m.Failed) + " | not recorded | |"
	if !strings.Contains(table, want) || !strings.Contains(table, filepath.Base(files[0])) {
		t.Errorf("table lacks\n%s\nand its source:\n%s", want, table)
	}
}

// TestVersionTable: the newest record of a cell wins, versions come newest first, a cell without a record
// says so, and only the files that gave a cell are named.
func TestVersionTable(t *testing.T) {
	cat := []scenarios.Scenario{{Name: "a", Steps: []scenarios.Step{scenarios.KillPlugin()}}, {Name: "b"}}
	rec := func(sc, be, kv, result string, held int, m Measured) Record {
		return Record{Scenario: sc, Backend: be, Kubelet: kv, Result: result, Held: held, Expected: 3, Measured: m}
	}
	failed := Measured{Kills: true, Failed: true, KillToError: 0.5, KillToRecovery: 1.25}
	old := &Results{Commit: "old", Backend: "local", Kubelet: "v1.36.3", Runs: []Record{
		rec("a", "local", "v1.36.3", "FAIL", 2, failed), rec("zz-not-in-catalog", "local", "v1.36.3", "PASS", 3, failed)}}
	newer := &Results{Commit: "new", Backend: "local", Kubelet: "v1.36.3", Runs: []Record{
		rec("a", "local", "v1.36.3", "PASS", 3, Measured{Kills: true, Stall: 2.5})}}
	kube := &Results{Commit: "k", Backend: "kube", Kubelet: "v1.37.2", Runs: []Record{
		rec("a", "kube", "v1.37.2", "NOT RUNNABLE", 0, failed)}}
	unused := &Results{Commit: "u", Backend: "local", Kubelet: "v1.36.3"}
	got := VersionTable(cat, []*Results{old, newer, kube, unused}, []string{"r/1-old.json", "r/2-new.json", "r/3-k.json", "r/4-u.json"})
	for _, want := range []string{
		"| `a` | v1.37.2 | not recorded | | NOT RUNNABLE | ENOTCONN 0.50s · good read 1.25s |\n| `a` | v1.36.3 | PASS (3/3) | no failure · stall 2.5ms | not recorded | |\n",
		"| `b` | v1.37.2 | not recorded | | not recorded | |\n",
		"2-new.json", "3-k.json",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
	for _, unwanted := range []string{"1-old.json", "4-u.json", "zz-not-in-catalog", "FAIL"} {
		if strings.Contains(got, unwanted) {
			t.Errorf("table has %q:\n%s", unwanted, got)
		}
	}
}

func TestMeasuredCell(t *testing.T) {
	for _, tc := range []struct {
		m    Measured
		want string
	}{
		{Measured{Sidecar: true, SidecarToRead: 1.034}, "sidecar start → good read 1.03s"},
		{Measured{}, "–"},
		{Measured{Kills: true, Failed: true, KillToError: 0.1}, "ENOTCONN 0.10s · good read never"},
		{Measured{Kills: true, Stall: 1131.1}, "no failure · stall 1131.1ms"},
		{Measured{Kills: true, Failed: true, FirstErrno: "ENOTCONN", KillToFirstError: 0.1, KillToError: 0.1}, "ENOTCONN 0.10s · good read never"},
		{Measured{Kills: true, Failed: true, FirstErrno: "ECONNABORTED", KillToFirstError: 30.2}, "ECONNABORTED 30.20s · ENOTCONN never · good read never"},
		{Measured{Kills: true, Writes: true, Failed: true, KillToError: 5.02, KillToRecovery: 5.5}, "ENOTCONN 5.02s · good write 5.50s"},
		{Measured{Kills: true, Writes: true, Failed: true, KillToError: 0.01, LostPieces: 4, LostBytes: 262144}, "ENOTCONN 0.01s · good write never · lost 4 acknowledged pieces (262144 bytes)"},
	} {
		if got := measuredCell(tc.m); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.m, got, tc.want)
		}
	}
}

// TestVersionTableSpecServers: a row that runs with some servers only (the rows that write) gets rows of a
// server described in a spec file once a record names it; a row that runs with dummy-fuse does not (the outage
// matrix has those).
func TestVersionTableSpecServers(t *testing.T) {
	cat := []scenarios.Scenario{
		{Name: "w", Servers: []string{"gcsfuse"}, ServersWhy: "it writes"},
		{Name: "r"},
	}
	rs := &Results{Commit: "c", Backend: "kube", Kubelet: "v1.37.2", Server: "s3fs", Runs: []Record{
		{Scenario: "w", Server: "s3fs", Backend: "kube", Kubelet: "v1.37.2", Result: "PASS", Held: 3, Expected: 3},
		{Scenario: "r", Server: "s3fs", Backend: "kube", Kubelet: "v1.37.2", Result: "PASS", Held: 3, Expected: 3},
	}}
	got := VersionTable(cat, []*Results{rs}, []string{"r/1-s3fs.json"})
	if !strings.Contains(got, "| `w` with s3fs | v1.37.2 | not recorded | | PASS (3/3) |") || !strings.Contains(got, "| `w` with gcsfuse | v1.37.2 | not recorded | | not recorded | |") {
		t.Errorf("the row that writes lacks its s3fs or gcsfuse row:\n%s", got)
	}
	if strings.Contains(got, "`r` with s3fs") {
		t.Errorf("a row that runs with dummy-fuse has a spec server's row:\n%s", got)
	}
}
