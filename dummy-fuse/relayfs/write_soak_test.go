package relayfs_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/dummy-fuse-workload/workload"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/bench"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// TestRelayWriteSoak kills each writable real server (gcsfuse, s3fs) DFC_SOAK_KILLS times behind the writable
// relay (SIGKILL, detach, start again) under dummy-fuse-workload --write; every tenth kill finds the writer
// waiting inside the stopped server. It asserts what must hold whatever the timing: not one failed write,
// fsync, close or rename, every acknowledged byte in the storage (read without any mount), one recovery per
// kill, and nothing left over (the relay's descriptors, mounts, journals, processes). It logs, and with
// DFC_SOAK_OUT records, the stall per kill.
func TestRelayWriteSoak(t *testing.T) {
	testenv.Soak(t, "a soak of server kills under a writer through the writable relay", "make soak-relay-write",
		[]string{fuseserver.Gcsfuse, s3fs}, writeSoakServer,
		func(run bench.SoakRun, servers []bench.WriteSoakServer) testenv.SoakRecord {
			return &bench.WriteSoakResult{SoakRun: run, Servers: servers}
		})
}

func writeSoakServer(t *testing.T, name string, kills int) bench.WriteSoakServer {
	lab := testenv.NewLab(t)
	b := newBackend(t, lab, name)
	b.start()
	spill := t.TempDir()
	r := startRelay(t, lab, b.dir, "--relay-writable", "--spill-dir", spill)
	w := testenv.StartWriter(t, lab, testenv.Build(t, "dummy-fuse-workload"), filepath.Join(r.mnt, "train.log"))
	w.WaitFor(t, 2, workload.EventWrite, "before the kills")
	res := bench.WriteSoakServer{Server: name, Kills: kills, RelayFDsBefore: openFDs(t, r.proc.PID()), MountsBefore: soakMounts(t, b.dir, r.mnt)}
	childrenBefore := len(testenv.Children(os.Getpid())) - 1 // but the writer, which has stopped when they are counted again
	var killedAt []time.Time
	for k := range kills {
		w.WaitFor(t, 2, workload.EventWrite, "before a kill")
		if k%10 == 5 {
			b.stop() // the writer's next request waits inside the server: its kill fails it with ECONNABORTED
			testenv.Eventually(t, waitTimeout, "the writer to wait for the stopped server (its log not growing for 200 ms)", func() bool {
				n := len(w.Records(t))
				time.Sleep(200 * time.Millisecond)
				return len(w.Records(t)) == n
			})
			res.InFlight++
		}
		killedAt = append(killedAt, time.Now())
		b.kill()
		b.start()
	}
	w.WaitFor(t, 1, workload.EventCheckpoint, "after the last kill")
	recs := w.Stop(t)

	res.FailedOps = len(testenv.Failures(recs))
	for _, rec := range recs {
		switch rec.Event {
		case workload.EventWrite:
			res.Pieces++
			res.Bytes += int64(*rec.Bytes)
		case workload.EventCheckpoint:
			res.Checkpoints++
		}
	}
	if res.FailedOps > 0 {
		t.Errorf("the writer saw %d failed operations, first: %v", res.FailedOps, testenv.Failures(recs)[0])
	}
	_, err := written(t, b, recs)
	if res.Whole = err == nil; err != nil {
		t.Error(err)
	}

	res.RelayFDsAfter = openFDs(t, r.proc.PID())
	res.MountsAfter = soakMounts(t, b.dir, r.mnt)
	journals, _ := filepath.Glob(filepath.Join(spill, "*.journal"))
	res.JournalsLeft = len(journals)
	res.LeftoverProcs = len(testenv.Children(os.Getpid())) - childrenBefore
	switch {
	case res.RelayFDsAfter > res.RelayFDsBefore:
		t.Errorf("the relay holds %d descriptors after %d kills, %d before", res.RelayFDsAfter, kills, res.RelayFDsBefore)
	case res.MountsAfter != res.MountsBefore:
		t.Errorf("%d mounts under the relay's and the server's directories after the kills, %d before", res.MountsAfter, res.MountsBefore)
	case res.JournalsLeft != 0:
		t.Errorf("journals left after the writer closed its files: %v", journals)
	case res.LeftoverProcs != 0:
		t.Errorf("the test has %d more child processes after the kills than before: %v", res.LeftoverProcs, testenv.Children(os.Getpid()))
	}
	if got := strings.Count(r.proc.Log(), "serves again"); got != kills {
		t.Errorf("the relay logged %d backends that came back, want %d; its log:\n%s", got, kills, r.proc.Tail())
	}
	res.Replays = strings.Count(r.proc.Log(), "had not made durable")
	res.Stall, res.Start = bench.PercentilesOf(writerStalls(recs, killedAt)), bench.PercentilesOf(b.startKill)
	t.Logf("%s: %d kills (%d with a request inside): %d pieces (%d bytes), %d checkpoints, %d failed; storage whole %t; %d replays; stall per kill p50 %.0f ms, p99 %.0f ms, max %.0f ms; kill → serving p50 %.0f ms, max %.0f ms; relay fds %d → %d, mounts %d → %d, journals left %d, leftover processes %d",
		name, kills, res.InFlight, res.Pieces, res.Bytes, res.Checkpoints, res.FailedOps, res.Whole, res.Replays, res.Stall.P50, res.Stall.P99, res.Stall.Max,
		res.Start.P50, res.Start.Max, res.RelayFDsBefore, res.RelayFDsAfter, res.MountsBefore, res.MountsAfter, res.JournalsLeft, res.LeftoverProcs)
	return res
}

// writerStalls is, per kill, the gap between the writer's last record before the kill and its first after
// (the writer logs a piece every 20 ms when nothing holds it up).
func writerStalls(recs []workload.Record, killedAt []time.Time) []time.Duration {
	var out []time.Duration
	for _, at := range killedAt {
		var before, after time.Time
		for _, r := range recs {
			if r.Event == workload.EventWriteStart {
				continue // the start of a write is not progress
			}
			if r.Time.Before(at) {
				before = r.Time
			} else if after.IsZero() {
				after = r.Time
			}
		}
		if !before.IsZero() && !after.IsZero() {
			out = append(out, after.Sub(before))
		}
	}
	return out
}
