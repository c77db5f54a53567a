package bench

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReadmeTableIsGenerated fails when a generated table in dummy-fuse/README.md or csi-plugin/README.md is not
// the one the newest result files give: a figure changed by hand, or a new run whose table was not regenerated.
func TestReadmeTableIsGenerated(t *testing.T) {
	for _, tc := range []struct {
		readme     string
		regenerate func(readme []byte, results string) ([]byte, error)
		from       string
	}{
		{"../../dummy-fuse/README.md", Regenerate, "dummy-fuse/bench/results and its relay, soak, relay-write and soak-relay-write"},
		{"../../csi-plugin/README.md", RegenerateCSIPlugin, "dummy-fuse/bench/results/soak-relay-keeper"},
	} {
		readme, err := os.ReadFile(tc.readme)
		if err != nil {
			t.Fatal(err)
		}
		want, err := tc.regenerate(readme, "../../dummy-fuse/bench/results")
		if err != nil {
			t.Fatalf("%s: %v", tc.readme, err)
		}
		if string(want) != string(readme) {
			t.Errorf("%s: its generated tables do not match the newest files in %s: run make bench-doc", tc.readme, tc.from)
		}
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
	for _, want := range []string{"DirectIORead met by the medians (Go/C 1.50 balanced over the orders; in 1 of 3 rounds)", "peak RSS ≤ 4 MiB not met: DirectIORead (6.0 MiB)"} {
		if !strings.Contains(got, want) {
			t.Errorf("Goals = %q, want it to contain %q", got, want)
		}
	}
}

func TestRelaySummarizeAndGoals(t *testing.T) {
	round := func(n int, direct, relay float64) Round {
		out := fmt.Sprintf(`BenchmarkRelay/gcsfuse/DirectIORead/direct-2   918  257202 ns/op  224 p50-µs  816 p99-µs  %g reads/s  40 server-cpu-µs/op
BenchmarkRelay/gcsfuse/DirectIORead/relay-2    505  406790 ns/op  353 p50-µs  1668 p99-µs  %g reads/s  6.1 relay-cpu-µs/op  4.5 relay-switches/op  42 server-cpu-µs/op  9 server-switches/op
BenchmarkRelay/gcsfuse/ServerCrash/relay-2       5  76695936 ns/op  0 failed-reads  %g over-start-max-ms  0.14 over-start-p50-ms  51 stall-p50-ms  50 start-p50-ms
`, direct, relay, 10*float64(n))
		figs, err := ParseFigures(strings.NewReader(out))
		if err != nil {
			t.Fatal(err)
		}
		return Round{N: n, Figures: figs}
	}
	r := RelayResult{Rounds: []Round{round(1, 1000, 900), round(2, 1000, 500), round(3, 1000, 850), round(6, 1000, 100)}}
	if f := r.Rounds[0].Figures[1]; f.Bench != "Relay/gcsfuse/DirectIORead" || f.Server != "relay" || f.P99us != 1668 {
		t.Fatalf("parsed %+v", f)
	}
	r.Summarize()
	if len(r.Summary) != 1 || len(r.Crash) != 1 {
		t.Fatalf("summary %+v, crash %+v", r.Summary, r.Crash)
	}
	if s := r.Summary[0]; s.Server != "gcsfuse" || s.Bench != "DirectIORead" || s.Rounds != 4 || s.Ratio.Median != 0.675 || s.Ratio.Min != 0.1 || s.RelayP99.Max != 1668 ||
		s.DirectCPU.Median != 40 || s.P50Ratio.Median != 353.0/224 || s.RelayServerCPU.Median != 42 || s.RelayCPU.Median != 6.1 ||
		s.RelaySwitches.Median != 4.5 || s.RelayServerSwitches.Median != 9 || s.DirectSwitches.Median != 0 {
		t.Errorf("summary %+v", s)
	}
	if c := r.Crash[0]; c.Kills != 20 || c.OverMaxMs != 60 || c.StartMs.Median != 50 || c.FailedReads != 0 {
		t.Errorf("crash %+v", c)
	}
	got := RelayGoals(&r)
	for _, want := range []string{"gcsfuse DirectIORead ≥ 0.90× not met by the balanced median 0.68 (in 1 of 4 rounds)", "gcsfuse stall ≤ start + 50 ms not met in every kill (worst 60.0 ms over 20 kills)"} {
		if !strings.Contains(got, want) {
			t.Errorf("RelayGoals = %q, want it to contain %q", got, want)
		}
	}
}

// TestRelayGoalsAgainstTheFloor: a fast local server's relay CPU per request is judged against the floor's (the
// relay in front of dummy-fuse), and its cached reads by their balanced ratio.
func TestRelayGoalsAgainstTheFloor(t *testing.T) {
	sum := func(server, bench string, relayCPU, balanced float64) RelaySummary {
		return RelaySummary{Server: server, Bench: bench, Rounds: 4, RelayCPU: Spread{Median: relayCPU}, Orders: Orders{Balanced: balanced}}
	}
	r := RelayResult{Summary: []RelaySummary{
		sum("squashfuse", "DirectIORead", 11, 0.5), sum("squashfuse", "CachedRead", 30, 0.97),
		sum("dummy-fuse", "DirectIORead", 10, 0.6), sum("dummy-fuse", "CachedRead", 20, 0.99),
	}}
	got := RelayGoals(&r)
	for _, want := range []string{
		"squashfuse DirectIORead relay CPU/op ≤ the floor's × 1.2 met (11.0 vs 10.0 µs, × 1.10)",
		"squashfuse CachedRead relay CPU/op ≤ the floor's × 1.2 not met (30.0 vs 20.0 µs, × 1.50)",
		"squashfuse cached reads ≥ 0.95× met (balanced 0.97)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("RelayGoals = %q, want it to contain %q", got, want)
		}
	}
}

