package fusemode

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fdpass/fdpasstest"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/handover"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// listeningKeeper is a keeper mode of this test's user, listening.
func listeningKeeper(t *testing.T) (*Keeper, string) {
	t.Helper()
	k, dir := newTestKeeper(t, os.Getuid())
	if _, err := k.Recollect(Records{}); err != nil {
		t.Fatal(err)
	}
	return k, dir
}

// helloKeeper connects to k as its keeper would (with the secret) and waits until the session is in.
func helloKeeper(t *testing.T, k *Keeper) *handover.Conn {
	t.Helper()
	before := sessions(k)
	c := dialKeeper(t, k)
	if err := c.Send(handover.Msg{Kind: handover.Hello, Role: "keeper", PID: 1, Secret: k.secret}, nil); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the session to be in", func() bool { return sessions(k) == before+1 })
	return c
}

func sessions(k *Keeper) int {
	k.h.mu.Lock()
	defer k.h.mu.Unlock()
	return len(k.h.sessions)
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// recvKind waits for the next message on c, which must be of kind and volume.
func recvKind(t *testing.T, c *handover.Conn, kind handover.Kind, volume string) {
	t.Helper()
	c.SetRecvDeadline(time.Now().Add(5 * time.Second))
	m, f, err := c.Recv()
	if f != nil {
		f.Close()
	}
	if err != nil || m.Kind != kind || m.Volume != volume {
		t.Fatalf("got %+v, %v; want %s of %s", m, err, kind, volume)
	}
}

// TestKeeperModeNeedsAUser: there is no keeper socket open to any user.
func TestKeeperModeNeedsAUser(t *testing.T) {
	if _, err := NewKeeper(Options{KeeperSocket: "/nonexistent/keeper.sock", KeeperUID: -1}); err == nil {
		t.Error("NewKeeper without a keeper user succeeded")
	}
}

// TestKeeperNeedsTheSecret: the keeper's uid is not enough: a session must give this plugin run's secret,
// which the plugin writes beside the socket for the keeper's user only; the socket itself is not open to
// everyone.
func TestKeeperNeedsTheSecret(t *testing.T) {
	testenv.RequireFUSE(t)
	k, dir := listeningKeeper(t)
	st, err := os.Stat(filepath.Join(dir, KeeperSecretName))
	if err != nil || st.Mode().Perm() != 0o400 {
		t.Fatalf("secret file: %v %v, want mode 0400", st, err)
	}
	if st, err := os.Stat(k.opts.KeeperSocket); err != nil || st.Mode().Perm()&0o007 != 0 {
		t.Errorf("keeper socket: %v %v, want no access for others", st, err)
	}
	for name, secret := range map[string][]byte{"none": nil, "wrong": []byte("0123456789abcdef")} {
		c := dialKeeper(t, k)
		if err := c.Send(handover.Msg{Kind: handover.Hello, Role: "keeper", Secret: secret}, nil); err != nil {
			t.Fatal(err)
		}
		c.SetRecvDeadline(time.Now().Add(5 * time.Second))
		if _, _, err := c.Recv(); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("secret %s: %v, want the session closed", name, err)
		}
		if n := sessions(k); n != 0 {
			t.Errorf("secret %s: %d sessions accepted", name, n)
		}
	}
	helloKeeper(t, k) // the right one gets in
}

// TestSessionActsOnlyOnWhatItHolds: a session's reports about a connection handed to another session change
// nothing: neither its handover record (which every successor would replay) nor whether it is over.
func TestSessionActsOnlyOnWhatItHolds(t *testing.T) {
	testenv.RequireFUSE(t)
	k, dir := listeningKeeper(t)
	hostile := helloKeeper(t, k)
	good := helloKeeper(t, k)
	staging := filepath.Join(dir, "staging")
	c := k.h.add("vol-1", staging, mountConn(t, staging))
	recvKind(t, good, handover.Serve, "vol-1")
	for _, m := range []handover.Msg{
		{Kind: handover.Served, Volume: "vol-1", Init: []byte("poison"), PID: 666},
		{Kind: handover.Ended, Volume: "vol-1", Reason: "unmounted"},
	} {
		if err := hostile.Send(m, nil); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond)
	k.h.mu.Lock()
	init, ended, by := c.init, c.ended, c.servedBy()
	k.h.mu.Unlock()
	if init != nil || ended || by != 0 {
		t.Fatalf("after another session's reports: record %q, over %t, served by %d; want nothing changed", init, ended, by)
	}
	if err := good.Send(handover.Msg{Kind: handover.Served, Volume: "vol-1", Init: []byte("good"), PID: 7}, nil); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "vol-1 served", func() bool { ok, _ := k.h.served(c); return ok })
	if got := k.h.initRecord(c); string(got) != "good" {
		t.Errorf("record %q, want the serving session's", got)
	}
}

