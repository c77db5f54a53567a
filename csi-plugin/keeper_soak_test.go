package main

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/keeper"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/dummy-fuse-workload/workload"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/bench"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// soakKill is one kill of the soak and what it cost.
type soakKill struct {
	what      string        // "FUSE server", "keeper", "plugin"
	killed    time.Time     // when SIGKILL was sent
	successor time.Time     // when its successor started (a new server, keeper or plugin process)
	longest   time.Duration // the longest open or read that ended after the kill
	// afterSuccessor is how long any open or read still waited after the successor had started.
	afterSuccessor time.Duration
}

// TestKeeperSoak kills one component at random, again and again (DFC_SOAK_KILLS times, 12 by default), under
// ten workloads that read without pause: a descriptor kept open and an open per read, each through the page
// cache and with O_DIRECT. It asserts what must hold whatever the timing (not one failed open or read, no
// process, mount or descriptor left over) and logs what each kill cost: the longest open or read after it, and
// how long reads still waited once the successor had started.
func TestKeeperSoak(t *testing.T) {
	kills, err := bench.SoakKills() // make soak-keeper sets 50
	if err != nil {
		t.Fatal(err)
	}
	if kills == 0 {
		kills = 12
	}
	e := newEnv(t, syscall.MS_PRIVATE)
	e.allowNobody()
	pluginArgs := []string{"--fuse-mode=keeper", "--restore-mounts", "--keeper-uid=65534"}
	p := e.start(pluginArgs...)
	k := e.startKeeper()
	e.stagePublish(p, "vol-1", "pod-a")
	k.servedBy("vol-1", 0)
	target := filepath.Join(e.targetPath("vol-1", "pod-a"), "dummy-file.txt")
	var readers []*reader
	for i := 0; i < 10; i++ {
		keepOpen, direct := i%2 == 0, i%4 < 2
		readers = append(readers, e.startReaderArgs(target, "--read-interval=2ms", fmt.Sprintf("--keep-open=%t", keepOpen), fmt.Sprintf("--direct-io=%t", direct)))
	}
	readsOn(t, "before the first kill", readers...)
	mountsBefore := countMountsIn(t, 0, e.root)
	keeperFDs, pluginFDs := testenv.OpenFDs(t, k.PID()), testenv.OpenFDs(t, p.PID())

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	var log []soakKill
	var keeperFDsAfter, pluginFDsAfter []int
	for i := 0; i < kills; i++ {
		var sk soakKill
		switch rng.IntN(3) {
		case 0:
			sk.what = "FUSE server"
			old := k.servedBy("vol-1", 0)
			sk.killed = time.Now()
			if _, err := keeper.Crash(k.status, "vol-1"); err != nil {
				t.Fatal(err)
			}
			k.servedBy("vol-1", old)
			sk.successor = k.lastServerStart(t)
			keeperFDsAfter = append(keeperFDsAfter, testenv.OpenFDs(t, k.PID()))
		case 1:
			sk.what = "keeper"
			sk.killed = time.Now()
			k.Kill()
			sk.successor = time.Now()
			k = e.startKeeper()
			k.servedBy("vol-1", 0)
			pluginFDsAfter = append(pluginFDsAfter, testenv.OpenFDs(t, p.PID()))
		default:
			sk.what = "plugin"
			sk.killed = time.Now()
			p.kill()
			sk.successor = time.Now()
			p = e.start(pluginArgs...)
			testenv.Eventually(t, waitTimeout, "the plugin to re-collect its copy", func() bool { return strings.Contains(p.Log(), "adopted=1") })
		}
		readsOn(t, fmt.Sprintf("after kill %d (%s)", i+1, sk.what), readers...)
		log = append(log, sk)
	}

	// Not one failure, ever (goodReads fails the test on the first one), and every kill's cost from the logs.
	total := 0
	for _, r := range readers {
		total += r.goodReads()
		charge(log, r.records())
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "kill\tcomponent\tkill→successor\tlongest open/read\tstill waiting after the successor started\t")
	var worst []time.Duration
	for i, sk := range log {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t\n", i+1, sk.what, ms(sk.successor.Sub(sk.killed)), ms(sk.longest), ms(sk.afterSuccessor))
		worst = append(worst, sk.afterSuccessor)
	}
	tw.Flush()
	sort.Slice(worst, func(i, j int) bool { return worst[i] < worst[j] })
	t.Logf("%d kills under 10 workloads, %d good reads, 0 failed:\n%s\nwaiting after the successor started: median %s, max %s",
		kills, total, b.String(), ms(worst[len(worst)/2]), ms(worst[len(worst)-1]))

	// Nothing leaks: the mounts are the two of the volume, the keeper has one server process, and the
	// descriptors of the processes that outlived kills of the others did not grow with them.
	if n := countMountsIn(t, 0, e.root); n != mountsBefore {
		t.Errorf("%d mounts under the test's root after the soak, %d before", n, mountsBefore)
	}
	if st := k.state(); len(st.Servers) != 1 {
		t.Errorf("the keeper runs %d FUSE servers after the soak, want 1: %+v", len(st.Servers), st.Servers)
	}
	if n := len(k.Children()); n != 1 {
		t.Errorf("the keeper has %d child processes, want its one server", n)
	}
	for _, c := range []struct {
		what   string
		before int
		after  []int
	}{{"keeper (across FUSE server kills)", keeperFDs, keeperFDsAfter}, {"plugin (across keeper kills)", pluginFDs, pluginFDsAfter}} {
		if len(c.after) > 0 {
			t.Logf("open descriptors of the %s: %d before, %v after each", c.what, c.before, c.after)
			if last := c.after[len(c.after)-1]; len(c.after) > 2 && last > c.before+2 {
				t.Errorf("the %s leaks descriptors: %d before, %v after each kill", c.what, c.before, c.after)
			}
		}
	}
}

