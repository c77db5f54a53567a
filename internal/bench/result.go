// Package bench records runs of dummy-fuse's benchmarks (dummy-fuse/bench_test.go) against the C reference
// (cref/hello.c) and turns the newest record into the table of dummy-fuse/README.md, so that no figure there
// is copied by hand. A run is a number of rounds; each round runs every benchmark against both servers back
// to back, in an order that alternates between rounds. The machine is shared, so the figure that holds is the
// ratio Go/C within a round; the record keeps the machine, its load and every round's figures. The relay's
// runs are recorded the same way, relay against direct access to a real server (relay.go, results/relay), and
// so are its soak runs (soak.go, results/soak); each has its generated table in the README.
package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/atomicfile"
)

// Result is one run of `make bench`, written to results/<date>-<commit>.json.
type Result struct {
	Commit    string  `json:"commit"` // dummy-fuse's commit (git describe), "-dirty" when uncommitted
	Date      string  `json:"date"`   // start, UTC, RFC 3339
	Machine   Machine `json:"machine"`
	Libfuse   string  `json:"libfuse"`   // version the C reference was built with
	Benchtime string  `json:"benchtime"` // per benchmark and server, go test -benchtime
	Load      Load    `json:"load"`      // at the start of the run
	// Loaded is how many CPU-bound threads ran beside the benchmarks (make bench LOAD=1: one per core); 0, a
	// quiet machine.
	Loaded  int       `json:"loaded,omitempty"`
	Rounds  []Round   `json:"rounds"`
	Summary []Summary `json:"summary"` // per benchmark, in the order they ran
}

// Machine describes where the run took place.
type Machine struct {
	CPU    string `json:"cpu"` // model name from /proc/cpuinfo
	Cores  int    `json:"cores"`
	Kernel string `json:"kernel"`
	Go     string `json:"go"`
}

// Load is how busy the machine was: the load averages and the share of CPU time that was not idle over the
// second before (/proc/stat), which, unlike the load average, does not count tasks blocked in D state.
type Load struct {
	Avg  [3]float64 `json:"avg"`
	Busy float64    `json:"busy"` // 0..1
}

// IsBusy reports whether figures taken under l are suspect: other work ran on at least half of the cores.
func (l Load) IsBusy(cores int) bool { return l.Busy >= 0.5 || l.Avg[0] >= float64(cores) }

// Round is one round: every benchmark against every server, in Order.
type Round struct {
	N       int       `json:"n"`
	Order   []string  `json:"order"` // the servers, or ways, in the order they ran: "go", "c" or "direct", "relay"
	Load    Load      `json:"load"`  // at the start of the round
	Figures []Figures `json:"figures"`
}

// Figures are the metrics one benchmark reported for one server (see dummy-fuse/bench_test.go).
type Figures struct {
	Bench       string  `json:"bench"`  // without the Benchmark prefix, e.g. "DirectIORead"
	Server      string  `json:"server"` // "go" or "c"; "direct" or "relay"
	Ops         int     `json:"ops"`
	ReadsPerSec float64 `json:"reads_per_s"`
	P50us       float64 `json:"p50_us"`
	P99us       float64 `json:"p99_us"`
	CPUus       float64 `json:"server_cpu_us_per_op"`
	Switches    float64 `json:"server_switches_per_op"`
	PeakRSSMiB  float64 `json:"peak_rss_mib"`
	// Extra holds the metrics this type has no field for (the relay's crash figures), by unit.
	Extra map[string]float64 `json:"extra,omitempty"`
}

// Summary is the medians and ranges of one benchmark over all rounds that ran it on both servers.
type Summary struct {
	Bench  string `json:"bench"`
	Rounds int    `json:"rounds"`
	// Ratio is Go reads/s over C reads/s within each round; Orders splits it by which ran first (a: go).
	Ratio    Spread `json:"ratio"`
	Orders   Orders `json:"orders"`
	GoReads  Spread `json:"go_reads_per_s"`
	CReads   Spread `json:"c_reads_per_s"`
	GoCPU    Spread `json:"go_cpu_us_per_op"`
	CCPU     Spread `json:"c_cpu_us_per_op"`
	GoSwitch Spread `json:"go_switches_per_op"`
	CSwitch  Spread `json:"c_switches_per_op"`
	GoP99    Spread `json:"go_p99_us"`
	CP99     Spread `json:"c_p99_us"`
	GoRSS    Spread `json:"go_peak_rss_mib"`
	CRSS     Spread `json:"c_peak_rss_mib"`
}

