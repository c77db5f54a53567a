package relayfs_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/bench"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// The relay's cost (make bench-relay, hack/bench-relay.sh): each real server is mounted once and read both
// directly and through a relay in front of that same mount, back to back; the runner swaps the order every
// round (RELAY_BENCH_ORDER) so that the ratio relay/direct within a round holds on a shared machine. The
// benchmarks report numbers and assert none:
//
//	BenchmarkRelay/<server>/<DirectIORead|OpenReadClose|CachedRead>/<direct|relay>: reads/s, p50-µs, p99-µs,
//	    with gcsfuse, squashfuse and dummy-fuse (the floor: a server that answers from memory);
//	    and per operation the CPU and context switches of the server (server-cpu-µs/op, server-switches/op)
//	    and of the relay (relay-cpu-µs/op, relay-switches/op)
//	BenchmarkRelay/<server>/ServerCrash/relay (b.N kills): how much longer than the server's own start the
//	    relay's reader waits after a kill
//
//	go test -run '^$' -bench 'Relay/squashfuse' ./dummy-fuse/relayfs/

// relayBenchModes returns the order in which a benchmark reads directly and through the relay.
func relayBenchModes(b *testing.B) []string {
	b.Helper()
	spec := os.Getenv("RELAY_BENCH_ORDER")
	if spec == "" {
		return []string{"direct", "relay"}
	}
	modes := strings.Split(spec, ",")
	if len(modes) != 2 || !slices.Contains(modes, "direct") || !slices.Contains(modes, "relay") {
		b.Fatalf("RELAY_BENCH_ORDER=%q: want direct,relay or relay,direct", spec)
	}
	return modes
}

func BenchmarkRelay(b *testing.B) {
	testenv.RequireFUSE(b)
	modes := relayBenchModes(b)
	// dummy-fuse is the floor: a server that answers from memory, so that what the relay adds shows alone (one
	// more FUSE round trip per request, which no relay can avoid).
	for _, name := range []string{fuseserver.Gcsfuse, fuseserver.Squashfuse, fuseserver.DummyFuse} {
		b.Run(name, func(b *testing.B) {
			lab := testenv.NewLab(b)
			be := newBackend(b, lab, name)
			be.start()
			relayMnt, relay := startBenchRelay(b, lab, be.dir)
			files := map[string]string{
				"direct": filepath.Join(be.dir, fuseserver.ServedFile),
				"relay":  filepath.Join(relayMnt, fuseserver.ServedFile),
			}
			for _, bm := range []struct {
				name string
				run  func(b *testing.B, file string) benchRun
			}{{"DirectIORead", directIORead}, {"OpenReadClose", openReadClose}, {"CachedRead", cachedRead}} {
				b.Run(bm.name, func(b *testing.B) {
					for _, m := range modes {
						b.Run(m, func(b *testing.B) {
							server0, relay0 := usageOf(b, be.proc.PID()), usageOf(b, relay.PID())
							r := bm.run(b, files[m])
							r.report(b, usageOf(b, be.proc.PID()).Sub(server0), "server")
							if m == "relay" {
								r.report(b, usageOf(b, relay.PID()).Sub(relay0), "relay")
							}
						})
					}
				})
			}
			// Last: it kills the server b.N times.
			b.Run("ServerCrash", func(b *testing.B) {
				b.Run("relay", func(b *testing.B) { serverCrash(b, be, files["relay"], relay.LogPath) })
			})
		})
	}
}

// startBenchRelay mounts a relay in front of backend with extra arguments (the write bench's --relay-writable),
// in page-cache mode (no --direct-io: an O_DIRECT open is direct anyway, and the cached read needs the cache),
// and waits until it serves the file.
func startBenchRelay(b *testing.B, lab *testenv.Lab, backend string, extra ...string) (string, *testenv.Proc) {
	b.Helper()
	mnt := lab.Dir()
	args := append(append([]string{"--relay-backend", backend}, extra...), mnt)
	p := lab.Start("relay", exec.Command(testenv.Build(b, "dummy-fuse"), args...))
	path := filepath.Join(mnt, fuseserver.ServedFile)
	testenv.Eventually(b, waitTimeout, "the relay serving "+path, func() bool {
		if p.Exited() {
			b.Fatalf("relay exited: %v\n%s", p.Err(), p.Tail())
		}
		var fs unix.Statfs_t
		if unix.Statfs(mnt, &fs) != nil || fs.Type != unix.FUSE_SUPER_MAGIC {
			return false
		}
		got, err := testenv.ReadFile(b, path, 5*time.Second)
		return err == nil && string(got) == fuseserver.Content
	})
	return mnt, p
}

