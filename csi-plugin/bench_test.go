package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/internal/plugintest"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// BenchmarkRestore measures what --restore-mounts costs as volumes grow: with N volumes staged and published
// (one dummy-fuse server each), the plugin is killed with SIGKILL, so every mount is dead, and restarted; the
// timed part is from starting the new process to Probe reporting ready, i.e. every staging mount remounted and
// every target bound again. It also reports the memory of the plugin and its FUSE servers afterwards.
//
//	make bench-restore   (or: go test -run '^$' -bench BenchmarkRestore -benchtime 1x ./csi-plugin/)
func BenchmarkRestore(b *testing.B) {
	for _, n := range []int{1, 100, 500} {
		b.Run(fmt.Sprintf("volumes=%d", n), func(b *testing.B) { benchRestore(b, n) })
	}
}

func benchRestore(b *testing.B, volumes int) {
	e := newEnv(b, unix.MS_SHARED)
	p := e.start()
	vols := e.stagePublishMany(p, volumes, "pod")

	avg := e.timeRestarts(b, &p, []string{"--restore-mounts", "--restore-strategy=rebind"}, func(p *plugin) {
		p.kill9(p.Children())
		plugintest.WaitDead(b, e.targetPath(vols[0], "pod"))
		plugintest.WaitDead(b, e.targetPath(vols[volumes-1], "pod"))
	}, func(p *plugin) {
		for _, vol := range vols {
			plugintest.MustRead(b, e.targetPath(vol, "pod"))
		}
		if n := len(p.Children()); n != volumes {
			b.Fatalf("%d FUSE servers after the restore, want %d", n, volumes)
		}
	})
	b.ReportMetric(avg.Seconds(), "s/restore")
	b.ReportMetric(float64(avg.Microseconds())/1000/float64(volumes), "ms/volume")

	pids := append([]int{p.PID()}, p.Children()...)
	var rss, pss, pluginRSS int64
	var pluginCPU, serversCPU time.Duration
	for i, pid := range pids {
		if i == 0 {
			pluginCPU = procCPU(b, pid)
		} else {
			serversCPU += procCPU(b, pid)
		}
		r := procKB(b, fmt.Sprintf("/proc/%d/status", pid), "VmRSS:")
		rss += r
		pss += procKB(b, fmt.Sprintf("/proc/%d/smaps_rollup", pid), "Pss:")
		if i == 0 {
			pluginRSS = r
		}
	}
	b.ReportMetric(float64(rss)/1024, "MB-RSS-total")
	b.ReportMetric(float64(pss)/1024, "MB-PSS-total")
	b.ReportMetric(float64(pluginRSS)/1024, "MB-RSS-plugin")
	b.Logf("%d volumes: start→ready %v (%v per volume); RSS plugin %d MB + %d FUSE servers = %d MB total (PSS %d MB); CPU used so far: plugin %v, FUSE servers %v",
		volumes, avg.Round(time.Millisecond), (avg / time.Duration(volumes)).Round(time.Microsecond),
		pluginRSS/1024, len(pids)-1, rss/1024, pss/1024, pluginCPU, serversCPU)
}

// timeRestarts kills the plugin *p with kill and starts it again with args, b.N times, and returns the average
// time from starting the new process to Probe ready; check runs after each restart, untimed.
func (e *env) timeRestarts(b *testing.B, p **plugin, args []string, kill, check func(*plugin)) time.Duration {
	b.ResetTimer()
	var total time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		kill(*p)
		b.StartTimer()
		start := time.Now()
		*p = e.launch(args...)
		(*p).waitReady(5 * time.Minute)
		total += time.Since(start)
		b.StopTimer()
		check(*p)
		b.StartTimer()
	}
	b.StopTimer()
	return total / time.Duration(b.N)
}

// procCPU returns the user+system CPU time pid has used (fields 14 and 15 of /proc/PID/stat, in clock ticks of
// 10 ms on Linux).
func procCPU(b testing.TB, pid int) time.Duration {
	b.Helper()
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The command name (field 2) may hold spaces: count fields after its closing parenthesis.
	i := strings.LastIndexByte(string(st), ')')
	f := strings.Fields(string(st[i+1:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// procKB returns the kB value of the line starting with key in a /proc file.
func procKB(b testing.TB, path, key string) int64 {
	b.Helper()
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), key); ok {
			fields := strings.Fields(rest)
			if len(fields) > 0 {
				n, err := strconv.ParseInt(fields[0], 10, 64)
				if err == nil {
					return n
				}
			}
		}
	}
	b.Fatalf("%s: no %s line", path, key)
	return 0
}

// BenchmarkKeeperRestart is BenchmarkRestore for the keeper mode: with N volumes staged and published (their
// FUSE servers in the keeper, 64 volumes per server process), the plugin is killed with SIGKILL and restarted
// with --restore-mounts. Nothing died with it, so nothing is remounted: the timed part, start → Probe ready,
// is the restore finding every mount answering. It then reports the memory of the plugin, the keeper and the
// keeper's FUSE servers together.
//
//	make bench-keeper   (or: go test -run '^$' -bench BenchmarkKeeperRestart -benchtime 1x ./csi-plugin/)
func BenchmarkKeeperRestart(b *testing.B) {
	for _, n := range []int{1, 100, 500} {
		b.Run(fmt.Sprintf("volumes=%d", n), func(b *testing.B) { benchKeeperRestart(b, n) })
	}
}

func benchKeeperRestart(b *testing.B, volumes int) {
	e := newEnv(b, unix.MS_SHARED)
	e.allowNobody()
	args := []string{"--fuse-mode=keeper", "--restore-mounts", "--keeper-uid=65534"}
	p := e.start(args...)
	k := e.startKeeper()
	vols := e.stagePublishMany(p, volumes, "pod")

	avg := e.timeRestarts(b, &p, args, (*plugin).kill, func(p *plugin) {
		for _, vol := range vols {
			plugintest.MustRead(b, e.targetPath(vol, "pod"))
		}
		testenv.Eventually(b, waitTimeout, "the plugin to re-collect every connection", func() bool {
			return strings.Contains(p.Log(), fmt.Sprintf("adopted=%d", volumes))
		})
	})
	b.ReportMetric(avg.Seconds(), "s/start-to-ready")

	servers := k.Children()
	var pss [3]int64 // plugin, keeper, servers
	for i, pid := range append([]int{p.PID(), k.PID()}, servers...) {
		pss[min(i, 2)] += procKB(b, fmt.Sprintf("/proc/%d/smaps_rollup", pid), "Pss:")
	}
	sum := pss[0] + pss[1] + pss[2]
	b.ReportMetric(float64(sum)/1024, "MB-PSS-total")
	b.Logf("%d volumes: start→ready %v; PSS plugin %.1f MiB + keeper %.1f MiB + %d FUSE servers %.1f MiB = %.1f MiB",
		volumes, avg.Round(time.Millisecond), float64(pss[0])/1024, float64(pss[1])/1024, len(servers), float64(pss[2])/1024, float64(sum)/1024)
}