// Spread is the range and median of one figure over the rounds.
type Spread struct {
	Min    float64 `json:"min"`
	Median float64 `json:"median"`
	Max    float64 `json:"max"`
}

func spreadOf(v []float64) Spread {
	if len(v) == 0 {
		return Spread{}
	}
	s := slices.Sorted(slices.Values(v))
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Spread{Min: s[0], Median: m, Max: s[len(s)-1]}
}

// Summarize computes r.Summary from r.Rounds.
func (r *Result) Summarize() {
	r.Summary = nil
	for _, p := range pairRounds(r.Rounds, "go", "c") {
		var ratio, gr, cr, gc, cc, gs, cs, gp, cp, gm, cm []float64
		var first []string
		for i, g := range p.a {
			c := p.b[i]
			if c.ReadsPerSec == 0 {
				continue
			}
			ratio, first = append(ratio, g.ReadsPerSec/c.ReadsPerSec), append(first, p.first[i])
			gr, cr = append(gr, g.ReadsPerSec), append(cr, c.ReadsPerSec)
			gc, cc = append(gc, g.CPUus), append(cc, c.CPUus)
			gs, cs = append(gs, g.Switches), append(cs, c.Switches)
			gp, cp = append(gp, g.P99us), append(cp, c.P99us)
			gm, cm = append(gm, g.PeakRSSMiB), append(cm, c.PeakRSSMiB)
		}
		if len(ratio) == 0 {
			continue
		}
		r.Summary = append(r.Summary, Summary{
			Bench: p.bench, Rounds: len(ratio), Ratio: spreadOf(ratio), Orders: ordersOf(ratio, first, "go", "c"),
			GoReads: spreadOf(gr), CReads: spreadOf(cr), GoCPU: spreadOf(gc), CCPU: spreadOf(cc),
			GoSwitch: spreadOf(gs), CSwitch: spreadOf(cs), GoP99: spreadOf(gp), CP99: spreadOf(cp),
			GoRSS: spreadOf(gm), CRSS: spreadOf(cm),
		})
	}
}

// Orders is a ratio per round (side b over side a) split by which side ran first in its round. Measured here,
// the order moves the ratio by more than either order's own spread for some servers (the records of
// dummy-fuse/bench/results/relay and relay-write), and a median over an odd number of rounds leans towards the
// order that ran more often. Balanced, the mean of the two
// orders' medians, is what the goals are judged by (the median of all rounds when one order is missing).
type Orders struct {
	AFirst   Spread  `json:"a_first"`
	BFirst   Spread  `json:"b_first"`
	Balanced float64 `json:"balanced"`
}

// ordersOf splits ratio, whose i-th round ran first[i] first, between the rounds that ran a first and b first.
func ordersOf(ratio []float64, first []string, a, b string) Orders {
	var af, bf []float64
	for i, r := range ratio {
		switch first[i] {
		case a:
			af = append(af, r)
		case b:
			bf = append(bf, r)
		}
	}
	o := Orders{AFirst: spreadOf(af), BFirst: spreadOf(bf), Balanced: spreadOf(ratio).Median}
	if len(af) > 0 && len(bf) > 0 {
		o.Balanced = (o.AFirst.Median + o.BFirst.Median) / 2
	}
	return o
}

// cell renders o for a table: each order's median and their mean.
func (o Orders) cell() string {
	if o.AFirst.Median == 0 || o.BFirst.Median == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f / %.2f (%.2f)", o.AFirst.Median, o.BFirst.Median, o.Balanced)
}

// paired is one benchmark's figures on two sides, one entry per round that ran it on both, in round order.
type paired struct {
	bench string
	a, b  []Figures
	// first is, per pair, the side that ran first in its round ("" when the round does not say).
	first []string
}

