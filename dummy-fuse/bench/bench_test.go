package bench

import (
	"os"
	"strings"
	"testing"
)

// TestReadmeTableIsGenerated fails when a generated table in dummy-fuse/README.md is not the one the newest
// result files give: a figure changed by hand, or a new run whose table was not regenerated.
func TestReadmeTableIsGenerated(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	want, err := Regenerate(readme, "results")
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != string(readme) {
		t.Errorf("dummy-fuse/README.md's generated tables do not match the newest files in bench/results, results/relay and results/soak: run make bench-doc")
	}
}

func TestParseFiguresAndSummarize(t *testing.T) {
	out := `goos: linux
BenchmarkDirectIORead/go-2   315439   6486 ns/op   3.0 p50-µs   36 p99-µs   6.0 peak-RSS-MiB   150000 reads/s   2.4 server-cpu-µs/op   1.03 server-switches/op
BenchmarkDirectIORead/c-2    300649  13581 ns/op   4.7 p50-µs   70 p99-µs   2.1 peak-RSS-MiB    75000 reads/s   7.7 server-cpu-µs/op   1.30 server-switches/op
dummy-fuse: some message of a server
PASS
`
	figs, err := ParseFigures(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	if len(figs) != 2 {
		t.Fatalf("got %d figures, want 2: %+v", len(figs), figs)
	}
	g := figs[0]
	if g.Bench != "DirectIORead" || g.Server != "go" || g.Ops != 315439 || g.ReadsPerSec != 150000 || g.CPUus != 2.4 ||
		g.Switches != 1.03 || g.PeakRSSMiB != 6.0 || g.P99us != 36 || g.P50us != 3.0 {
		t.Errorf("go figures %+v", g)
	}
	second := []Figures{{Bench: "DirectIORead", Server: "c", ReadsPerSec: 100000}, {Bench: "DirectIORead", Server: "go", ReadsPerSec: 50000}}
	r := Result{Rounds: []Round{{N: 1, Figures: figs}, {N: 2, Figures: second}, {N: 3, Figures: figs[:1]}}}
	r.Summarize()
	if len(r.Summary) != 1 {
		t.Fatalf("summary %+v", r.Summary)
	}
	s := r.Summary[0]
	// Round 3 ran only Go: it has no ratio and does not count.
	if s.Rounds != 2 || s.Ratio.Min != 0.5 || s.Ratio.Max != 2 || s.Ratio.Median != 1.25 || s.GoReads.Max != 150000 {
		t.Errorf("summary %+v", s)
	}
	if _, err := ParseFigures(strings.NewReader("BenchmarkX/go-2 12 x reads/s\n")); err == nil {
		t.Error("a malformed value parsed without error")
	}
}

func TestSplice(t *testing.T) {
	readme := "intro\n" + beginMark + "\nold table\n" + endMark + "\nafter\n"
	got, err := Splice([]byte(readme), "new table\n")
	if err != nil {
		t.Fatal(err)
	}
	if want := "intro\n" + beginMark + "\nnew table\n" + endMark + "\nafter\n"; string(got) != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if _, err := Splice([]byte("no markers"), "x"); err == nil {
		t.Error("a README without the markers was accepted")
	}
}

func TestBusy(t *testing.T) {
	for _, tc := range []struct {
		l    Load
		want bool
	}{
		{Load{Avg: [3]float64{0.4}, Busy: 0.1}, false},
		{Load{Avg: [3]float64{0.4}, Busy: 0.6}, true},
		{Load{Avg: [3]float64{2.5}, Busy: 0.1}, true},
	} {
		if got := tc.l.IsBusy(2); got != tc.want {
			t.Errorf("%v.IsBusy(2) = %t, want %t", tc.l, got, tc.want)
		}
	}
}

func TestGoals(t *testing.T) {
	round := func(n int, gr, gcpu, cr, ccpu float64) Round {
		return Round{N: n, Figures: []Figures{
			{Bench: "DirectIORead", Server: "go", ReadsPerSec: gr, CPUus: gcpu, PeakRSSMiB: 6},
			{Bench: "DirectIORead", Server: "c", ReadsPerSec: cr, CPUus: ccpu, PeakRSSMiB: 2},
		}}
	}
	r := Result{Rounds: []Round{round(1, 200, 2, 100, 3), round(2, 90, 2, 100, 3), round(3, 150, 4, 100, 3)}}
	r.Summarize()
	got := Goals(&r)
	for _, want := range []string{"DirectIORead met by the medians (in 1 of 3 rounds)", "peak RSS ≤ 4 MiB not met: DirectIORead (6.0 MiB)"} {
		if !strings.Contains(got, want) {
			t.Errorf("Goals = %q, want it to contain %q", got, want)
		}
	}
}
