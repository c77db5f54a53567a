package bench

import (
	"fmt"
	"strings"
	"time"
)

// RelayWriteResult is one run of `make bench-relay-write`: the writable relay (dummy-fuse --relay-writable)
// in front of each writable real server beside direct access to the same server's mount
// (BenchmarkRelayWrite in dummy-fuse/relayfs/write_bench_test.go), both ways back to back in every round,
// the order swapped every round. Figures.Bench is "RelayWrite/<server>/<benchmark>", Figures.Server "direct"
// or "relay", the throughput in Figures.Extra["MB/s"].
type RelayWriteResult struct {
	Commit    string         `json:"commit"`
	Date      string         `json:"date"`
	Machine   Machine        `json:"machine"`
	Benchtime string         `json:"benchtime"`
	Load      Load           `json:"load"`
	Rounds    []Round        `json:"rounds"`
	Summary   []WriteSummary `json:"summary"`
}

// WriteSummary is one write benchmark on one server over the rounds that ran it both ways.
type WriteSummary struct {
	Server string `json:"server"`
	Bench  string `json:"bench"`
	Rounds int    `json:"rounds"`
	// Ratio is relay MB/s over direct MB/s within each round; Orders splits it by which ran first (a: direct),
	// and its Balanced is what the goal is judged by.
	Ratio     Spread `json:"ratio"`
	Orders    Orders `json:"orders"`
	DirectMBs Spread `json:"direct_mb_per_s"`
	RelayMBs  Spread `json:"relay_mb_per_s"`
	DirectP50 Spread `json:"direct_p50_us"`
	RelayP50  Spread `json:"relay_p50_us"`
	DirectP99 Spread `json:"direct_p99_us"`
	RelayP99  Spread `json:"relay_p99_us"`
}

const (
	writeBenchPrefix = "RelayWrite/"
	mbPerSec         = "MB/s"
	// writeGoalServer and writeGoalBench are what the relay's write goal is stated for: gcsfuse's sequential
	// writes through the relay at writeGoal of direct or better.
	writeGoalServer = "gcsfuse"
	writeGoalBench  = "SequentialWrite"
	writeGoal       = 0.8
)

// Summarize computes r.Summary from r.Rounds.
func (r *RelayWriteResult) Summarize() {
	r.Summary = nil
	for _, p := range pairRounds(r.Rounds, "direct", "relay") {
		rest, ok := strings.CutPrefix(p.bench, writeBenchPrefix)
		if !ok {
			continue
		}
		server, bench, _ := strings.Cut(rest, "/")
		var ratio, dm, rm, d50, r50, d99, r99 []float64
		var first []string
		for i, d := range p.a {
			rl := p.b[i]
			if d.Extra[mbPerSec] == 0 {
				continue
			}
			ratio, first = append(ratio, rl.Extra[mbPerSec]/d.Extra[mbPerSec]), append(first, p.first[i])
			dm, rm = append(dm, d.Extra[mbPerSec]), append(rm, rl.Extra[mbPerSec])
			d50, r50 = append(d50, d.P50us), append(r50, rl.P50us)
			d99, r99 = append(d99, d.P99us), append(r99, rl.P99us)
		}
		if len(ratio) == 0 {
			continue
		}
		r.Summary = append(r.Summary, WriteSummary{Server: server, Bench: bench, Rounds: len(ratio), Ratio: spreadOf(ratio),
			Orders: ordersOf(ratio, first, "direct", "relay"), DirectMBs: spreadOf(dm), RelayMBs: spreadOf(rm),
			DirectP50: spreadOf(d50), RelayP50: spreadOf(r50), DirectP99: spreadOf(d99), RelayP99: spreadOf(r99)})
	}
}

