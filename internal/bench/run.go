package bench

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Run describes a run of the benchmarks: the compiled test binary of dummy-fuse (go test -c), the two servers,
// and how many rounds of which benchmarks.
type Run struct {
	TestBinary string // compiled dummy-fuse test binary
	Dir        string // where it runs (the dummy-fuse package directory)
	GoServer   string // the dummy-fuse binary
	CServer    string // the C reference
	Libfuse    string
	Commit     string
	Rounds     int
	Benchtime  string
	Bench      string // -test.bench regexp
	// Loaded runs a CPU-bound thread per core beside the benchmarks (Spin), measured after the load at the start.
	Loaded bool
	Log    io.Writer
}

// Do runs the rounds and returns the result, summarized.
func (rn Run) Do() (*Result, error) {
	r := &Result{
		Commit: rn.Commit, Date: time.Now().UTC().Format(time.RFC3339), Machine: ThisMachine(),
		Libfuse: rn.Libfuse, Benchtime: rn.Benchtime,
	}
	m := r.Machine
	var err error
	if r.Load, err = MeasureLoad(time.Second); err != nil {
		return nil, err
	}
	fmt.Fprintf(rn.Log, "dummy-fuse %s vs C libfuse %s; %d rounds x %s\nmachine: %s, %d cores, Linux %s, %s\nat the start: %s\n",
		r.Commit, r.Libfuse, rn.Rounds, rn.Benchtime, m.CPU, m.Cores, m.Kernel, m.Go, r.Load)
	if r.Load.IsBusy(m.Cores) {
		fmt.Fprintf(rn.Log, "WARNING: the machine is busy (other work on half of the cores or more): absolute figures will drift, only the ratio within a round holds\n")
	}
	if rn.Loaded {
		r.Loaded = m.Cores
		spin := Spin(r.Loaded)
		defer spin.Stop()
		fmt.Fprintf(rn.Log, "loaded: %d CPU-bound threads beside the benchmarks, one per core\n", r.Loaded)
	}
	for n := 1; n <= rn.Rounds; n++ {
		order := []string{"go", "c"}
		if n%2 == 0 {
			order = []string{"c", "go"}
		}
		rd := Round{N: n, Order: order}
		if rd.Load, err = MeasureLoad(time.Second); err != nil {
			return nil, err
		}
		fmt.Fprintf(rn.Log, "round %d (%s first; %s)\n", n, order[0], rd.Load)
		if rd.Figures, err = rn.round(order); err != nil {
			return nil, fmt.Errorf("round %d: %w", n, err)
		}
		r.Rounds = append(r.Rounds, rd)
		printRound(rn.Log, rd)
	}
	r.Summarize()
	if len(r.Summary) == 0 {
		return nil, fmt.Errorf("no benchmark ran on both servers (not root, or no /dev/fuse?)")
	}
	return r, nil
}

// round runs the benchmarks once against the servers in order.
func (rn Run) round(order []string) ([]Figures, error) {
	bins := map[string]string{"go": rn.GoServer, "c": rn.CServer}
	var spec []string
	for _, s := range order {
		spec = append(spec, s+"="+bins[s])
	}
	return runBenchmarks(rn.TestBinary, rn.Dir, rn.Log, "BENCH_SERVERS="+strings.Join(spec, ","), rn.Bench, rn.Benchtime)
}

// runBenchmarks runs the benchmarks bench of a compiled test binary in dir, with env added to the
// environment, and returns their figures; the servers' own messages go to log.
func runBenchmarks(binary, dir string, log io.Writer, env, bench, benchtime string) ([]Figures, error) {
	cmd := exec.Command(binary, "-test.run", "^$", "-test.bench", bench, "-test.benchtime", benchtime)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = log // kept apart from the result lines
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s: %w\n%s", strings.Join(cmd.Args, " "), err, out.String())
	}
	// What the benchmarks logged (b.Logf: "--- BENCH: name" and its indented lines) goes to log too.
	for line := range strings.Lines(out.String()) {
		if strings.HasPrefix(line, "--- ") || strings.HasPrefix(line, "    ") {
			fmt.Fprint(log, line)
		}
	}
	return ParseFigures(&out)
}

func printRound(w io.Writer, rd Round) {
	by := map[string]map[string]Figures{}
	var names []string
	for _, f := range rd.Figures {
		if by[f.Bench] == nil {
			by[f.Bench] = map[string]Figures{}
			names = append(names, f.Bench)
		}
		by[f.Bench][f.Server] = f
	}
	for _, b := range names {
		g, c := by[b]["go"], by[b]["c"]
		ratio := 0.0
		if c.ReadsPerSec > 0 {
			ratio = g.ReadsPerSec / c.ReadsPerSec
		}
		fmt.Fprintf(w, "  %-22s Go/C %5.2f  reads/s %8.0f %8.0f  cpu/op %6.1f %6.1f µs  switches/op %5.2f %5.2f  p99 %7.0f %7.0f µs  RSS %4.1f %4.1f MiB\n",
			b, ratio, g.ReadsPerSec, c.ReadsPerSec, g.CPUus, c.CPUus, g.Switches, c.Switches, g.P99us, c.P99us, g.PeakRSSMiB, c.PeakRSSMiB)
	}
}

// PrintSummary prints the medians and ranges of r.
func PrintSummary(w io.Writer, r *Result) {
	for _, s := range r.Summary {
		fmt.Fprintf(w, "%-22s Go/C %.2f (%.2f–%.2f over %d rounds); CPU/op Go %.1f µs, C %.1f µs; switches/op Go %.2f, C %.2f; peak RSS Go %.1f MiB, C %.1f MiB\n",
			s.Bench, s.Ratio.Median, s.Ratio.Min, s.Ratio.Max, s.Rounds, s.GoCPU.Median, s.CCPU.Median,
			s.GoSwitch.Median, s.CSwitch.Median, s.GoRSS.Median, s.CRSS.Median)
	}
}