// directIORead re-reads a file open with O_DIRECT: every read is a FUSE READ (through the relay: two).
func directIORead(b *testing.B, file string) benchRun { return preadLoop(b, file, unix.O_DIRECT) }

// cachedRead re-reads a file open in page-cache mode: after the first read, the kernel's cache answers.
func cachedRead(b *testing.B, file string) benchRun { return preadLoop(b, file, 0) }

func preadLoop(b *testing.B, file string, flags int) benchRun {
	fd, err := unix.Open(file, unix.O_RDONLY|unix.O_CLOEXEC|flags, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Close(fd)
	buf := alignedBuf()
	lat := make([]time.Duration, b.N)
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		t := time.Now()
		if n, err := unix.Pread(fd, buf, 0); err != nil || string(buf[:n]) != fuseserver.Content {
			b.Fatalf("pread %s = %q, %v", file, buf[:max(n, 0)], err)
		}
		lat[i] = time.Since(t)
	}
	return reportLatency(b, time.Since(start), lat)
}

// openReadClose opens, reads and closes the file each time, in page-cache mode.
func openReadClose(b *testing.B, file string) benchRun {
	buf := alignedBuf()
	lat := make([]time.Duration, b.N)
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		t := time.Now()
		fd, err := unix.Open(file, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			b.Fatal(err)
		}
		n, err := unix.Pread(fd, buf, 0)
		if err != nil || string(buf[:n]) != fuseserver.Content {
			b.Fatalf("pread %s = %q, %v", file, buf[:max(n, 0)], err)
		}
		if err := unix.Close(fd); err != nil {
			b.Fatal(err)
		}
		lat[i] = time.Since(t)
	}
	return reportLatency(b, time.Since(start), lat)
}

// alignedBuf returns a page-aligned 4 KiB buffer, as O_DIRECT wants.
func alignedBuf() []byte {
	raw := make([]byte, 2*4096)
	off := (4096 - int(uintptr(unsafe.Pointer(&raw[0]))%4096)) % 4096
	return raw[off : off+4096]
}

// benchRun is a finished run of ops operations.
type benchRun struct{ ops int }

// report adds the CPU a process (the server or the relay, named who) used per operation and its context
// switches per operation (every one a thread going to sleep: what a hop costs beyond its CPU).
func (r benchRun) report(b *testing.B, u bench.Usage, who string) {
	b.ReportMetric(float64(u.CPU.Nanoseconds())/1e3/float64(r.ops), who+"-cpu-µs/op")
	b.ReportMetric(float64(u.Switches)/float64(r.ops), who+"-switches/op")
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

func reportLatency(b *testing.B, elapsed time.Duration, lat []time.Duration) benchRun {
	b.StopTimer()
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Nanoseconds()) / 1e3
	}
	b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "reads/s")
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
	return benchRun{ops: len(lat)}
}

