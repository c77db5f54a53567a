package keeper

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseconn"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/handover"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// fakePlugin listens where the keeper connects and hands it one /dev/fuse descriptor (not mounted: no server
// could answer it, which is not what these tests look at).
func fakePlugin(t *testing.T) (string, func() *handover.Conn) {
	t.Helper()
	testenv.RequireFUSE(t)
	dir, err := os.MkdirTemp("", "keeper")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "keeper.sock")
	l, err := handover.Listen(sock, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	accept := func() *handover.Conn {
		t.Helper()
		c, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		m, _, err := c.Recv()
		if err != nil || m.Kind != handover.Hello || m.Role != "keeper" {
			t.Fatalf("first message %+v, %v; want the keeper's hello", m, err)
		}
		return c
	}
	return sock, accept
}

// run runs k until the test ends.
func run(t *testing.T, k *Keeper) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- k.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// runWithConnection runs k until the test ends, accepts its session as the fake plugin and opens a /dev/fuse
// descriptor for the test to hand it.
func runWithConnection(t *testing.T, k *Keeper, accept func() *handover.Conn) (*handover.Conn, *os.File) {
	t.Helper()
	run(t, k)
	c := accept()
	dev, err := fuseconn.Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	return c, dev
}

// TestCrashLoopBacksOff: a FUSE server that dies right after every start (here: a binary that exits at once)
// is restarted at once a few times, then at most once a second, instead of in a hot loop.
func TestCrashLoopBacksOff(t *testing.T) {
	sock, accept := fakePlugin(t)
	var log testenv.SyncBuffer
	status := filepath.Join(t.TempDir(), "status.json")
	k, err := New(Config{PluginSocket: sock, DummyFusePath: "/bin/false", VolumesPerServer: 1, StatusFile: status}, &log)
	if err != nil {
		t.Fatal(err)
	}
	c, dev := runWithConnection(t, k, accept)
	if err := c.Send(handover.Msg{Kind: handover.Serve, Volume: "vol-1"}, dev); err != nil {
		t.Fatal(err)
	}
	// freeRestarts immediate restarts after the first start, then at most one a second: the gaps between the
	// later starts have a lower bound, which a loaded machine can only lengthen (a hot loop makes them
	// microseconds). How soon they come is not asserted: that is the machine's.
	want := freeRestarts + 4
	testenv.Eventually(t, 30*time.Second, fmt.Sprintf("%d server starts", want), func() bool {
		return len(startTimes(t, log.String())) >= want
	})
	starts := startTimes(t, log.String())
	for i := freeRestarts + 1; i < len(starts); i++ {
		if gap := starts[i].Sub(starts[i-1]); gap < restartPeriod*9/10 {
			t.Errorf("start %d came %s after the one before, want at least %s (the back-off) once %d quick deaths passed:\n%s",
				i+1, gap, restartPeriod, freeRestarts+1, log.String())
		}
	}
	st, err := ReadStatus(status)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Plugin || len(st.Connections) != 1 || st.Connections[0].Volume != "vol-1" || st.Connections[0].Initialised {
		t.Errorf("status %+v: want the plugin connected and vol-1 held, not initialised", st)
	}
}

// startTimes are the times of the keeper's "started FUSE server" lines in log (each line starts with its
// RFC 3339 time).
func startTimes(t *testing.T, log string) []time.Time {
	t.Helper()
	var out []time.Time
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, "started FUSE server") {
			continue
		}
		stamp, _, _ := strings.Cut(line, " ")
		at, err := time.Parse(time.RFC3339Nano, stamp)
		if err != nil {
			t.Fatalf("keeper line without its time: %q", line)
		}
		out = append(out, at)
	}
	return out
}

