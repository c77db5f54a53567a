package bench

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// RelayResult is one run of `make bench-relay`: the relay (dummy-fuse --relay-backend, package relayfs) in
// front of each real server beside direct access to the same server's mount (BenchmarkRelay in
// dummy-fuse/relayfs/bench_test.go). In each round every benchmark reads directly and through the relay back
// to back, the order swapped every round; Figures.Bench is "Relay/<server>/<benchmark>", Figures.Server
// "direct" or "relay". Then each round kills the server KillsPerRound times under a reader through the relay
// (Relay/<server>/ServerCrash, relay only, its figures in Figures.Extra).
type RelayResult struct {
	Commit        string         `json:"commit"`
	Date          string         `json:"date"`
	Machine       Machine        `json:"machine"`
	Benchtime     string         `json:"benchtime"`
	KillsPerRound int            `json:"kills_per_round"`
	Load          Load           `json:"load"`
	Rounds        []Round        `json:"rounds"`
	Summary       []RelaySummary `json:"summary"`
	Crash         []CrashSummary `json:"crash"`
}

// RelaySummary is one benchmark on one server over the rounds that ran it both ways.
type RelaySummary struct {
	Server string `json:"server"`
	Bench  string `json:"bench"`
	Rounds int    `json:"rounds"`
	// Ratio is relay reads/s over direct reads/s within each round; Orders splits it by which ran first (a:
	// direct).
	Ratio       Spread `json:"ratio"`
	Orders      Orders `json:"orders"`
	DirectReads Spread `json:"direct_reads_per_s"`
	RelayReads  Spread `json:"relay_reads_per_s"`
	DirectP50   Spread `json:"direct_p50_us"`
	RelayP50    Spread `json:"relay_p50_us"`
	DirectP99   Spread `json:"direct_p99_us"`
	RelayP99    Spread `json:"relay_p99_us"`
	// P50Ratio and P99Ratio are the relay's latency over direct access's within each round.
	P50Ratio Spread `json:"p50_ratio"`
	P99Ratio Spread `json:"p99_ratio"`
	// CPU per operation, µs: of the server read directly; through the relay, of the server and of the relay.
	DirectCPU      Spread `json:"direct_server_cpu_us_per_op"`
	RelayServerCPU Spread `json:"relay_server_cpu_us_per_op"`
	RelayCPU       Spread `json:"relay_relay_cpu_us_per_op"`
	// Context switches per operation, likewise (zero in records made before they were measured).
	DirectSwitches      Spread `json:"direct_server_switches_per_op"`
	RelayServerSwitches Spread `json:"relay_server_switches_per_op"`
	RelaySwitches       Spread `json:"relay_relay_switches_per_op"`
}

// CrashSummary is the server kills of one server over all rounds: each figure's per-round median, spread
// over the rounds, and the worst kill of all.
type CrashSummary struct {
	Server string `json:"server"`
	Kills  int    `json:"kills"`
	// Start is from the kill to the new server serving the file (probed directly); Stall from the kill to the
	// relay reader's next good read; Over is Stall − Start per kill: the relay's own part.
	StartMs     Spread  `json:"start_p50_ms"`
	StallMs     Spread  `json:"stall_p50_ms"`
	OverMs      Spread  `json:"over_start_p50_ms"`
	OverMaxMs   float64 `json:"over_start_max_ms"`
	FailedReads int     `json:"failed_reads"`
}

// The relay benchmarks' sub-benchmarks, in the order of the table.
const (
	relayBenchPrefix = "Relay/"
	crashBench       = "ServerCrash"
)

// splitRelayBench splits "Relay/gcsfuse/DirectIORead" into server and benchmark.
func splitRelayBench(name string) (server, bench string, ok bool) {
	rest, ok := strings.CutPrefix(name, relayBenchPrefix)
	if !ok {
		return "", "", false
	}
	return strings.Cut(rest, "/")
}