// serverCrash kills the server b.N times under a reader that keeps an O_DIRECT descriptor on the relay and
// reads every millisecond, starts the server again at once (as relay_test does), and reports how long the
// server took from its kill to serving the file (probed directly, every millisecond) and how much later than
// that the reader through the relay had its next good read: the relay's own part of the stall.
func serverCrash(b *testing.B, be *realBackend, file, relayLog string) {
	f, err := os.OpenFile(file, os.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	rd := &timedReader{}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); rd.run(f, stop) }()
	defer func() {
		close(stop)
		select {
		case <-done:
		case <-time.After(waitTimeout):
			b.Fatalf("the reader through the relay is still inside a read %s after it was told to stop", waitTimeout)
		}
	}()
	var starts, stalls, over []time.Duration
	b.ResetTimer()
	for range b.N {
		n := rd.good()
		testenv.Eventually(b, waitTimeout, "two good reads through the relay before the kill", func() bool { return rd.good() >= n+2 })
		be.kill()
		killed := be.killedAt
		serving := restartProbed(b, be)
		var resumed time.Time
		testenv.Eventually(b, waitTimeout, "a good read through the relay after the kill", func() bool {
			resumed = rd.firstAfter(killed, serving)
			return !resumed.IsZero()
		})
		starts = append(starts, serving.Sub(killed))
		stalls = append(stalls, resumed.Sub(killed))
		over = append(over, resumed.Sub(serving))
		if resumed.Sub(serving) > slowOver {
			b.Logf("kill at %s: the server served after %s, the reader through the relay after %s; the relay's log then:\n%s",
				killed.UTC().Format("15:04:05.000000"), serving.Sub(killed), resumed.Sub(killed), logSince(relayLog, killed))
		}
	}
	b.StopTimer()
	if errs := rd.failures(); len(errs) > 0 {
		b.Errorf("%d failed reads through the relay, first: %v", len(errs), errs[:min(len(errs), 5)])
	}
	ms := func(ds []time.Duration, p float64) float64 {
		s := slices.Sorted(slices.Values(ds))
		return float64(s[min(len(s)-1, int(p*float64(len(s))))].Microseconds()) / 1e3
	}
	b.ReportMetric(ms(starts, 0.5), "start-p50-ms")
	b.ReportMetric(ms(stalls, 0.5), "stall-p50-ms")
	b.ReportMetric(ms(over, 0.5), "over-start-p50-ms")
	b.ReportMetric(ms(over, 1), "over-start-max-ms")
	b.ReportMetric(float64(len(rd.failures())), "failed-reads")
}

// slowOver is how much later than the server's own start a reader may resume before serverCrash logs the kill.
const slowOver = 20 * time.Millisecond

// logSince returns the lines of a relay's log stamped at t or later.
func logSince(path string, t time.Time) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	var out []string
	for line := range strings.Lines(string(data)) {
		stamp, _, _ := strings.Cut(line, " ")
		if at, err := time.Parse(time.RFC3339Nano, stamp); err == nil && !at.Before(t) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "")
}

// restartProbed starts the server again after be.kill and returns when it first served the file, probed
// directly on its mount every millisecond.
func restartProbed(b *testing.B, be *realBackend) time.Time {
	b.Helper()
	be.proc = be.lab.Start(be.server.Name(), fuseserver.Command(be.server, be.server.MountArgs(be.dir)))
	be.killedAt = time.Time{}
	path := filepath.Join(be.dir, fuseserver.ServedFile)
	deadline := time.Now().Add(waitTimeout)
	for {
		if be.proc.Exited() {
			b.Fatalf("%s exited: %v\n%s", be.server.Name(), be.proc.Err(), be.proc.Tail())
		}
		var fs unix.Statfs_t
		if unix.Statfs(be.dir, &fs) == nil && fs.Type == unix.FUSE_SUPER_MAGIC {
			if got, err := testenv.ReadFile(b, path, 5*time.Second); err == nil && string(got) == fuseserver.Content {
				return time.Now()
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s did not serve %s within %s (its log: %s)", be.server.Name(), path, waitTimeout, be.proc.LogPath)
		}
		time.Sleep(time.Millisecond)
	}
}

// timedReader reads a descriptor every millisecond and records when each good read began and ended.
type timedReader struct {
	mu   sync.Mutex
	ok   [][2]time.Time
	errs []string
}

func (r *timedReader) run(f *os.File, stop <-chan struct{}) {
	buf := alignedBuf()
	for {
		select {
		case <-stop:
			return
		case <-time.After(time.Millisecond):
		}
		began := time.Now()
		n, err := f.ReadAt(buf, 0)
		now := time.Now()
		r.mu.Lock()
		switch {
		case string(buf[:n]) == fuseserver.Content: // ReadAt says io.EOF: the file is shorter than buf
			r.ok = append(r.ok, [2]time.Time{began, now})
		default:
			r.errs = append(r.errs, fmt.Sprintf("%s: %q, %v", now.Format("15:04:05.000"), buf[:n], err))
		}
		r.mu.Unlock()
	}
}

func (r *timedReader) good() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ok)
}

func (r *timedReader) failures() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.errs)
}

// firstAfter returns when the first read that the server started again after killed answered ended (zero
// when none has yet): a read begun after the kill, or one begun before it that ended after the new server
// served. A read that ended in between had its answer before the kill.
func (r *timedReader) firstAfter(killed, serving time.Time) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rd := range r.ok {
		if rd[0].After(killed) || rd[1].After(serving) {
			return rd[1]
		}
	}
	return time.Time{}
}
