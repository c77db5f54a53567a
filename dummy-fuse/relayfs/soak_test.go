package relayfs_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/bench"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// TestRelaySoak kills each real server DFC_SOAK_KILLS times through the relay (SIGKILL, detach, start again)
// under three readers: one keeping an O_DIRECT descriptor, one opening the file for every read, one calling
// stat in a loop, each checking every answer. It asserts what must hold whatever the timing: not one failed
// or wrong read, one recovery in the relay's log per kill, and nothing left over: the relay's descriptors, the
// mounts under the test's directories and the test's child processes are what they were before the kills.
// It logs, and with DFC_SOAK_OUT records, the stall per kill and reader.
func TestRelaySoak(t *testing.T) {
	testenv.Soak(t, "a soak of server kills through the relay", "make soak-relay", []string{fuseserver.Gcsfuse, fuseserver.Squashfuse}, soakServer,
		func(run bench.SoakRun, servers []bench.SoakServer) testenv.SoakRecord {
			return &bench.SoakResult{SoakRun: run, Servers: servers}
		})
}

// soakServer runs the soak against the server called name and returns its figures.
func soakServer(t *testing.T, name string, kills int) bench.SoakServer {
	lab := testenv.NewLab(t)
	b := newBackend(t, lab, name)
	b.start()
	r := startRelay(t, lab, b.dir)
	path := filepath.Join(r.mnt, fuseserver.ServedFile)
	stop := make(chan struct{})
	readers := []*reader{startReader(t, path, true, stop), startReader(t, path, false, stop), startStatLoop(path, stop)}
	defer func() {
		select {
		case <-stop:
		default:
			stopReaders(t, stop, readers...)
		}
	}()
	for _, rd := range readers {
		testenv.Eventually(t, waitTimeout, "a first read by the "+rd.name, func() bool { return rd.goodReads() >= 1 })
	}
	res := bench.SoakServer{Server: name, Kills: kills, RelayFDsBefore: openFDs(t, r.proc.PID()), MountsBefore: soakMounts(t, b.dir, r.mnt)}
	childrenBefore := len(testenv.Children(os.Getpid()))
	killedAt := killAndRestart(t, b, kills, readers...)
	stopReaders(t, stop, readers...)

	// Leftovers. The relay closes what it held on a dead backend when it next finds it dead, so its count may
	// take a moment to come down.
	deadline := time.Now().Add(waitTimeout)
	for res.RelayFDsAfter = openFDs(t, r.proc.PID()); res.RelayFDsAfter > res.RelayFDsBefore && time.Now().Before(deadline); res.RelayFDsAfter = openFDs(t, r.proc.PID()) {
		time.Sleep(100 * time.Millisecond)
	}
	res.MountsAfter = soakMounts(t, b.dir, r.mnt)
	res.LeftoverProcs = len(testenv.Children(os.Getpid())) - childrenBefore
	if res.RelayFDsAfter > res.RelayFDsBefore {
		t.Errorf("the relay holds %d descriptors after %d kills, %d before", res.RelayFDsAfter, kills, res.RelayFDsBefore)
	}
	if res.MountsAfter != res.MountsBefore {
		t.Errorf("%d mounts under the relay's and the server's directories after the kills, %d before", res.MountsAfter, res.MountsBefore)
	}
	if res.LeftoverProcs != 0 {
		t.Errorf("the test has %d more child processes after the kills than before (killed servers not reaped?): %v", res.LeftoverProcs, testenv.Children(os.Getpid()))
	}
	if got := strings.Count(r.proc.Log(), "serves again"); got != kills {
		t.Errorf("the relay logged %d backends that came back, want %d; its log:\n%s", got, kills, r.proc.Tail())
	}

	var stalls []time.Duration
	for _, rd := range readers {
		res.Readers = append(res.Readers, rd.name)
		res.GoodReads += len(rd.ok)
		res.FailedReads += len(rd.errs)
		if len(rd.errs) > 0 {
			t.Errorf("the %s saw %d failed reads (of %d good), first: %v", rd.name, len(rd.errs), len(rd.ok), rd.errs[:min(len(rd.errs), 5)])
		}
		for _, at := range killedAt {
			if s := rd.stall(at); s >= 0 {
				stalls = append(stalls, s)
			}
		}
	}
	res.Stall, res.Start = bench.PercentilesOf(stalls), bench.PercentilesOf(b.startKill)
	t.Logf("%s: %d kills, readers %s: %d good reads, %d failed; stall per kill and reader p50 %.0f ms, p99 %.0f ms, max %.0f ms; kill → serving p50 %.0f ms, max %.0f ms; relay fds %d → %d, mounts %d → %d, leftover processes %d",
		name, kills, strings.Join(res.Readers, ", "), res.GoodReads, res.FailedReads, res.Stall.P50, res.Stall.P99, res.Stall.Max,
		res.Start.P50, res.Start.Max, res.RelayFDsBefore, res.RelayFDsAfter, res.MountsBefore, res.MountsAfter, res.LeftoverProcs)
	return res
}

// startStatLoop calls stat on path every 5 ms and checks that it is the served file.
func startStatLoop(path string, stop <-chan struct{}) *reader {
	r := &reader{name: "stat loop", done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			fi, err := os.Stat(path)
			r.mu.Lock()
			switch {
			case err != nil:
				r.errs = append(r.errs, fmt.Sprintf("%s: %v", time.Now().Format("15:04:05.000"), err))
			case !fi.Mode().IsRegular() || fi.Size() != int64(len(fuseserver.Content)):
				r.errs = append(r.errs, fmt.Sprintf("%s: %s, %d bytes", time.Now().Format("15:04:05.000"), fi.Mode(), fi.Size()))
			default:
				r.ok = append(r.ok, time.Now())
			}
			r.mu.Unlock()
		}
	}()
	return r
}

// soakMounts counts the mounts on dirs and below them.
func soakMounts(t *testing.T, dirs ...string) int {
	t.Helper()
	n := 0
	for _, d := range dirs {
		ms, err := mounts.Under(d)
		if err != nil {
			t.Fatal(err)
		}
		n += len(ms)
	}
	return n
}