// charge adds to each kill of log what the opens and reads of recs that ended after it, and before the next
// kill, cost: the longest of them, and how long any still waited after the successor had started.
func charge(log []soakKill, recs []workload.Record) {
	for _, rec := range recs {
		if rec.LatencyUS == nil || (rec.Event != workload.EventRead && rec.Event != workload.EventOpen) {
			continue
		}
		end, took := rec.Time, time.Duration(*rec.LatencyUS)*time.Microsecond
		for i := range log {
			next := time.Now()
			if i+1 < len(log) {
				next = log[i+1].killed
			}
			if end.Before(log[i].killed) || !end.Before(next) {
				continue
			}
			log[i].longest = max(log[i].longest, took)
			if began := end.Add(-took); end.After(log[i].successor) {
				log[i].afterSuccessor = max(log[i].afterSuccessor, end.Sub(maxTime(began, log[i].successor)))
			}
		}
	}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// lastServerStart is when the keeper last started a FUSE server, from its own stamped log.
func (k *keeperProc) lastServerStart(t testing.TB) time.Time {
	t.Helper()
	var last time.Time
	for _, line := range strings.Split(k.Log(), "\n") {
		stamp, rest, ok := strings.Cut(line, " ")
		if !ok || !strings.Contains(rest, "started FUSE server pid") {
			continue
		}
		if ts, err := time.Parse(time.RFC3339Nano, stamp); err == nil {
			last = ts
		}
	}
	if last.IsZero() {
		t.Fatal("the keeper's log shows no server start")
	}
	return last
}

// countMountsIn counts the mounts on dir and below it in the mount namespace of pid (0: this process's).
func countMountsIn(t testing.TB, pid int, dir string) int {
	t.Helper()
	ms, err := mounts.UnderIn(pid, dir)
	if err != nil {
		t.Fatal(err)
	}
	return len(ms)
}