func TestServerOf(t *testing.T) {
	st := Status{Connections: []ConnStatus{{Volume: "a", ServerPID: 7}, {Volume: "b"}}}
	if pid, err := st.ServerOf("a"); err != nil || pid != 7 {
		t.Errorf("ServerOf(a) = %d, %v", pid, err)
	}
	if _, err := st.ServerOf("b"); err == nil || !strings.Contains(err.Error(), "no FUSE server right now") {
		t.Errorf("ServerOf(b) = %v", err)
	}
	if _, err := st.ServerOf("c"); err == nil || !strings.Contains(err.Error(), "holds no connection") {
		t.Errorf("ServerOf(c) = %v", err)
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	for name, c := range map[string]Config{
		"no socket":         {DummyFusePath: "/bin/true", VolumesPerServer: 1},
		"no server binary":  {PluginSocket: "/x.sock", VolumesPerServer: 1},
		"not executable":    {PluginSocket: "/x.sock", DummyFusePath: "/etc/passwd", VolumesPerServer: 1},
		"no volumes/server": {PluginSocket: "/x.sock", DummyFusePath: "/bin/true"},
	} {
		if _, err := New(c, os.Stderr); err == nil {
			t.Errorf("%s: New accepted %+v", name, c)
		}
	}
}

// TestHelloCarriesTheSecret: the keeper proves itself with the plugin's per-node secret, read from its file at
// every connection (a restarted plugin writes a new one).
func TestHelloCarriesTheSecret(t *testing.T) {
	testenv.RequireFUSE(t)
	dir, err := os.MkdirTemp("", "keeper")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "keeper.sock")
	secret := filepath.Join(dir, "keeper.secret")
	if err := os.WriteFile(secret, []byte("s3cret"), 0o400); err != nil {
		t.Fatal(err)
	}
	l, err := handover.Listen(sock, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	k, err := New(Config{PluginSocket: sock, SecretFile: secret, DummyFusePath: "/bin/false", VolumesPerServer: 1}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	run(t, k)
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetRecvDeadline(time.Now().Add(10 * time.Second))
	m, _, err := c.Recv()
	if err != nil || m.Kind != handover.Hello || string(m.Secret) != "s3cret" {
		t.Fatalf("first message %+v, %v; want a hello with the secret", m, err)
	}
}

// TestFailedServeIsHandedAgain: a server that reports it could not serve a connection (here: it refuses the
// takeover, the record being garbage) lives on, and so does the connection the keeper holds: the keeper hands
// it to a server again, with the back-off of a crash, instead of leaving it unserved until the plugin aborts it.
func TestFailedServeIsHandedAgain(t *testing.T) {
	sock, accept := fakePlugin(t)
	server := testenv.Build(t, "dummy-fuse")
	var log testenv.SyncBuffer
	k, err := New(Config{PluginSocket: sock, DummyFusePath: server, VolumesPerServer: 1}, &log)
	if err != nil {
		t.Fatal(err)
	}
	c, dev := runWithConnection(t, k, accept)
	if err := c.Send(handover.Msg{Kind: handover.Serve, Volume: "vol-1", Init: []byte("not an INIT record")}, dev); err != nil {
		t.Fatal(err)
	}
	const stopped = "vol-1: its server pid"
	testenv.Eventually(t, 20*time.Second, "a second refusal of vol-1 (the keeper handed it again)", func() bool {
		return strings.Count(log.String(), stopped) >= 2
	})
	time.Sleep(2 * time.Second)
	if n := strings.Count(log.String(), stopped); n > freeRestarts+6 {
		t.Errorf("%d refusals within about 2 s: the keeper hands the connection again in a hot loop:\n%s", n, log.String())
	}
	if !strings.Contains(log.String(), "cannot take over") {
		t.Errorf("the refusals do not say why:\n%s", log.String())
	}
}

// TestKeeperDialsOnAfterAnError: an error other than "no socket yet" or "not listening" (here ENOTDIR; on a real
// node EACCES between the plugin's bind and its chown of the socket) must not end the keeper's dialling: once the
// plugin listens, the keeper connects and says hello.
func TestKeeperDialsOnAfterAnError(t *testing.T) {
	dir := t.TempDir()
	notDir := filepath.Join(dir, "csi")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(notDir, "keeper.sock")
	var log testenv.SyncBuffer
	k, err := New(Config{PluginSocket: sock, DummyFusePath: "/bin/false", VolumesPerServer: 1, RedialInterval: 20 * time.Millisecond}, &log)
	if err != nil {
		t.Fatal(err)
	}
	run(t, k)
	testenv.Eventually(t, 10*time.Second, "the keeper to log its failed dial", func() bool {
		return strings.Contains(log.String(), "connecting to the plugin")
	})
	if err := os.Remove(notDir); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(notDir, 0o700); err != nil {
		t.Fatal(err)
	}
	l, err := handover.Listen(sock, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan *handover.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			accepted <- c
		}
		close(accepted)
	}()
	select {
	case c, ok := <-accepted:
		if !ok {
			t.Fatal("accept failed")
		}
		defer c.Close()
		c.SetRecvDeadline(time.Now().Add(10 * time.Second))
		if m, _, err := c.Recv(); err != nil || m.Kind != handover.Hello {
			t.Fatalf("first message %+v, %v; want a hello", m, err)
		}
	case <-time.After(10 * time.Second):
		l.Close()
		t.Fatalf("the keeper did not connect within 10s of the plugin's listen; its log:\n%s", log.String())
	}
	l.Close()
}
