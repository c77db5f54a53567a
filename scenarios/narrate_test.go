package scenarios

import (
	"strings"
	"testing"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// TestNarratorExplains: $ROOT is defined where it is first printed, a long kubelet error repeated at every
// attempt is printed once, and the first error after the kill says why the reads in between succeeded.
func TestNarratorExplains(t *testing.T) {
	start := time.Now()
	at := func(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }
	root := "/tmp/run-1/kubelet"
	msg := func(id string) string {
		return `Error: failed to generate container "` + id + `…" spec: failed to stat "` + root +
			`/pods/1234/volumes/kubernetes.io~csi/pv/mount": stat …: transport endpoint is not connected`
	}
	ev := &Evidence{Start: start, Paths: map[string]string{PathRoot: root}, Events: []Event{
		{Time: at(0.1), Source: SrcWorkload, Kind: KRead, Container: "reader", Content: "Hello world!\n"},
		{Time: at(1), Source: SrcRunner, Kind: KStep, Message: "kill plugin", Component: topology.PluginContainer},
		{Time: at(1), Source: SrcComponent, Kind: KKilled, Component: topology.PluginContainer},
		{Time: at(1.2), Source: SrcWorkload, Kind: KRead, Container: "reader", Content: "Hello world!\n"},
		{Time: at(1.4), Source: SrcWorkload, Kind: KRead, Container: "reader", Content: "Hello world!\n"},
		{Time: at(1.5), Source: SrcWorkload, Kind: KReadError, Container: "reader", Errno: "ENOTCONN", Message: "read /mnt/f: transport endpoint is not connected"},
		{Time: at(1.6), Source: SrcKubelet, Kind: KStartFailed, Container: "reader", Message: msg("c349")},
		{Time: at(2.6), Source: SrcKubelet, Kind: KStartFailed, Container: "reader", Message: msg("d77a")},
		{Time: at(4.6), Source: SrcKubelet, Kind: KStartFailed, Container: "reader", Message: msg("e012")},
	}}
	if _, ok := ev.KillTime(); !ok {
		t.Fatal("the scripted evidence has no kill: the test is stale")
	}
	var b strings.Builder
	NewNarrator(&b, start).Update(ev)
	out := b.String()
	lines := strings.Split(out, "\n")
	def := slicesIndex(lines, "$ROOT below is "+root)
	use := slicesIndex(lines, "$ROOT/pods")
	if def < 0 || use < 0 || def > use {
		t.Errorf("$ROOT defined at line %d, first used at line %d:\n%s", def, use, out)
	}
	if n := strings.Count(out, "failed to stat"); n != 1 {
		t.Errorf("the kubelet error printed %d times, want once:\n%s", n, out)
	}
	if n := strings.Count(out, "start failed again: the same error as at t+1.60s"); n != 2 {
		t.Errorf("the repeats do not refer to the first (%d):\n%s", n, out)
	}
	if !strings.Contains(out, "the 2 read(s) since the kill still succeeded") || !strings.Contains(out, "page cache") {
		t.Errorf("the first error after the kill does not say why reads succeeded before it:\n%s", out)
	}
}

func slicesIndex(lines []string, sub string) int {
	for i, l := range lines {
		if strings.Contains(l, sub) {
			return i
		}
	}
	return -1
}
