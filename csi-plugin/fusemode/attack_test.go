package fusemode

import (
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fdpass/fdpasstest"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// TestAttackFigures replays the attacks on the keeper socket that the trust-boundary review measured and logs what they cost
// the plugin's process (threads, descriptors, resident memory) and how many resends a session churn causes.
// It is a measurement, not a check: DFC_ATTACK_FIGURES=1 runs it (go test -v -run TestAttackFigures).
func TestAttackFigures(t *testing.T) {
	if os.Getenv("DFC_ATTACK_FIGURES") != "1" {
		t.Skip("a measurement: set DFC_ATTACK_FIGURES=1")
	}
	testenv.RequireFUSE(t)
	k, dir := listeningKeeper(t)
	var resends atomic.Int64
	k.h.resend = func(*os.File) { resends.Add(1) }
	hello := func() []byte {
		b, _ := json.Marshal(map[string]any{"kind": "hello", "role": "keeper", "secret": k.secret})
		return b
	}()

	// 1. 300 hellos, each carrying a TCP socket whose close blocks (SO_LINGER, peer not reading).
	th, fd, rss := fdpasstest.Threads(t), fdpasstest.FDs(t), rssKiB(t)
	start := time.Now()
	const slow = 300
	for range slow {
		f := fdpasstest.LingeringSocket(t)
		c := rawConn(t, k)
		if _, _, err := c.WriteMsgUnix([]byte(`{"kind":"hello"}`), unix.UnixRights(int(f.Fd())), nil); err != nil {
			t.Fatal(err)
		}
		go f.Close() // the copy in flight is the plugin's to close last
	}
	time.Sleep(3 * time.Second)
	// The test's own side holds the 300 sockets' peers and 300 session ends: 600 descriptors.
	t.Logf("%d hellos with a lingering socket (%v): threads %+d, descriptors %+d beyond the attacker's %d, RSS %+d KiB",
		slow, time.Since(start).Round(time.Millisecond), fdpasstest.Threads(t)-th, fdpasstest.FDs(t)-fd-2*slow, 2*slow, rssKiB(t)-rss)

	// 2. 1,000 sessions that connect and stay silent.
	k2, _ := listeningKeeper(t)
	fd, rss = fdpasstest.FDs(t), rssKiB(t)
	const idle = 1000
	for range idle {
		rawConn(t, k2)
	}
	time.Sleep(2 * time.Second)
	t.Logf("%d silent sessions: descriptors %+d beyond the attacker's %d, RSS %+d KiB", idle, fdpasstest.FDs(t)-fd-idle, idle, rssKiB(t)-rss)

	// 3. Session churn beside a keeper that holds 10 connections: how many resends it causes.
	k3, dir3 := listeningKeeper(t)
	var resends3 atomic.Int64
	k3.h.resend = func(*os.File) { resends3.Add(1) }
	helloKeeper(t, k3)
	for i := range 10 {
		p := dir3 + "/s" + strconv.Itoa(i)
		k3.h.add("vol-"+strconv.Itoa(i), p, mountConn(t, p))
	}
	hello3, _ := json.Marshal(map[string]any{"kind": "hello", "role": "keeper", "secret": k3.secret})
	const churn = 200
	for range churn {
		c := rawConn(t, k3)
		if _, err := c.Write(hello3); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
		c.Close()
	}
	time.Sleep(time.Second)
	t.Logf("%d sessions connecting and leaving beside a keeper of 10 connections: %d resends", churn, resends3.Load())
	_, _, _ = dir, hello, resends.Load()
}

// rssKiB is the process's resident memory.
func rssKiB(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	return 0
}