// TestHostileNewestSessionDoesNotBlockStages: a session that connects last and serves nothing does not get
// the new connections while one that serves is there; and a stage whose connection went unserved is
// ErrNoKeeper (the CO retries), not another error.
func TestHostileNewestSessionDoesNotBlockStages(t *testing.T) {
	testenv.RequireFUSE(t)
	k, dir := listeningKeeper(t)
	good := helloKeeper(t, k)
	s1 := filepath.Join(dir, "s1")
	c1 := k.h.add("vol-1", s1, mountConn(t, s1))
	recvKind(t, good, handover.Serve, "vol-1")
	if err := good.Send(handover.Msg{Kind: handover.Served, Volume: "vol-1", Init: []byte("r1"), PID: 7}, nil); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "vol-1 served", func() bool { ok, _ := k.h.served(c1); return ok })
	hostile := helloKeeper(t, k)
	recvKind(t, hostile, handover.Serve, "vol-1") // every initialised connection goes to every keeper
	s2 := filepath.Join(dir, "s2")
	k.h.add("vol-2", s2, mountConn(t, s2))
	recvKind(t, good, handover.Serve, "vol-2")

	// With only a session that does not serve, the stage gives up with ErrNoKeeper.
	k2, dir2 := listeningKeeper(t)
	helloKeeper(t, k2)
	s3 := filepath.Join(dir2, "s3")
	c3 := k2.h.add("vol-3", s3, mountConn(t, s3))
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := k2.h.waitServed(ctx, c3); !errors.Is(err, ErrNoKeeper) {
		t.Errorf("a connection its session does not serve: %v, want ErrNoKeeper", err)
	}
}

// TestSessionEndResendsOnlyItsConnections: when a session ends, the kernel is asked to resend the requests of
// the connections that session held, not of every connection.
func TestSessionEndResendsOnlyItsConnections(t *testing.T) {
	testenv.RequireFUSE(t)
	k, dir := listeningKeeper(t)
	var mu sync.Mutex
	resent := map[uintptr]int{}
	k.h.resend = func(dev *os.File) { mu.Lock(); resent[dev.Fd()]++; mu.Unlock() }
	a := helloKeeper(t, k)
	s1 := filepath.Join(dir, "s1")
	c1 := k.h.add("vol-1", s1, mountConn(t, s1))
	recvKind(t, a, handover.Serve, "vol-1")
	b := helloKeeper(t, k)
	s2 := filepath.Join(dir, "s2")
	c2 := k.h.add("vol-2", s2, mountConn(t, s2))
	recvKind(t, b, handover.Serve, "vol-2")
	b.Close()
	waitUntil(t, "the session to end", func() bool { return sessions(k) == 1 })
	mu.Lock()
	defer mu.Unlock()
	if resent[c1.dev.Fd()] != 0 || resent[c2.dev.Fd()] != 1 {
		t.Errorf("resends after the end of the session holding vol-2: vol-1 %d, vol-2 %d; want 0 and 1", resent[c1.dev.Fd()], resent[c2.dev.Fd()])
	}
}

// TestSlowDescriptorsDoNotPileUpThreads: sessions that send descriptors whose close blocks (a TCP socket with
// SO_LINGER towards a peer that does not read) cost the plugin at most its Closer's workers in threads, and
// the keeper still gets in afterwards.
func TestSlowDescriptorsDoNotPileUpThreads(t *testing.T) {
	testenv.RequireFUSE(t)
	k, _ := listeningKeeper(t)
	// Silent sessions take every slot, so that the attackers' connections wait unaccepted: each closes its
	// own copy of the slow descriptor while the plugin cannot have closed its one yet, leaving the plugin's
	// close the last, blocking one.
	var silent []*net.UnixConn
	for range maxKeeperSessions {
		silent = append(silent, rawConn(t, k))
	}
	waitUntil(t, "every session slot taken", func() bool { return len(k.h.slots) == maxKeeperSessions })
	time.Sleep(50 * time.Millisecond) // the accept loop now waits for a slot, not in accept
	before := fdpasstest.Threads(t)
	const attackers = 40
	var releases []func()
	for range attackers {
		f, release := fdpasstest.LingeringSocketAndRelease(t)
		if err := fdpassWrite(rawConn(t, k), f); err != nil {
			t.Fatal(err)
		}
		f.Close() // not the last reference: the one in flight is
		releases = append(releases, release)
	}
	k.h.greeting = 200 * time.Millisecond // for the attackers' sessions
	for _, c := range silent {
		c.Close()
	}
	time.Sleep(2 * time.Second)
	if n := fdpasstest.Threads(t) - before; n > closeWorkers+4 {
		t.Errorf("%d more threads after %d sessions sent a slow descriptor (Closer workers: %d)", n, attackers, closeWorkers)
	}
	// Newcomers wait while the Closer is full (the descriptors it holds are bounded); once the slow closes
	// end, the keeper gets in again.
	for _, release := range releases {
		release()
	}
	helloKeeper(t, k)
}

