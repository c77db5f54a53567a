package relayfs_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/dummy-fuse-workload/workload"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// The writable relay's cost (make bench-relay-write, hack/bench-relay.sh with KIND=write): each writable real
// server is mounted once and written both directly and through a writable relay in front of that same mount,
// back to back, in the order RELAY_BENCH_ORDER gives (the runner swaps it every round). Numbers only:
//
//	BenchmarkRelayWrite/<server>/SequentialWrite/<direct|relay>: one operation is a new 1 MiB file written
//	    in 64 KiB writes and closed (gcsfuse and s3fs upload it at the close): MB/s, p50-µs and p99-µs per file
//	BenchmarkRelayWrite/<server>/FsyncWrite/<direct|relay>: one operation is a 64 KiB write and an fsync of a
//	    file kept open: MB/s, p50-µs and p99-µs per operation
//
//	go test -run '^$' -bench 'RelayWrite/gcsfuse' ./dummy-fuse/relayfs/
func BenchmarkRelayWrite(b *testing.B) {
	testenv.RequireFUSE(b)
	modes := relayBenchModes(b)
	for _, name := range []string{fuseserver.Gcsfuse, s3fs} {
		b.Run(name, func(b *testing.B) {
			lab := testenv.NewLab(b)
			be := newBackend(b, lab, name)
			be.start()
			relayMnt, _ := startBenchRelay(b, lab, be.dir, "--relay-writable", "--spill-dir", b.TempDir())
			dirs := map[string]string{"direct": be.dir, "relay": relayMnt}
			for _, bm := range []struct {
				name string
				run  func(b *testing.B, dir string)
			}{{"SequentialWrite", sequentialWrite}, {"FsyncWrite", fsyncWrite}} {
				b.Run(bm.name, func(b *testing.B) {
					for _, m := range modes {
						b.Run(m, func(b *testing.B) { bm.run(b, dirs[m]) })
					}
				})
			}
		})
	}
}

const (
	writeChunk = 64 << 10
	fileSize   = 1 << 20
)

// sequentialWrite writes b.N new 1 MiB files, each in 64 KiB writes, and closes each.
func sequentialWrite(b *testing.B, dir string) {
	data := workload.Piece(0, writeChunk)
	lat := make([]time.Duration, b.N)
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		t := time.Now()
		fd, err := unix.Open(filepath.Join(dir, fmt.Sprintf("seq-%d", i%8)), unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o644)
		if err != nil {
			b.Fatal(err)
		}
		for off := 0; off < fileSize; off += writeChunk {
			if _, err := unix.Write(fd, data); err != nil {
				b.Fatal(err)
			}
		}
		if err := unix.Close(fd); err != nil {
			b.Fatal(err)
		}
		lat[i] = time.Since(t)
	}
	reportWrites(b, time.Since(start), lat, fileSize)
}

// fsyncWrite appends 64 KiB and fsyncs, b.N times, to a file kept open.
func fsyncWrite(b *testing.B, dir string) {
	data := workload.Piece(1, writeChunk)
	fd, err := unix.Open(filepath.Join(dir, "fsync"), unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Close(fd)
	lat := make([]time.Duration, b.N)
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		t := time.Now()
		if _, err := unix.Pwrite(fd, data, int64(i%16)*writeChunk); err != nil {
			b.Fatal(err)
		}
		if err := unix.Fsync(fd); err != nil {
			b.Fatal(err)
		}
		lat[i] = time.Since(t)
	}
	reportWrites(b, time.Since(start), lat, writeChunk)
}

// reportWrites reports MB/s (size bytes per operation) and the operations' p50 and p99.
func reportWrites(b *testing.B, elapsed time.Duration, lat []time.Duration, size int) {
	b.StopTimer()
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Nanoseconds()) / 1e3
	}
	b.ReportMetric(float64(len(lat)*size)/1e6/elapsed.Seconds(), "MB/s")
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
}