// Summarize computes r.Summary and r.Crash from r.Rounds.
func (r *RelayResult) Summarize() {
	r.Summary, r.Crash = nil, nil
	for _, p := range pairRounds(r.Rounds, "direct", "relay") {
		server, bench, ok := splitRelayBench(p.bench)
		if !ok {
			continue
		}
		var ratio, dr, rr, d50, r50, d99, r99, q50, q99, dc, rsc, rc, ds, rss, rs []float64
		var first []string
		for i, d := range p.a {
			rl := p.b[i]
			if d.ReadsPerSec == 0 {
				continue
			}
			ratio, first = append(ratio, rl.ReadsPerSec/d.ReadsPerSec), append(first, p.first[i])
			dr, rr = append(dr, d.ReadsPerSec), append(rr, rl.ReadsPerSec)
			d50, r50 = append(d50, d.P50us), append(r50, rl.P50us)
			d99, r99 = append(d99, d.P99us), append(r99, rl.P99us)
			if d.P50us > 0 && d.P99us > 0 {
				q50, q99 = append(q50, rl.P50us/d.P50us), append(q99, rl.P99us/d.P99us)
			}
			dc, rsc, rc = append(dc, d.CPUus), append(rsc, rl.CPUus), append(rc, rl.Extra["relay-cpu-µs/op"])
			ds, rss, rs = append(ds, d.Switches), append(rss, rl.Switches), append(rs, rl.Extra["relay-switches/op"])
		}
		if len(ratio) == 0 {
			continue
		}
		r.Summary = append(r.Summary, RelaySummary{
			Server: server, Bench: bench, Rounds: len(ratio), Ratio: spreadOf(ratio), Orders: ordersOf(ratio, first, "direct", "relay"),
			DirectReads: spreadOf(dr), RelayReads: spreadOf(rr), DirectP50: spreadOf(d50), RelayP50: spreadOf(r50),
			DirectP99: spreadOf(d99), RelayP99: spreadOf(r99), P50Ratio: spreadOf(q50), P99Ratio: spreadOf(q99),
			DirectCPU: spreadOf(dc), RelayServerCPU: spreadOf(rsc), RelayCPU: spreadOf(rc),
			DirectSwitches: spreadOf(ds), RelayServerSwitches: spreadOf(rss), RelaySwitches: spreadOf(rs),
		})
	}
	r.Crash = crashSummaries(r.Rounds)
}

// crashSummaries sums up the ServerCrash figures (relay only) per server, in the order the servers ran.
func crashSummaries(rounds []Round) []CrashSummary {
	var out []CrashSummary
	var start, stall, over [][]float64
	index := map[string]int{}
	for _, rd := range rounds {
		for _, f := range rd.Figures {
			server, bench, ok := splitRelayBench(f.Bench)
			if !ok || bench != crashBench || f.Server != "relay" {
				continue
			}
			i, ok := index[server]
			if !ok {
				i, index[server] = len(out), len(out)
				out = append(out, CrashSummary{Server: server})
				start, stall, over = append(start, nil), append(stall, nil), append(over, nil)
			}
			c := &out[i]
			c.Kills += f.Ops
			c.FailedReads += int(f.Extra["failed-reads"])
			start[i] = append(start[i], f.Extra["start-p50-ms"])
			stall[i] = append(stall[i], f.Extra["stall-p50-ms"])
			over[i] = append(over[i], f.Extra["over-start-p50-ms"])
			c.OverMaxMs = max(c.OverMaxMs, f.Extra["over-start-max-ms"])
		}
	}
	for i := range out {
		out[i].StartMs, out[i].StallMs, out[i].OverMs = spreadOf(start[i]), spreadOf(stall[i]), spreadOf(over[i])
	}
	return out
}

// Write writes r to dir/<date>-<commit>.json and returns the path.
func (r *RelayResult) Write(dir string) (string, error) { return writeRecord(dir, r.Date, r.Commit, r) }

// RelayRun describes a run of the relay benchmarks: the compiled test binary of dummy-fuse/relayfs.
type RelayRun struct {
	TestBinary string
	Dir        string // where it runs (the relayfs package directory)
	Commit     string
	Rounds     int
	Benchtime  string
	Kills      int // server kills per round and server
	Log        io.Writer
}

// Do runs the rounds and returns the result, summarized.
func (rn RelayRun) Do() (*RelayResult, error) {
	r := &RelayResult{Commit: rn.Commit, Date: time.Now().UTC().Format(time.RFC3339), Machine: ThisMachine(),
		Benchtime: rn.Benchtime, KillsPerRound: rn.Kills}
	var err error
	if r.Load, err = MeasureLoad(time.Second); err != nil {
		return nil, err
	}
	m := r.Machine
	fmt.Fprintf(rn.Log, "relay %s vs direct; %d rounds x %s, %d server kills per round\nmachine: %s, %d cores, Linux %s, %s\nat the start: %s\n",
		r.Commit, rn.Rounds, rn.Benchtime, rn.Kills, m.CPU, m.Cores, m.Kernel, m.Go, r.Load)
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
		env := "RELAY_BENCH_ORDER=" + strings.Join(order, ",")
		reads, err := runBenchmarks(rn.TestBinary, rn.Dir, rn.Log, env, "Relay/./(DirectIORead|OpenReadClose|CachedRead)", rn.Benchtime)
		if err != nil {
			return nil, fmt.Errorf("round %d: %w", n, err)
		}
		crash, err := runBenchmarks(rn.TestBinary, rn.Dir, rn.Log, env, "Relay/./"+crashBench, fmt.Sprintf("%dx", rn.Kills))
		if err != nil {
			return nil, fmt.Errorf("round %d: %w", n, err)
		}
		rd.Figures = append(reads, crash...)
		r.Rounds = append(r.Rounds, rd)
		printRelayRound(rn.Log, rd)
	}
	r.Summarize()
	if len(r.Summary) == 0 {
		return nil, fmt.Errorf("no benchmark ran both ways (not root, no /dev/fuse, or no real servers: make servers?)")
	}
	return r, nil
}