// TestSessionsAreBounded: connections that never say hello cost the plugin at most maxKeeperSessions
// descriptors; the rest wait in the kernel's backlog.
func TestSessionsAreBounded(t *testing.T) {
	testenv.RequireFUSE(t)
	k, _ := listeningKeeper(t)
	before := fdpasstest.FDs(t)
	const idle = 200
	for range idle {
		rawConn(t, k)
	}
	time.Sleep(time.Second)
	if n := fdpasstest.FDs(t) - before - idle; n > maxKeeperSessions+4 {
		t.Errorf("%d idle connections cost the plugin %d descriptors, want at most %d", idle, n, maxKeeperSessions+4)
	}
}

// TestAcceptSurvivesEMFILE: a moment without a free descriptor does not end the accept loop.
func TestAcceptSurvivesEMFILE(t *testing.T) {
	testenv.RequireFUSE(t)
	k, _ := listeningKeeper(t)
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	// One descriptor left (FDs counts the one it reads the list with): the connecting side takes it, so the
	// plugin's accept fails with EMFILE.
	low := lim
	low.Cur = uint64(fdpasstest.FDs(t))
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: k.opts.KeeperSocket, Net: "unixpacket"})
	time.Sleep(300 * time.Millisecond)
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	helloKeeper(t, k)
}

// rawConn connects to k's socket; it is closed when the test ends.
func rawConn(t *testing.T, k *Keeper) *net.UnixConn {
	t.Helper()
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: k.opts.KeeperSocket, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// fdpassWrite sends a hello that carries f, a protocol error.
func fdpassWrite(c *net.UnixConn, f *os.File) error {
	_, _, err := c.WriteMsgUnix([]byte(`{"kind":"hello"}`), unix.UnixRights(int(f.Fd())), nil)
	return err
}

// TestConnectionBeforeKeeperIsServed: a new connection mounted while no keeper is connected goes to the next
// one, whose report gives its record.
func TestConnectionBeforeKeeperIsServed(t *testing.T) {
	testenv.RequireFUSE(t)
	k, dir := listeningKeeper(t)
	staging := filepath.Join(dir, "staging")
	c := k.h.add("vol-1", staging, mountConn(t, staging))
	keeper := helloKeeper(t, k)
	recvKind(t, keeper, handover.Serve, "vol-1")
	if err := keeper.Send(handover.Msg{Kind: handover.Served, Volume: "vol-1", Init: []byte("rec"), PID: 7}, nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := k.h.waitServed(ctx, c); err != nil {
		t.Fatal(err)
	}
}

// TestServedPerSession: a connection counts as served while any session reports a server for it, so the end
// of one keeper (a rolling update) does not hide another's server; once none is left it is unserved from that
// moment, and a server that serves briefly and dies (a crash loop) does not move that moment.
func TestServedPerSession(t *testing.T) {
	c := &keptConn{}
	a, b := &keeperSession{}, &keeperSession{}
	t0 := time.Now()
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	c.setServed(a, 10, at(0))
	c.setServed(b, 20, at(1))
	c.setServed(a, 0, at(2))
	if c.servedBy() != 20 || !c.unservedSince.IsZero() {
		t.Fatalf("after one of two sessions ended: served by %d, unserved since %v; want 20 and never", c.servedBy(), c.unservedSince)
	}
	c.setServed(b, 0, at(3))
	if c.servedBy() != 0 || !c.unservedSince.Equal(at(3)) {
		t.Fatalf("after both ended: served by %d, unserved since %v; want 0 since %v", c.servedBy(), c.unservedSince, at(3))
	}
	c.setServed(a, 30, at(4))
	c.setServed(a, 0, at(5))
	if !c.unservedSince.Equal(at(3)) || !c.servedAt.Equal(at(4)) {
		t.Errorf("after a brief server: unserved since %v, served at %v; want %v and %v", c.unservedSince, c.servedAt, at(3), at(4))
	}
}
