package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/bench"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// The benchmarks measure dummy-fuse as users run it: the binary serving a real mount in a separate process,
// side by side with a C reference of the same filesystem (dummy-fuse/bench/cref, libfuse3). They report
// numbers, they assert none: reads/s, p50/p99 latency of one operation in µs, the server's CPU per operation
// and its peak RSS (VmHWM) after the load.
//
// BENCH_SERVERS lists the servers, in the order each benchmark runs them: "go=PATH,c=PATH" (hack/bench.sh
// builds both and swaps the order every round). Without it only dummy-fuse runs, built for the test:
//
//	go test -run '^$' -bench . ./dummy-fuse/

// benchServer is a FUSE server program under test.
type benchServer struct {
	name, bin string
}

// args returns the command line that serves mnt with the given read mode and latency.
func (s benchServer) args(mnt string, direct bool, latency time.Duration) []string {
	var a []string
	switch s.name {
	case "c":
		// -f: foreground; libfuse's multi-threaded loop, with as many threads as dummy-fuse's workers.
		a = []string{"-f", "-o", "ro,allow_other,max_threads=16,fsname=dummy-fuse-c,subtype=dummy-fuse"}
		if direct {
			a = append(a, "--direct-io")
		}
		if latency > 0 {
			a = append(a, fmt.Sprintf("--read-latency-us=%d", latency.Microseconds()))
		}
	default:
		if direct {
			a = append(a, "--direct-io")
		}
		if latency > 0 {
			a = append(a, "--read-latency", latency.String())
		}
	}
	return append(a, mnt)
}

func benchServers(b *testing.B) []benchServer {
	b.Helper()
	spec := os.Getenv("BENCH_SERVERS")
	if spec == "" {
		return []benchServer{{"go", testenv.Build(b, "dummy-fuse")}}
	}
	var servers []benchServer
	for _, kv := range strings.Split(spec, ",") {
		name, bin, ok := strings.Cut(kv, "=")
		if !ok || (name != "go" && name != "c") || bin == "" {
			b.Fatalf("BENCH_SERVERS: %q is not go=PATH or c=PATH", kv)
		}
		servers = append(servers, benchServer{name, bin})
	}
	return servers
}

// eachServer runs body as a sub-benchmark per server.
func eachServer(b *testing.B, body func(b *testing.B, s benchServer)) {
	for _, s := range benchServers(b) {
		b.Run(s.name, func(b *testing.B) { body(b, s) })
	}
}

// serve starts server s on a new mount and returns its PID and the mount point; both go away when the
// benchmark ends.
func (s benchServer) serve(b *testing.B, direct bool, latency time.Duration) (int, string) {
	b.Helper()
	testenv.RequireFUSE(b)
	mnt := b.TempDir()
	b.Cleanup(func() {
		for mountType(b, mnt) != "" {
			if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil {
				b.Errorf("unmount %s: %v", mnt, err)
				return
			}
		}
	})
	cmd := exec.Command(s.bin, s.args(mnt, direct, latency)...)
	if s.name == "go" {
		cmd.Stderr = os.Stderr // libfuse 3.14 warns about its own default max_idle_threads: not shown
	}
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
	poll(b, s.name+" server to mount "+mnt, func() bool { return mountType(b, mnt) == "fuse.dummy-fuse" })
	return cmd.Process.Pid, mnt
}

// report adds the metrics of a finished run of len(lat) operations, during which the server used u.
func report(b *testing.B, elapsed time.Duration, lat []time.Duration, pid int, u bench.Usage) {
	b.Helper()
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Nanoseconds()) / 1e3
	}
	ops := float64(len(lat))
	b.ReportMetric(ops/elapsed.Seconds(), "reads/s")
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
	b.ReportMetric(float64(vmHWM(b, pid))/1024, "peak-RSS-MiB")
	// CPU and context switches per operation hardly depend on what else runs on the machine, unlike reads/s.
	b.ReportMetric(float64(u.CPU.Nanoseconds())/1e3/ops, "server-cpu-µs/op")
	b.ReportMetric(float64(u.Switches)/ops, "server-switches/op")
}

