package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// The benchmarks measure dummy-fuse as users run it: the binary (DUMMY_FUSE_BIN, as built by `make build`;
// else built for the test) serving a real mount in a separate process. They report numbers, they assert
// none: reads/s, p50/p99 latency of one operation in µs, and the server's peak RSS (VmHWM) after the load.
//
//	go test -run '^$' -bench . ./dummy-fuse/   (hack/bench.sh runs it several times and summarises)

func benchBinary(b *testing.B) string {
	b.Helper()
	if bin := os.Getenv("DUMMY_FUSE_BIN"); bin != "" {
		return bin
	}
	return testenv.Build(b, "dummy-fuse")
}

// benchServer starts the dummy-fuse binary on a new mount and returns its PID and the mount point; both
// go away when the benchmark ends.
func benchServer(b *testing.B, args ...string) (int, string) {
	b.Helper()
	testenv.RequireFUSE(b)
	bin := benchBinary(b)
	mnt := b.TempDir()
	b.Cleanup(func() {
		if mountType(b, mnt) != "" {
			_ = unix.Unmount(mnt, unix.MNT_DETACH)
		}
	})
	cmd := exec.Command(bin, append(args, mnt)...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(waitTimeout):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	poll(b, "dummy-fuse to mount "+mnt, func() bool { return mountType(b, mnt) == "fuse.dummy-fuse" })
	return cmd.Process.Pid, mnt
}

// report adds the metrics of a finished run of b.N operations that took lat each, during which the server
// used cpu.
func report(b *testing.B, elapsed time.Duration, lat []time.Duration, pid int, cpu time.Duration) {
	b.Helper()
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Nanoseconds()) / 1e3
	}
	b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "reads/s")
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
	b.ReportMetric(float64(vmHWM(b, pid))/1024, "peak-RSS-MiB")
	// CPU per operation hardly depends on what else runs on the machine, unlike reads/s.
	b.ReportMetric(float64(cpu.Nanoseconds())/1e3/float64(len(lat)), "server-cpu-µs/op")
}

// cpuTime returns the CPU time all threads of process pid have run so far (schedstat: nanoseconds).
func cpuTime(b *testing.B, pid int) time.Duration {
	b.Helper()
	tasks, err := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/schedstat")
	if err != nil || len(tasks) == 0 {
		b.Fatalf("no schedstat for pid %d: %v", pid, err)
	}
	var total time.Duration
	for _, f := range tasks {
		data, err := os.ReadFile(f)
		if err != nil {
			continue // thread exited
		}
		ns, err := strconv.ParseInt(strings.Fields(string(data))[0], 10, 64)
		if err != nil {
			b.Fatalf("%s: %v", f, err)
		}
		total += time.Duration(ns)
	}
	return total
}

// vmHWM returns the peak resident set size of process pid in KiB.
func vmHWM(b *testing.B, pid int) int {
	b.Helper()
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			if err != nil {
				b.Fatal(err)
			}
			return kb
		}
	}
	b.Fatal("no VmHWM in /proc/PID/status")
	return 0
}

// BenchmarkDirectIORead re-reads an open file with pread; with --direct-io every read is a FUSE READ
// request answered by the server.
func BenchmarkDirectIORead(b *testing.B) {
	pid, mnt := benchServer(b, "--direct-io")
	f, err := os.Open(filepath.Join(mnt, fileName))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	buf := make([]byte, 4096)
	lat := make([]time.Duration, b.N)
	cpu0 := cpuTime(b, pid)
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		t := time.Now()
		if n, err := unix.Pread(fd, buf, 0); err != nil || n != 13 {
			b.Fatalf("pread = %d, %v", n, err)
		}
		lat[i] = time.Since(t)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	report(b, elapsed, lat, pid, cpuTime(b, pid)-cpu0)
}

// BenchmarkOpenReadClose opens, reads and closes the file each time in page-cache mode: one FUSE OPEN per
// operation (plus an asynchronous RELEASE); the read itself comes from the page cache.
func BenchmarkOpenReadClose(b *testing.B) {
	pid, mnt := benchServer(b)
	path := filepath.Join(mnt, fileName)
	buf := make([]byte, 4096)
	lat := make([]time.Duration, b.N)
	cpu0 := cpuTime(b, pid)
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		t := time.Now()
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			b.Fatal(err)
		}
		if n, err := unix.Pread(fd, buf, 0); err != nil || n != 13 {
			b.Fatalf("pread = %d, %v", n, err)
		}
		if err := unix.Close(fd); err != nil {
			b.Fatal(err)
		}
		lat[i] = time.Since(t)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	report(b, elapsed, lat, pid, cpuTime(b, pid)-cpu0)
}
