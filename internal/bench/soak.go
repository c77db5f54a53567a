package bench

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The soaks' settings, from the environment (hack/soak-relay.sh: make soak-relay, make soak-relay-keeper).
const (
	SoakKillsEnv  = "DFC_SOAK_KILLS"  // kills per server; a soak is skipped without it
	SoakOutEnv    = "DFC_SOAK_OUT"    // directory for the record; none when empty
	SoakCommitEnv = "DFC_SOAK_COMMIT" // the commit the record names
)

// SoakKills is the number of kills DFC_SOAK_KILLS asks for: 0 when unset.
func SoakKills() (int, error) {
	s := os.Getenv(SoakKillsEnv)
	if s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%s=%q: want a positive number", SoakKillsEnv, s)
	}
	return n, nil
}

// SoakRun is what every soak record says of its run: the commit (DFC_SOAK_COMMIT), when, where, under what load.
type SoakRun struct {
	Commit  string  `json:"commit"`
	Date    string  `json:"date"`
	Machine Machine `json:"machine"`
	Load    Load    `json:"load"`
}

// StartSoak describes a soak run starting now, measuring the load for a second.
func StartSoak() (SoakRun, error) {
	r := SoakRun{Commit: os.Getenv(SoakCommitEnv), Date: time.Now().UTC().Format(time.RFC3339), Machine: ThisMachine()}
	if r.Commit == "" {
		r.Commit = "unknown"
	}
	var err error
	r.Load, err = MeasureLoad(time.Second)
	return r, err
}

// SoakResult is one run of `make soak-relay` (TestRelaySoak in dummy-fuse/relayfs/soak_test.go): many server
// kills through the relay under several readers, per real server.
type SoakResult struct {
	SoakRun
	Servers []SoakServer `json:"servers"`
}

// SoakServer is what the kills of one server cost and left behind.
type SoakServer struct {
	Server      string   `json:"server"`
	Kills       int      `json:"kills"`
	Readers     []string `json:"readers"`
	GoodReads   int      `json:"good_reads"`
	FailedReads int      `json:"failed_reads"`
	// Stall is, per kill and reader, the gap between its last good read before the kill and its first after.
	Stall Percentiles `json:"stall_ms"`
	// Start is from each kill to the next server serving (the test's own probe, every 10 ms).
	Start Percentiles `json:"start_ms"`
	// Leftovers: the relay's open descriptors, the mounts under the test's directories, and processes the
	// test started that still ran (or were not reaped) beyond the relay and the current server.
	RelayFDsBefore int `json:"relay_fds_before"`
	RelayFDsAfter  int `json:"relay_fds_after"`
	MountsBefore   int `json:"mounts_before"`
	MountsAfter    int `json:"mounts_after"`
	LeftoverProcs  int `json:"leftover_processes"`
}

// Percentiles of a duration, in ms.
type Percentiles struct {
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// PercentilesOf returns the percentiles of ds (sorted or not); zero for none.
func PercentilesOf(ds []time.Duration) Percentiles {
	if len(ds) == 0 {
		return Percentiles{}
	}
	v := make([]float64, len(ds))
	for i, d := range ds {
		v[i] = float64(d.Microseconds()) / 1e3
	}
	s := slices.Sorted(slices.Values(v))
	return Percentiles{P50: spreadOf(v).Median, P99: s[min(len(s)-1, int(0.99*float64(len(s))))], Max: s[len(s)-1]}
}

// Write writes r to dir/<date>-<commit>.json and returns the path.
func (r *SoakResult) Write(dir string) (string, error) { return writeRecord(dir, r.Date, r.Commit, r) }

// SoakTable renders the generated soak section of dummy-fuse/README.md for r, read from the file named file.
func SoakTable(r *SoakResult, file string) string {
	var b strings.Builder
	m := r.Machine
	fmt.Fprintf(&b, "From `bench/results/soak/%s`: dummy-fuse %s, %s; %s, %d cores, Linux %s, %s; load average %.2f, %.0f %% of the CPU busy at the start.\n\n",
		baseName(file), r.Commit, r.Date, m.CPU, m.Cores, m.Kernel, m.Go, r.Load.Avg[0], 100*r.Load.Busy)
	b.WriteString("| server | kills | readers | good reads | failed reads | stall p50 / p99 / max | kill → serving p50 / max | relay fds before → after | mounts before → after | leftover processes |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range r.Servers {
		fmt.Fprintf(&b, "| %s | %d | %s | %d | %d | %.0f / %.0f / %.0f ms | %.0f / %.0f ms | %d → %d | %d → %d | %d |\n",
			s.Server, s.Kills, strings.Join(s.Readers, ", "), s.GoodReads, s.FailedReads, s.Stall.P50, s.Stall.P99, s.Stall.Max,
			s.Start.P50, s.Start.Max, s.RelayFDsBefore, s.RelayFDsAfter, s.MountsBefore, s.MountsAfter, s.LeftoverProcs)
	}
	return b.String()
}