// usageOf is bench.UsageOf, failing b on an error.
func usageOf(b *testing.B, pid int) bench.Usage {
	b.Helper()
	u, err := bench.UsageOf(pid)
	if err != nil {
		b.Fatal(err)
	}
	return u
}

// vmHWM returns the peak resident set size of process pid in KiB.
func vmHWM(b *testing.B, pid int) int {
	b.Helper()
	n, err := bench.StatusField("/proc/"+strconv.Itoa(pid)+"/status", "VmHWM:")
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// BenchmarkDirectIORead re-reads an open file with pread; with direct I/O every read is a FUSE READ
// request answered by the server.
func BenchmarkDirectIORead(b *testing.B) {
	eachServer(b, func(b *testing.B, s benchServer) {
		pid, mnt := s.serve(b, true, 0)
		preadLoad(b, pid, filepath.Join(mnt, fileName), 1)
	})
}

// BenchmarkParallelDirectIORead is BenchmarkDirectIORead with 8 readers at once, each on its own descriptor:
// a server that answers requests strictly in turn cannot use the second core.
func BenchmarkParallelDirectIORead(b *testing.B) {
	eachServer(b, func(b *testing.B, s benchServer) {
		pid, mnt := s.serve(b, true, 0)
		preadLoad(b, pid, filepath.Join(mnt, fileName), 8)
	})
}

// BenchmarkSlowRead reads with 16 readers at once from a server whose reads take 10 ms, like a remote
// backend: ideally 16 / 10 ms = 1,600 reads/s; a server that answers in turn gets 100.
func BenchmarkSlowRead(b *testing.B) {
	eachServer(b, func(b *testing.B, s benchServer) {
		pid, mnt := s.serve(b, true, 10*time.Millisecond)
		preadLoad(b, pid, filepath.Join(mnt, fileName), 16)
	})
}

// preadLoad runs b.N preads of file, spread over readers threads with a descriptor each, and reports.
func preadLoad(b *testing.B, pid int, file string, readers int) {
	fds := make([]int, readers)
	for i := range fds {
		fd, err := unix.Open(file, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			b.Fatal(err)
		}
		defer unix.Close(fd)
		fds[i] = fd
	}
	lat := make([]time.Duration, b.N)
	var next atomic.Int64
	errs := make(chan error, readers)
	u0 := usageOf(b, pid)
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for _, fd := range fds {
		wg.Go(func() {
			runtime.LockOSThread() // each reader a thread of its own, as separate processes would be
			buf := make([]byte, 4096)
			for i := next.Add(1) - 1; i < int64(b.N); i = next.Add(1) - 1 {
				t := time.Now()
				if n, err := unix.Pread(fd, buf, 0); err != nil || n != 13 {
					errs <- fmt.Errorf("pread = %d, %v", n, err)
					return
				}
				lat[i] = time.Since(t)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	report(b, elapsed, lat, pid, usageOf(b, pid).Sub(u0))
}

// BenchmarkOpenReadClose opens, reads and closes the file each time in page-cache mode: one FUSE OPEN per
// operation (plus an asynchronous RELEASE, and a GETATTR or LOOKUP whenever the 1 s caches expire); the read
// itself comes from the page cache.
func BenchmarkOpenReadClose(b *testing.B) {
	eachServer(b, func(b *testing.B, s benchServer) {
		pid, mnt := s.serve(b, false, 0)
		path := filepath.Join(mnt, fileName)
		buf := make([]byte, 4096)
		lat := make([]time.Duration, b.N)
		u0 := usageOf(b, pid)
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
		report(b, elapsed, lat, pid, usageOf(b, pid).Sub(u0))
	})
}