func printRelayRound(w io.Writer, rd Round) {
	one := RelayResult{Rounds: []Round{rd}}
	one.Summarize()
	for _, s := range one.Summary {
		fmt.Fprintf(w, "  %-10s %-14s relay/direct %5.2f  reads/s %9.0f %9.0f  p50 %7.1f %7.1f µs  p99 %7.1f %7.1f µs  cpu/op server %5.1f %5.1f + relay %5.1f µs\n",
			s.Server, s.Bench, s.Ratio.Median, s.RelayReads.Median, s.DirectReads.Median, s.RelayP50.Median, s.DirectP50.Median,
			s.RelayP99.Median, s.DirectP99.Median, s.RelayServerCPU.Median, s.DirectCPU.Median, s.RelayCPU.Median)
	}
	for _, c := range one.Crash {
		fmt.Fprintf(w, "  %-10s %d kills: start %.1f ms, stall %.1f ms, stall − start p50 %.1f ms, max %.1f ms, %d failed reads\n",
			c.Server, c.Kills, c.StartMs.Median, c.StallMs.Median, c.OverMs.Median, c.OverMaxMs, c.FailedReads)
	}
}

// The relay's goals. Against direct access: gcsfuse, a server whose own work dominates, at 0.9× or better on
// every read benchmark. Against the floor (the relay in front of dummy-fuse, a server that answers from memory:
// the extra FUSE round trip no relay avoids): a fast local server's (squashfuse's) relay CPU per request at most
// the floor's + 20 %, and its cached reads at 0.95× of direct or better. After a server crash, a stall of at
// most the server's own start + 50 ms. Ratios are judged by their balanced median (Orders).
const (
	relayRatioGoal   = 0.9
	relayRatioServer = "gcsfuse"
	floorServer      = "dummy-fuse"
	fastServer       = "squashfuse"
	floorCPUGoal     = 1.2
	cachedGoal       = 0.95
	overStartGoalMs  = 50
)

// RelayTable renders the generated relay section of dummy-fuse/README.md for r, read from the file named file.
func RelayTable(r *RelayResult, file string) string {
	var b strings.Builder
	m := r.Machine
	fmt.Fprintf(&b, "From `bench/results/relay/%s`: dummy-fuse %s, %d rounds of %s per benchmark and way and %d server kills per round, %s; %s, %d cores, Linux %s, %s.\n",
		baseName(file), r.Commit, len(r.Rounds), r.Benchtime, r.KillsPerRound, r.Date, m.CPU, m.Cores, m.Kernel, m.Go)
	fmt.Fprintf(&b, "Load at the start: load average %.2f, %.0f %% of the CPU busy", r.Load.Avg[0], 100*r.Load.Busy)
	if busy := busyRounds(r.Rounds, m.Cores); busy > 0 {
		fmt.Fprintf(&b, "; %d of %d rounds started on a busy machine: only the ratios within a round mean something", busy, len(r.Rounds))
	}
	b.WriteString(".\n\n")
	b.WriteString("| server | benchmark | direct, reads/s | relay, reads/s | relay/direct per round (median) | direct first / relay first (balanced) | p50 direct / relay (median), relay/direct per round | p99 direct / relay (median), relay/direct per round | CPU/op direct: server; relay: server + relay (median) | context switches/op, likewise |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range r.Summary {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s / %s µs, %s | %s / %s µs, %s | %s; %s + %s µs | %.1f; %.1f + %.1f |\n",
			s.Server, relayTitles[s.Bench], count(s.DirectReads), count(s.RelayReads), ratioRange(s.Ratio), s.Orders.cell(),
			us(s.DirectP50.Median), us(s.RelayP50.Median), ratioRange(s.P50Ratio), us(s.DirectP99.Median), us(s.RelayP99.Median), ratioRange(s.P99Ratio),
			us(s.DirectCPU.Median), us(s.RelayServerCPU.Median), us(s.RelayCPU.Median),
			s.DirectSwitches.Median, s.RelayServerSwitches.Median, s.RelaySwitches.Median)
	}
	b.WriteString("\n| server | kills | server start: kill → serving (median per round) | reader's stall (median per round) | stall − start (median per round) | stall − start, worst kill | failed reads |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	for _, c := range r.Crash {
		fmt.Fprintf(&b, "| %s | %d | %s ms | %s ms | %s ms | %.1f ms | %d |\n",
			c.Server, c.Kills, msRange(c.StartMs), msRange(c.StallMs), msRange(c.OverMs), c.OverMaxMs, c.FailedReads)
	}
	b.WriteString("\n" + RelayGoals(r) + "\n")
	return b.String()
}

