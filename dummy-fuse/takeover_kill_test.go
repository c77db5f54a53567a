package main

import (
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/dummy-fuse-workload/workload"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// TestTakeoverKilledAtStart kills DFC_TAKEOVER_KILLS successors (opt-in: it takes a while), half at random
// moments of their start and half right after they took the connection over (when the resent read is being
// read), while a read waits on the connection (every read takes 1 s inside a server, so none is answered
// meanwhile), as a crash loop of FUSE servers does. No read may fail: a successor's death must leave the
// request for the next one. A last successor then serves, and the reader reads again.
func TestTakeoverKilledAtStart(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("DFC_TAKEOVER_KILLS"))
	if n <= 0 {
		t.Skip("opt-in: DFC_TAKEOVER_KILLS=N kills N successors during their start")
	}
	const maxDelay = 20 * time.Millisecond
	testenv.RequireFUSE(t)
	lab := testenv.NewLab(t)
	bin := testenv.Build(t, "dummy-fuse")
	wlBin := testenv.Build(t, "dummy-fuse-workload")
	mnt := lab.Dir()
	dev := mountDevFuse(t, mnt)
	t.Cleanup(func() { dev.Close() }) // the Lab's cleanup, later, aborts the connection and stops the servers
	record := filepath.Join(t.TempDir(), "init")
	first := exec.Command(bin, "--direct-io", "--save-init", record, "/dev/fd/3")
	first.ExtraFiles = []*os.File{dev}
	a := start(t, lab, first)
	poll(t, "the first server to save the handover record", func() bool {
		_, err := os.Stat(record)
		return err == nil
	})
	w := start(t, lab, exec.Command(wlBin, "--file", filepath.Join(mnt, fileName), "--log-format", "json", "--read-interval", "1ms", "--keep-open=true"))
	poll(t, "a first good read", func() bool { return find(readLog(t, w.out), workload.EventRead, "") != nil })
	if err := syscall.Kill(first.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	a.wait()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 27))
	for i := 0; i < n; i++ {
		cmd := exec.Command(bin, "--direct-io", "--read-latency", "1s", "--takeover", record, "/dev/fd/3")
		cmd.ExtraFiles = []*os.File{dev}
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		var stderr testenv.SyncBuffer
		cmd.Env = append(os.Environ(), "GOMAXPROCS=1") // as the keeper runs its servers
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Half of them at a random moment of the start, half right after they took over (the resent read
		// is being read then), as a crash loop kills them.
		if i%2 == 0 {
			time.Sleep(time.Duration(rng.Int64N(int64(maxDelay))))
		} else {
			for deadline := time.Now().Add(maxDelay); time.Now().Before(deadline) && !strings.Contains(stderr.String(), "took over"); {
				time.Sleep(20 * time.Microsecond)
			}
			time.Sleep(time.Duration(rng.Int64N(int64(500 * time.Microsecond))))
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	failed := 0
	for _, r := range readLog(t, w.out) {
		if r.Event == workload.EventReadError {
			failed++
			if failed == 1 {
				t.Errorf("a read failed while successors were killed: %s %s", *r.Errno, r.Error)
			}
		}
	}
	last := exec.Command(bin, "--direct-io", "--takeover", record, "/dev/fd/3")
	last.ExtraFiles = []*os.File{dev}
	start(t, lab, last)
	good := len(readLog(t, w.out))
	poll(t, "reads again after the last takeover", func() bool { return len(readLog(t, w.out)) >= good+3 })
	t.Logf("%d successors killed 0–%s after their start: %d reads failed", n, maxDelay, failed)
}
