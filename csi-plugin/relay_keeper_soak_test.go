package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/driver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/keeper"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/dummy-fuse-workload/workload"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/bench"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// TestRelayKeeperSoak kills one component of the relay-keeper mode at a time, DFC_SOAK_KILLS times per real
// server (dummy-fuse, gcsfuse against a fake GCS, squashfuse): two kills in three of the real server, the rest
// of the relay, the keeper or the plugin, at random. After each it waits for the evidence that the mode has
// recovered (the successor in the keeper's children or status, the restarted plugin's re-collected copy, and
// three more good reads by every reader) before the next. Three readers read without pause: O_DIRECT with a
// descriptor kept open, O_DIRECT with an open per read, and an open per read through the page cache. It fails
// on one failed read and on anything left over (descriptors of the plugin and the keeper, mounts under the
// test's root in the plugin's namespace and the node's, child processes of the keeper and of the test), and
// records each reader's worst stall per kind of kill (make soak-relay-keeper; skipped without DFC_SOAK_KILLS).
func TestRelayKeeperSoak(t *testing.T) {
	testenv.Soak(t, "a soak of the relay-keeper mode with the real servers", "make soak-relay-keeper",
		[]string{fuseserver.DummyFuse, fuseserver.Gcsfuse, fuseserver.Squashfuse}, soakRelayKeeper,
		func(run bench.SoakRun, servers []bench.RelayKeeperSoakServer) testenv.SoakRecord {
			return &bench.RelayKeeperSoakResult{SoakRun: run, Servers: servers}
		})
}

// soakReader is a reader of the soak and what it is called in the record.
type soakReader struct {
	*reader
	name string
}