var relayTitles = map[string]string{
	"DirectIORead":  "direct-I/O pread",
	"OpenReadClose": "open+read+close",
	"CachedRead":    "cached pread",
}

// RelayGoals states which of the relay's goals r meets, and in how many rounds.
func RelayGoals(r *RelayResult) string {
	var parts []string
	floor := map[string]RelaySummary{}
	for _, s := range r.Summary {
		if s.Server == floorServer {
			floor[s.Bench] = s
		}
	}
	for _, s := range r.Summary {
		switch s.Server {
		case relayRatioServer:
			met := 0
			for _, rd := range r.Rounds {
				one := RelayResult{Rounds: []Round{rd}}
				one.Summarize()
				for _, o := range one.Summary {
					if o.Server == s.Server && o.Bench == s.Bench && o.Ratio.Median >= relayRatioGoal {
						met++
					}
				}
			}
			parts = append(parts, fmt.Sprintf("%s %s ≥ %.2f× %s by the balanced median %.2f (in %d of %d rounds)",
				s.Server, s.Bench, relayRatioGoal, metOrNot(s.Orders.Balanced >= relayRatioGoal), s.Orders.Balanced, met, s.Rounds))
		case fastServer:
			if f, ok := floor[s.Bench]; ok && f.RelayCPU.Median > 0 {
				q := s.RelayCPU.Median / f.RelayCPU.Median
				parts = append(parts, fmt.Sprintf("%s %s relay CPU/op ≤ the floor's × %.1f %s (%.1f vs %.1f µs, × %.2f)",
					s.Server, s.Bench, floorCPUGoal, metOrNot(q <= floorCPUGoal), s.RelayCPU.Median, f.RelayCPU.Median, q))
			}
			if s.Bench == "CachedRead" {
				parts = append(parts, fmt.Sprintf("%s cached reads ≥ %.2f× %s (balanced %.2f)", s.Server, cachedGoal,
					metOrNot(s.Orders.Balanced >= cachedGoal), s.Orders.Balanced))
			}
		}
	}
	for _, c := range r.Crash {
		verdict := "not met"
		if c.OverMaxMs <= overStartGoalMs && c.Kills > 0 {
			verdict = "met"
		}
		parts = append(parts, fmt.Sprintf("%s stall ≤ start + %d ms %s in every kill (worst %.1f ms over %d kills)", c.Server, overStartGoalMs, verdict, c.OverMaxMs, c.Kills))
	}
	return fmt.Sprintf("Goals (%s ≥ %.1f× of direct; %s's relay CPU/op ≤ %.1f× the floor's (%s) and cached reads ≥ %.2f×; stall ≤ the server's start + %d ms): %s.",
		relayRatioServer, relayRatioGoal, fastServer, floorCPUGoal, floorServer, cachedGoal, overStartGoalMs, strings.Join(parts, "; "))
}

func metOrNot(ok bool) string {
	if ok {
		return "met"
	}
	return "not met"
}

func busyRounds(rounds []Round, cores int) int {
	n := 0
	for _, rd := range rounds {
		if rd.Load.IsBusy(cores) {
			n++
		}
	}
	return n
}

// us formats a latency in µs with the precision it deserves.
func us(v float64) string {
	if v < 10 {
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

// ratioRange formats a spread of ratios: 0.55–0.77 (0.71).
func ratioRange(s Spread) string { return fmt.Sprintf("%.2f–%.2f (%.2f)", s.Min, s.Max, s.Median) }

// msRange formats a spread in ms: 8.1 (7.9–9.0).
func msRange(s Spread) string {
	return fmt.Sprintf("%.1f (%.1f–%.1f)", s.Median, s.Min, s.Max)
}
