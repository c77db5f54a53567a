package bench

import (
	"fmt"
	"strings"
)

// WriteSoakResult is one run of `make soak-relay-write` (TestRelayWriteSoak in
// dummy-fuse/relayfs/write_soak_test.go): many kills of a real server behind the writable relay under a
// writer, per real server.
type WriteSoakResult struct {
	SoakRun
	Servers []WriteSoakServer `json:"servers"`
}

// WriteSoakServer is what the kills of one server cost the writer and left behind.
type WriteSoakServer struct {
	Server string `json:"server"`
	Kills  int    `json:"kills"`
	// InFlight is how many of the kills found the writer waiting inside the (stopped) server.
	InFlight int `json:"kills_with_a_request_inside"`
	// What the writer was told it wrote, and how much of it failed.
	Pieces      int   `json:"pieces"`
	Bytes       int64 `json:"bytes"`
	Checkpoints int   `json:"checkpoints"`
	FailedOps   int   `json:"failed_operations"`
	// Whole: the storage, read without any mount, held every acknowledged byte (workload.CheckWritten).
	Whole bool `json:"storage_whole"`
	// Replays is how many times the relay replayed writes a dead server had not made durable.
	Replays int `json:"replays"`
	// Stall is, per kill, the gap in the writer's log between its last record before the kill and its first
	// after.
	Stall Percentiles `json:"stall_ms"`
	// Start is from each kill to the next server serving (the test's own probe).
	Start Percentiles `json:"start_ms"`
	// Leftovers: the relay's open descriptors, the mounts under the test's directories, the journals in the
	// spill directory once the writer closed its files, and processes the test started that still ran.
	RelayFDsBefore int `json:"relay_fds_before"`
	RelayFDsAfter  int `json:"relay_fds_after"`
	MountsBefore   int `json:"mounts_before"`
	MountsAfter    int `json:"mounts_after"`
	JournalsLeft   int `json:"journals_left"`
	LeftoverProcs  int `json:"leftover_processes"`
}

// Write writes r to dir/<date>-<commit>.json and returns the path.
func (r *WriteSoakResult) Write(dir string) (string, error) {
	return writeRecord(dir, r.Date, r.Commit, r)
}

// WriteSoakTable renders the generated write soak section of dummy-fuse/README.md for r, read from file.
func WriteSoakTable(r *WriteSoakResult, file string) string {
	var b strings.Builder
	m := r.Machine
	fmt.Fprintf(&b, "From `bench/results/soak-relay-write/%s`: dummy-fuse %s, %s; %s, %d cores, Linux %s, %s; load average %.2f, %.0f %% of the CPU busy at the start.\n\n",
		baseName(file), r.Commit, r.Date, m.CPU, m.Cores, m.Kernel, m.Go, r.Load.Avg[0], 100*r.Load.Busy)
	b.WriteString("| server | kills (with a request inside) | pieces / bytes / checkpoints acknowledged | failed operations | storage holds every acknowledged byte | replays | stall p50 / p99 / max | kill → serving p50 / max | relay fds before → after | mounts before → after | journals left | leftover processes |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range r.Servers {
		whole := "no"
		if s.Whole {
			whole = "yes"
		}
		fmt.Fprintf(&b, "| %s | %d (%d) | %d / %d / %d | %d | %s | %d | %.0f / %.0f / %.0f ms | %.0f / %.0f ms | %d → %d | %d → %d | %d | %d |\n",
			s.Server, s.Kills, s.InFlight, s.Pieces, s.Bytes, s.Checkpoints, s.FailedOps, whole, s.Replays,
			s.Stall.P50, s.Stall.P99, s.Stall.Max, s.Start.P50, s.Start.Max, s.RelayFDsBefore, s.RelayFDsAfter,
			s.MountsBefore, s.MountsAfter, s.JournalsLeft, s.LeftoverProcs)
	}
	return b.String()
}