func TestPercentilesOf(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	if p := PercentilesOf(ds); p.P50 != 50.5 || p.P99 != 100 || p.Max != 100 {
		t.Errorf("PercentilesOf(1..100 ms) = %+v", p)
	}
	if p := PercentilesOf(nil); p != (Percentiles{}) {
		t.Errorf("PercentilesOf(nil) = %+v", p)
	}
}

// TestWriteSummaryBalancesTheOrder: the way that runs second in a round runs faster, so the write summary gives
// each order's median and judges the goal by their mean, not by the median of all rounds, which leans towards
// the order that ran more often (three of five rounds run direct first).
func TestWriteSummaryBalancesTheOrder(t *testing.T) {
	round := func(first string, direct, relay float64) Round {
		order := []string{"direct", "relay"}
		if first == "relay" {
			order = []string{"relay", "direct"}
		}
		fig := func(way string, mbs float64) Figures {
			return Figures{Bench: "RelayWrite/gcsfuse/SequentialWrite", Server: way, Extra: map[string]float64{mbPerSec: mbs}}
		}
		return Round{Order: order, Figures: []Figures{fig("direct", direct), fig("relay", relay)}}
	}
	r := &RelayWriteResult{Rounds: []Round{round("direct", 50, 47), round("relay", 60, 45), round("direct", 50, 45),
		round("relay", 60, 42), round("direct", 50, 46)}}
	r.Summarize()
	if len(r.Summary) != 1 {
		t.Fatalf("summary %+v, want one benchmark", r.Summary)
	}
	s := r.Summary[0]
	near := func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }
	if o := s.Orders; !near(s.Ratio.Median, 0.9) || !near(o.AFirst.Median, 0.92) || !near(o.BFirst.Median, 0.725) || !near(o.Balanced, 0.8225) {
		t.Errorf("median %v, direct first %v, relay first %v, balanced %v; want 0.9, 0.92, 0.725, 0.8225",
			s.Ratio.Median, o.AFirst.Median, o.BFirst.Median, o.Balanced)
	}
	if got := s.Orders.cell(); got != "0.92 / 0.72 (0.82)" {
		t.Errorf("table cell %q", got)
	}
	if g := RelayWriteGoal(r); !strings.Contains(g, ": met (0.82×, the mean of the medians") {
		t.Errorf("goal: %s", g)
	}
	r.Rounds[1], r.Rounds[3] = round("relay", 60, 40), round("relay", 60, 38)
	r.Summarize()
	if g := RelayWriteGoal(r); !strings.Contains(g, "not met (0.78×") || !strings.Contains(g, "median of all 5 rounds 0.90×") {
		t.Errorf("goal with slow relay-first rounds: %s", g)
	}
}

// TestSpinKeepsTheCPUBusyUntilStopped: the loaded mode's threads use CPU while they run and end at Stop.
func TestSpinKeepsTheCPUBusyUntilStopped(t *testing.T) {
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano())
	}
	before := cpu()
	s := Spin(1)
	time.Sleep(200 * time.Millisecond)
	s.Stop()
	if used := cpu() - before; used < 50*time.Millisecond {
		t.Errorf("one spinning thread for 200 ms used %s of CPU", used)
	}
}

// TestLoadedTableSaysSo: a loaded run's table names the load beside the benchmarks and its record's directory.
func TestLoadedTableSaysSo(t *testing.T) {
	r := &Result{Commit: "abc", Loaded: 2, Machine: Machine{Cores: 2}, Rounds: []Round{{Load: Load{Busy: 1}}}}
	got := Table(r, "dummy-fuse/bench/results/loaded/20261130T0400-abc.json")
	for _, want := range []string{"`bench/results/loaded/20261130T0400-abc.json`", "**loaded**: 2 CPU-bound threads beside the benchmarks"} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "started on a busy machine") {
		t.Errorf("a loaded run's busy rounds are its load, not a warning:\n%s", got)
	}
}