// DoWrites runs the write benchmarks in rn.Rounds rounds and returns the result, summarized.
func (rn RelayRun) DoWrites() (*RelayWriteResult, error) {
	r := &RelayWriteResult{Commit: rn.Commit, Date: time.Now().UTC().Format(time.RFC3339), Machine: ThisMachine(), Benchtime: rn.Benchtime}
	var err error
	if r.Load, err = MeasureLoad(time.Second); err != nil {
		return nil, err
	}
	m := r.Machine
	fmt.Fprintf(rn.Log, "writable relay %s vs direct; %d rounds x %s\nmachine: %s, %d cores, Linux %s, %s\nat the start: %s\n",
		r.Commit, rn.Rounds, rn.Benchtime, m.CPU, m.Cores, m.Kernel, m.Go, r.Load)
	if r.Load.IsBusy(m.Cores) {
		fmt.Fprintf(rn.Log, "WARNING: the machine is busy (other work on half of the cores or more): absolute figures will drift, only the ratio within a round holds\n")
	}
	for n := 1; n <= rn.Rounds; n++ {
		order := []string{"direct", "relay"}
		if n%2 == 0 {
			order = []string{"relay", "direct"}
		}
		rd := Round{N: n, Order: order}
		if rd.Load, err = MeasureLoad(time.Second); err != nil {
			return nil, err
		}
		fmt.Fprintf(rn.Log, "round %d (%s first; %s)\n", n, order[0], rd.Load)
		if rd.Figures, err = runBenchmarks(rn.TestBinary, rn.Dir, rn.Log, "RELAY_BENCH_ORDER="+strings.Join(order, ","),
			"RelayWrite/./(SequentialWrite|FsyncWrite)", rn.Benchtime); err != nil {
			return nil, fmt.Errorf("round %d: %w", n, err)
		}
		r.Rounds = append(r.Rounds, rd)
		one := RelayWriteResult{Rounds: []Round{rd}}
		one.Summarize()
		for _, s := range one.Summary {
			fmt.Fprintf(rn.Log, "  %-8s %-16s relay/direct %5.2f  MB/s %7.1f %7.1f  p50 %9.0f %9.0f µs  p99 %9.0f %9.0f µs\n",
				s.Server, s.Bench, s.Ratio.Median, s.RelayMBs.Median, s.DirectMBs.Median, s.RelayP50.Median, s.DirectP50.Median, s.RelayP99.Median, s.DirectP99.Median)
		}
	}
	r.Summarize()
	if len(r.Summary) == 0 {
		return nil, fmt.Errorf("no write benchmark ran both ways (not root, no /dev/fuse, or no real servers: make servers WITH_RCLONE=1, apt-get install s3fs?)")
	}
	return r, nil
}

// Write writes r to dir/<date>-<commit>.json and returns the path.
func (r *RelayWriteResult) Write(dir string) (string, error) {
	return writeRecord(dir, r.Date, r.Commit, r)
}

var writeTitles = map[string]string{
	"SequentialWrite": "1 MiB file in 64 KiB writes, closed",
	"FsyncWrite":      "64 KiB write + fsync",
}

// RelayWriteTable renders the generated write bench section of dummy-fuse/README.md for r, read from file.
func RelayWriteTable(r *RelayWriteResult, file string) string {
	var b strings.Builder
	m := r.Machine
	fmt.Fprintf(&b, "From `bench/results/relay-write/%s`: dummy-fuse %s, %d rounds of %s per benchmark and way, %s; %s, %d cores, Linux %s, %s.\n",
		baseName(file), r.Commit, len(r.Rounds), r.Benchtime, r.Date, m.CPU, m.Cores, m.Kernel, m.Go)
	fmt.Fprintf(&b, "Load at the start: load average %.2f, %.0f %% of the CPU busy", r.Load.Avg[0], 100*r.Load.Busy)
	if busy := busyRounds(r.Rounds, m.Cores); busy > 0 {
		fmt.Fprintf(&b, "; %d of %d rounds started on a busy machine: only the ratios within a round mean something", busy, len(r.Rounds))
	}
	b.WriteString(".\n\n")
	b.WriteString("| server | operation | direct, MB/s | relay, MB/s | relay/direct per round (median) | direct first / relay first (balanced) | p50 direct / relay (median) | p99 direct / relay (median) |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|\n")
	for _, s := range r.Summary {
		fmt.Fprintf(&b, "| %s | %s | %.1f | %.1f | %s | %s | %s / %s ms | %s / %s ms |\n",
			s.Server, writeTitles[s.Bench], s.DirectMBs.Median, s.RelayMBs.Median, ratioRange(s.Ratio), s.Orders.cell(),
			ms(s.DirectP50.Median), ms(s.RelayP50.Median), ms(s.DirectP99.Median), ms(s.RelayP99.Median))
	}
	b.WriteString("\n" + RelayWriteGoal(r) + "\n")
	return b.String()
}

func ms(us float64) string { return fmt.Sprintf("%.1f", us/1e3) }

// RelayWriteGoal states whether r meets the relay's write goal.
func RelayWriteGoal(r *RelayWriteResult) string {
	for _, s := range r.Summary {
		if s.Server == writeGoalServer && s.Bench == writeGoalBench {
			verdict := "met"
			if s.Orders.Balanced < writeGoal {
				verdict = "not met"
			}
			return fmt.Sprintf("Goal: %s's sequential writes through the relay at %.1f× of direct or better: %s (%.2f×, the mean of the "+
				"medians of the rounds that ran direct first and relay first; median of all %d rounds %.2f×).",
				writeGoalServer, writeGoal, verdict, s.Orders.Balanced, s.Rounds, s.Ratio.Median)
		}
	}
	return fmt.Sprintf("Goal: %s's sequential writes through the relay at %.1f× of direct or better: not measured in this run.", writeGoalServer, writeGoal)
}