// soakRelayKeeper runs the soak with the real server called name and returns its figures.
func soakRelayKeeper(t *testing.T, name string, kills int) bench.RelayKeeperSoakServer {
	rk := newRelayKeeper(t, name)
	e, spec := rk.env, rk.spec
	p := e.start(rk.pluginArgs...)
	k := e.startKeeper(rk.keeperArgs...)
	e.stagePublish(p, "vol-1", "pod-a")
	k.servedBy("vol-1", 0)
	realServerOf(t, k.Children, spec.Path, 0)
	target := filepath.Join(e.targetPath("vol-1", "pod-a"), fuseserver.ServedFile)
	readers := []soakReader{
		{e.startReaderArgs(target, "--read-interval=10ms", "--keep-open=true", "--direct-io"), "O_DIRECT, descriptor kept open"},
		{e.startReaderArgs(target, "--read-interval=10ms", "--keep-open=false", "--direct-io"), "O_DIRECT, open per read"},
		{e.startReaderArgs(target, "--read-interval=10ms", "--keep-open=false"), "page cache, open per read"},
	}
	all := func() []*reader {
		var rs []*reader
		for _, r := range readers {
			rs = append(rs, r.reader)
		}
		return rs
	}
	readsOn(t, "before the first kill", all()...)
	// The plugin is restarted in a new mount namespace, so re-collecting its copy of the connection is what
	// makes it whole again; the first start shows the same line once the keeper connected.
	pluginWhole := func(p *plugin) {
		testenv.Eventually(t, waitTimeout, "the plugin to re-collect its copy from the keeper", func() bool {
			return strings.Contains(p.Log(), `"Session connected"`) && strings.Contains(p.Log(), "adopted=1")
		})
	}
	res := bench.RelayKeeperSoakServer{Server: name, Kills: map[string]int{}}
	// Each leftover with what it is made of, for a failure's message. A plugin restarted by the last kill may
	// hold one mount and one descriptor fewer: its new namespace gets a backend only when the real server next
	// dies (the keeper's relay holds the root of the one mounted in the dead plugin's namespace).
	leftovers := []struct {
		count    *bench.BeforeAfter
		what     string
		now      func() int
		whatItIs func() string
	}{
		{&res.PluginFDs, "the plugin's open descriptors", func() int { return testenv.OpenFDs(t, p.PID()) }, func() string { return fdTargets(p.PID()) }},
		{&res.KeeperFDs, "the keeper's open descriptors", func() int { return testenv.OpenFDs(t, k.PID()) }, func() string { return fdTargets(k.PID()) }},
		{&res.PluginNSMounts, "mounts under the test's root in the plugin's namespace", func() int { return countMountsIn(t, p.PID(), e.root) }, func() string { return mountPointsIn(p.PID(), e.root) }},
		{&res.NodeMounts, "mounts under the test's root in the node's namespace", func() int { return countMountsIn(t, 0, e.root) }, func() string { return mountPointsIn(0, e.root) }},
		{&res.KeeperChildren, "the keeper's child processes", func() int { return len(k.Children()) }, func() string { return fmt.Sprint(k.Children()) }},
		{&res.TestChildren, "the test's child processes", func() int { return len(testenv.Children(os.Getpid())) }, func() string { return fmt.Sprint(testenv.Children(os.Getpid())) }},
	}
	for _, l := range leftovers {
		l.count.Before = l.now()
	}

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))
	var log []soakKill
	for i := 0; i < kills; i++ {
		var sk soakKill
		kind := max(rng.IntN(9)-5, 0) // 0 (the real server) two times in three, else 1, 2 or 3
		sk.what = bench.KillKinds[kind]
		res.Order += bench.KillInitials[kind : kind+1]
		switch kind {
		case 0: // the real server
			old := realServerOf(t, k.Children, spec.Path, 0)
			sk.killed = time.Now()
			if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			realServerOf(t, k.Children, spec.Path, old)
		case 1: // the relay
			old := k.servedBy("vol-1", 0)
			sk.killed = time.Now()
			if _, err := keeper.Crash(k.status, "vol-1"); err != nil {
				t.Fatal(err)
			}
			k.servedBy("vol-1", old)
		case 2: // the keeper
			kids := k.Children() // its relay and real server die with it, re-parented to the test: reap them
			sk.killed = time.Now()
			k.Kill()
			testenv.Reap(t, kids)
			k = e.startKeeper(rk.keeperArgs...)
			k.servedBy("vol-1", 0)
			realServerOf(t, k.Children, spec.Path, 0)
		default: // the plugin, and its relay directory with it, as the chart's emptyDir goes with the plugin's pod
			sk.killed = time.Now()
			p.kill()
			if err := os.RemoveAll(filepath.Join(e.sockDir, driver.RelayDirName)); err != nil {
				t.Fatal(err)
			}
			p = e.start(rk.pluginArgs...)
			pluginWhole(p)
		}
		sk.successor = time.Now()
		res.Kills[sk.what]++
		if kind != 1 { // all but a relay kill: a plugin kill leaves its new namespace without a backend, the others make it mount one
			res.PluginSinceBackend = kind == 3
		}
		readsOn(t, fmt.Sprintf("after kill %d (%s)", i+1, sk.what), all()...)
		log = append(log, sk)
	}

	// Leftovers, once what closes lazily (a relay drops what it held on a dead backend when it next finds it
	// dead) has had its moment.
	deadline := time.Now().Add(waitTimeout)
	for _, l := range leftovers {
		for l.count.After = l.now(); l.count.After > l.count.Before && time.Now().Before(deadline); l.count.After = l.now() {
			time.Sleep(100 * time.Millisecond)
		}
		if l.count.After > l.count.Before || (l.count == &res.PluginNSMounts && l.count.After < l.count.Before && !res.PluginSinceBackend) {
			t.Errorf("%s: %d before the kills, %d after %d kills: %s", l.what, l.count.Before, l.count.After, kills, l.whatItIs())
		}
	}

	for _, r := range readers {
		recs := r.records()
		for _, rec := range recs {
			switch {
			case rec.Event == workload.EventRead && rec.Content != nil && *rec.Content == fuseserver.Content:
				res.GoodReads++
			case rec.Event == workload.EventReadError, rec.Event == workload.EventOpenError:
				res.FailedReads++
			}
		}
		own := slices.Clone(log)
		charge(own, recs)
		byKind := map[string][]time.Duration{}
		for _, sk := range own {
			byKind[sk.what] = append(byKind[sk.what], sk.longest)
		}
		rs := bench.ReaderStalls{Reader: r.name, Stall: map[string]bench.Percentiles{}}
		for kind, ds := range byKind {
			rs.Stall[kind] = bench.PercentilesOf(ds)
		}
		res.Stalls = append(res.Stalls, rs)
	}
	if res.FailedReads != 0 {
		t.Errorf("%d failed reads (%d good)", res.FailedReads, res.GoodReads)
	}
	t.Logf("%s: kills %v (in order %s); %d good reads, %d failed; stall (p50, p99, max ms) per reader and kind of kill %v", name, res.Kills, res.Order, res.GoodReads, res.FailedReads, res.Stalls)
	for _, l := range leftovers {
		t.Logf("%s: %s", l.what, l.count)
	}
	return res
}

// fdTargets lists what pid's open descriptors point to, for a failure's message.
func fdTargets(pid int) string {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, e := range entries {
		target, _ := os.Readlink(filepath.Join(dir, e.Name()))
		out = append(out, e.Name()+"→"+target)
	}
	return strings.Join(out, " ")
}

// mountPointsIn lists the mount points on dir and below it in the mount namespace of pid (0: this process's), for
// a failure's message.
func mountPointsIn(pid int, dir string) string {
	ms, err := mounts.UnderIn(pid, dir)
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, m := range ms {
		out = append(out, m.Mountpoint+" ("+m.FSType+")")
	}
	return strings.Join(out, " ")
}