// pairRounds pairs the figures of side a with those of side b ("go" and "c", or "direct" and "relay") by
// benchmark within each round, benchmarks in the order they first ran on both; a benchmark that ran on one
// side only in a round (the relay's ServerCrash) has no pair there.
func pairRounds(rounds []Round, a, b string) []paired {
	var out []paired
	index := map[string]int{}
	for _, rd := range rounds {
		sides := map[string]map[string]Figures{}
		var names []string
		for _, f := range rd.Figures {
			if sides[f.Bench] == nil {
				sides[f.Bench] = map[string]Figures{}
				names = append(names, f.Bench)
			}
			sides[f.Bench][f.Server] = f
		}
		for _, name := range names {
			fa, oka := sides[name][a]
			fb, okb := sides[name][b]
			if !oka || !okb {
				continue
			}
			i, ok := index[name]
			if !ok {
				i, index[name] = len(out), len(out)
				out = append(out, paired{bench: name})
			}
			first := ""
			if len(rd.Order) > 0 {
				first = rd.Order[0]
			}
			out[i].a, out[i].b, out[i].first = append(out[i].a, fa), append(out[i].b, fb), append(out[i].first, first)
		}
	}
	return out
}

// ParseFigures reads the output of `go test -bench` (dummy-fuse/bench_test.go, servers named as in
// BENCH_SERVERS) and returns one Figures per result line; other lines are ignored.
//
//	BenchmarkDirectIORead/go-2  40000  25000 ns/op  14.7 p50-µs  130 p99-µs  6.1 peak-RSS-MiB  40353 reads/s  17 server-cpu-µs/op  1.1 server-switches/op
func ParseFigures(out io.Reader) ([]Figures, error) {
	var figs []Figures
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 || !strings.HasPrefix(fields[0], "Benchmark") || len(fields)%2 != 0 {
			continue
		}
		// The server is the last element of the name: BenchmarkDirectIORead/go, BenchmarkRelay/gcsfuse/CachedRead/relay.
		full := strings.TrimPrefix(fields[0], "Benchmark")
		i := strings.LastIndexByte(full, '/')
		if i < 0 {
			continue
		}
		name, server := full[:i], full[i+1:]
		if i := strings.LastIndexByte(server, '-'); i > 0 {
			server = server[:i] // the GOMAXPROCS suffix
		}
		f := Figures{Bench: name, Server: server}
		var err error
		if f.Ops, err = strconv.Atoi(fields[1]); err != nil {
			return nil, fmt.Errorf("%q: iterations: %w", sc.Text(), err)
		}
		for i := 2; i < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				return nil, fmt.Errorf("%q: %s: %w", sc.Text(), fields[i+1], err)
			}
			switch fields[i+1] {
			case "reads/s":
				f.ReadsPerSec = v
			case "p50-µs":
				f.P50us = v
			case "p99-µs":
				f.P99us = v
			case "server-cpu-µs/op":
				f.CPUus = v
			case "server-switches/op":
				f.Switches = v
			case "peak-RSS-MiB":
				f.PeakRSSMiB = v
			case "ns/op":
			default:
				if f.Extra == nil {
					f.Extra = map[string]float64{}
				}
				f.Extra[fields[i+1]] = v
			}
		}
		figs = append(figs, f)
	}
	return figs, sc.Err()
}

// Write writes r as indented JSON to dir/<date>-<commit>.json and returns the path.
func (r *Result) Write(dir string) (string, error) { return writeRecord(dir, r.Date, r.Commit, r) }

// writeRecord writes v as indented JSON to dir/<date>-<commit>.json, date in RFC 3339, and returns the path.
func writeRecord(dir, date, commit string, v any) (string, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return "", err
	}
	date = strings.NewReplacer(":", "", "-", "").Replace(date)
	if len(date) > 13 {
		date = date[:13] // 20261126T1203
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, date+"-"+commit+".json")
	if err := atomicfile.Write(path, append(b, '\n'), 0o644); err != nil {
		return "", err
	}
	return path, nil
}

// Newest returns the path and content of the newest result file in dir (names sort by date).
func Newest(dir string) (string, *Result, error) {
	var r Result
	path, err := newestRecord(dir, &r)
	return path, &r, err
}

// newestRecord decodes the newest record in dir (names sort by date) into v and returns its path.
func newestRecord(dir string, v any) (string, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return "", err
	}
	if len(paths) == 0 {
		return "", fmt.Errorf("no result file in %s", dir)
	}
	slices.Sort(paths)
	path := paths[len(paths)-1]
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return path, nil
}
