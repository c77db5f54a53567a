package relayfs_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseconn"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver/backing"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// waitTimeout bounds every wait; generous, the machine is shared.
const waitTimeout = 30 * time.Second

// realBackend runs one real FUSE server on a directory of the test, and runs it again after a kill.
type realBackend struct {
	t      testing.TB
	lab    *testenv.Lab
	server fuseserver.Server
	dir    string
	proc   *testenv.Proc
	// runs are every process of the server started so far, proc the last.
	runs []*testenv.Proc
	// startKill is how long each start after a kill took, from the kill to serving (as start's probe saw it).
	startKill []time.Duration
	killedAt  time.Time
	// gcs is gcsfuse's bucket, s3 s3fs's (nil for another server).
	gcs *backing.FakeGCS
	s3  *backing.FakeS3
}

// newBackend prepares the server called name (squashfuse, gcsfuse or s3fs) with what it reads.
func newBackend(t testing.TB, lab *testenv.Lab, name string) *realBackend {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	spec := fuseserver.Spec{Name: name}
	if name == fuseserver.DummyFuse {
		spec.Path = testenv.Build(t, "dummy-fuse") // the relay bench's floor: a server that answers from memory
	} else {
		spec.Path = testenv.RealServer(t, name)
	}
	var gcs *backing.FakeGCS
	var s3 *backing.FakeS3
	switch name {
	case fuseserver.Squashfuse:
		testenv.RealServer(t, "mksquashfs")
		image := filepath.Join(t.TempDir(), "tree.squashfs")
		if err := backing.SquashfsImage(ctx, image); err != nil {
			t.Fatal(err)
		}
		spec.Opts = map[string]string{"image": image}
	case fuseserver.Gcsfuse:
		gcs = testenv.FakeGCS(ctx, t, t.TempDir())
		spec.Opts = map[string]string{"endpoint": gcs.Endpoint}
	case s3fs:
		// Debian's s3fs (libfuse2, mounts itself) against rclone's fake S3, written to (access=rw).
		spec.Name = filepath.Join("..", "..", "docs", "servers", "s3fs.yaml")
		s3 = fakeS3(ctx, t)
		spec.Opts = map[string]string{"url": s3.URL, "passwd-file": s3.Passwd, "access": "rw"}
	}
	server, err := fuseserver.New(spec)
	if err != nil {
		t.Fatal(err)
	}
	return &realBackend{t: t, lab: lab, server: server, dir: lab.Dir(), gcs: gcs, s3: s3}
}

// s3fs is the name newBackend knows Debian's s3fs by (its spec is a file, docs/servers/s3fs.yaml).
const s3fs = "s3fs"

// fakeS3 starts rclone's fake S3 for s3fs run as this test's user, stopped when t ends.
func fakeS3(ctx context.Context, t testing.TB) *backing.FakeS3 {
	t.Helper()
	rclone := testenv.FindRealServer("rclone")
	if rclone == "" {
		testenv.SkipOrFail(t, "needs rclone for its fake S3 (rclone serve s3): make servers WITH_RCLONE=1")
	}
	dir := t.TempDir()
	log, err := os.Create(filepath.Join(dir, "rclone-serve-s3.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	f, err := backing.StartFakeS3(ctx, rclone, dir, os.Geteuid(), log)
	if err != nil {
		out, _ := os.ReadFile(log.Name())
		t.Fatalf("%v; its log:\n%s", err, out)
	}
	t.Cleanup(f.Stop)
	return f
}

// object reads object name from the storage behind the server, not through any mount: the fake GCS's API,
// or the directory that is the fake S3's bucket.
func (b *realBackend) object(ctx context.Context, name string) ([]byte, error) {
	switch {
	case b.gcs != nil:
		return b.gcs.Object(ctx, name)
	case b.s3 != nil:
		return b.s3.Object(name)
	}
	return nil, fmt.Errorf("%s has no storage of objects", b.server.Name())
}

// start mounts the server on its directory and waits until it serves the file.
func (b *realBackend) start() {
	b.t.Helper()
	b.proc = b.lab.Start(b.server.Name(), fuseserver.Command(b.server, b.server.MountArgs(b.dir)))
	b.runs = append(b.runs, b.proc)
	b.waitServing()
}

// waitServing waits until the server serves the file.
func (b *realBackend) waitServing() {
	b.t.Helper()
	path := filepath.Join(b.dir, fuseserver.ServedFile)
	testenv.Eventually(b.t, waitTimeout, b.server.Name()+" serving "+path+" (its log: "+b.proc.LogPath+")", func() bool {
		if b.proc.Exited() {
			b.t.Fatalf("%s exited: %v\n%s", b.server.Name(), b.proc.Err(), b.proc.Tail())
		}
		var fs unix.Statfs_t
		if unix.Statfs(b.dir, &fs) != nil || fs.Type != unix.FUSE_SUPER_MAGIC {
			return false
		}
		got, err := testenv.ReadFile(b.t, path, 5*time.Second)
		return err == nil && string(got) == fuseserver.Content
	})
	if !b.killedAt.IsZero() {
		b.startKill = append(b.startKill, time.Since(b.killedAt))
		b.killedAt = time.Time{}
	}
}

// startLater starts the server's next run now, held in a shell until the returned function lets it go on and
// waits until it serves (as start). A test that holds files on a writable relay's mount must start servers
// this way: a fork's exec closes the child's copies of them, each close a FLUSH the relay answers only once
// a server is back.
func (b *realBackend) startLater() func() {
	b.t.Helper()
	gate, open, err := os.Pipe()
	if err != nil {
		b.t.Fatal(err)
	}
	defer gate.Close()
	inner := fuseserver.Command(b.server, b.server.MountArgs(b.dir))
	cmd := exec.Command("/bin/sh", append([]string{"-c", `read go && exec "$@"`, "sh", inner.Path}, inner.Args[1:]...)...)
	cmd.Env, cmd.Stdin = inner.Env, gate
	p := b.lab.Start(b.server.Name(), cmd)
	b.t.Cleanup(func() { open.Close() })
	return func() {
		b.t.Helper()
		if _, err := open.WriteString("go\n"); err != nil {
			b.t.Fatal(err)
		}
		b.proc = p
		b.runs = append(b.runs, p)
		b.waitServing()
	}
}

// logs are the logs of every run of the server so far.
func (b *realBackend) logs() string {
	var out strings.Builder
	for _, p := range b.runs {
		out.WriteString(p.Log())
	}
	return out.String()
}

// stop stops the server with SIGSTOP and waits until every thread of it is stopped: a request sent before
// would still be taken by a thread on its way to stopping, and the relay's thread waiting for it could then
// not even be killed until the server answers.
func (b *realBackend) stop() {
	b.t.Helper()
	b.proc.Signal(syscall.SIGSTOP)
	testenv.Eventually(b.t, waitTimeout, b.server.Name()+" stopped in every thread", func() bool {
		stats, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", b.proc.PID()))
		for _, st := range stats {
			stat, err := os.ReadFile(st)
			// The state follows the command name, which is in parentheses.
			i := strings.LastIndexByte(string(stat), ')')
			if err != nil || i < 0 || i+2 >= len(stat) || stat[i+2] != 'T' {
				return false
			}
		}
		return len(stats) > 0
	})
}

// kill kills the server with SIGKILL and detaches its dead mount, as a restarter would before starting
// the next one there.
func (b *realBackend) kill() {
	b.t.Helper()
	b.killedAt = time.Now()
	b.proc.Kill()
	if err := unix.Unmount(b.dir, unix.MNT_DETACH); err != nil {
		b.t.Fatalf("detaching the dead %s mount at %s: %v", b.server.Name(), b.dir, err)
	}
}

// relay is a dummy-fuse --relay-backend process serving a connection this test mounted and keeps a copy
// of, so that a successor can take it over.
type relay struct {
	bin, mnt, record, nodes string
	dev                     *os.File
	proc                    *testenv.Proc
}

func startRelay(t *testing.T, lab *testenv.Lab, backend string, extra ...string) *relay {
	t.Helper()
	r := &relay{bin: testenv.Build(t, "dummy-fuse"), mnt: lab.Dir(), record: filepath.Join(t.TempDir(), "init"), nodes: filepath.Join(t.TempDir(), "nodes")}
	dev, err := fuseconn.Open()
	if err != nil {
		t.Fatal(err)
	}
	writable := slices.Contains(extra, "--relay-writable") // mounted as dummy-fuse mounts it
	if err := fuseconn.Mount(dev, r.mnt, fuseconn.MountOptions{Name: "dummy-fuse", Source: "dummy-fuse-relay", ReadOnly: !writable, DefaultPermissions: writable, AllowOther: true}); err != nil {
		dev.Close()
		t.Fatal(err)
	}
	r.dev = dev
	t.Cleanup(func() { dev.Close() }) // the Lab's cleanup, later, aborts the connection
	r.proc = r.run(t, lab, append([]string{"--relay-backend", backend, "--save-init", r.record}, extra...)...)
	testenv.Eventually(t, waitTimeout, "the relay to save its handover record", func() bool {
		if r.proc.Exited() {
			t.Fatalf("relay exited: %v\n%s", r.proc.Err(), r.proc.Tail())
		}
		_, err := os.Stat(r.record)
		return err == nil
	})
	return r
}

// run starts a relay process on the test's connection with args.
func (r *relay) run(t *testing.T, lab *testenv.Lab, args ...string) *testenv.Proc {
	t.Helper()
	cmd := exec.Command(r.bin, append(append([]string{"--direct-io", "--node-table", r.nodes}, args...), "/dev/fd/3")...)
	cmd.ExtraFiles = []*os.File{r.dev}
	return lab.Start("relay", cmd)
}

// runLater starts a relay process with args now, held in a shell until the returned function lets it go
// on. A successor must be started this way: forking while this process holds files on the relay's mount
// would hang once the relay is dead, because the child's exec closes its copies of them, and each close
// waits for a FLUSH that only the successor would answer.
func (r *relay) runLater(t *testing.T, lab *testenv.Lab, args ...string) (*testenv.Proc, func()) {
	t.Helper()
	gate, open, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer gate.Close()
	argv := append(append([]string{"-c", `read go && exec "$@"`, "sh", r.bin, "--direct-io", "--node-table", r.nodes}, args...), "/dev/fd/3")
	cmd := exec.Command("/bin/sh", argv...)
	cmd.Stdin = gate
	cmd.ExtraFiles = []*os.File{r.dev}
	p := lab.Start("relay", cmd)
	t.Cleanup(func() { open.Close() })
	return p, func() {
		if _, err := open.WriteString("go\n"); err != nil {
			t.Fatal(err)
		}
	}
}

// reader reads the file again and again, keeping one descriptor (O_DIRECT: every read reaches the relay
// and, through it, the real server) or opening it for every read, and records each read.
type reader struct {
	name string
	mu   sync.Mutex
	ok   []time.Time // when each good read completed
	errs []string
	done chan struct{}
}

func startReader(t *testing.T, path string, keepOpen bool, stop <-chan struct{}) *reader {
	t.Helper()
	r := &reader{name: "reopening reader", done: make(chan struct{})}
	var f *os.File
	if keepOpen {
		r.name = "keep-open reader"
		var err error
		if f, err = os.OpenFile(path, os.O_RDONLY|syscall.O_DIRECT, 0); err != nil {
			t.Fatal(err)
		}
	}
	go func() {
		defer close(r.done)
		if f != nil {
			defer f.Close()
		}
		buf := make([]byte, 4096)
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			var got []byte
			var err error
			if f != nil {
				var n int
				n, err = f.ReadAt(buf, 0)
				got = buf[:n]
				if err == io.EOF {
					err = nil
				}
			} else {
				got, err = os.ReadFile(path)
			}
			r.mu.Lock()
			switch {
			case err != nil:
				r.errs = append(r.errs, fmt.Sprintf("%s: %v", time.Now().Format("15:04:05.000"), err))
			case string(got) != fuseserver.Content:
				r.errs = append(r.errs, fmt.Sprintf("%s: read %q", time.Now().Format("15:04:05.000"), got))
			default:
				r.ok = append(r.ok, time.Now())
			}
			r.mu.Unlock()
		}
	}()
	return r
}

// goodReads returns how many reads succeeded so far.
func (r *reader) goodReads() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ok)
}

// stall is the longest gap between two good reads around moment at: the first good read after it minus the
// last one before it.
func (r *reader) stall(at time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	i, _ := slices.BinarySearchFunc(r.ok, at, func(a, b time.Time) int { return a.Compare(b) })
	if i == 0 || i == len(r.ok) {
		return -1
	}
	return r.ok[i].Sub(r.ok[i-1])
}

// stopReaders stops the readers and waits for them, bounded: a reader stuck in a read means a hang.
func stopReaders(t *testing.T, stop chan struct{}, readers ...*reader) {
	t.Helper()
	close(stop)
	for _, r := range readers {
		select {
		case <-r.done:
		case <-time.After(waitTimeout):
			t.Fatalf("the %s is still inside a read %s after it was told to stop", r.name, waitTimeout)
		}
	}
}

// TestRelayKeepsReadsThroughServerKills runs the relay in front of each real server, kills the server with
// SIGKILL again and again and mounts a new one at the same place, and checks that a reader keeping its
// descriptor and one opening the file for every read never see a failed or wrong read: a stall only, which
// it reports (from the readers' own timestamps: the gap between the last good read before a kill and the
// first one after it).
func TestRelayKeepsReadsThroughServerKills(t *testing.T) {
	testenv.RequireFUSE(t)
	for _, name := range []string{fuseserver.Squashfuse, fuseserver.Gcsfuse} {
		t.Run(name, func(t *testing.T) {
			lab := testenv.NewLab(t)
			b := newBackend(t, lab, name)
			b.start()
			r := startRelay(t, lab, b.dir)
			path := filepath.Join(r.mnt, fuseserver.ServedFile)
			stop := make(chan struct{})
			readers := []*reader{startReader(t, path, true, stop), startReader(t, path, false, stop)}
			defer func() {
				select {
				case <-stop:
				default:
					stopReaders(t, stop, readers...)
				}
			}()
			for _, rd := range readers {
				testenv.Eventually(t, waitTimeout, "a first read by the "+rd.name, func() bool { return rd.goodReads() >= 1 })
			}
			fdsBefore := openFDs(t, r.proc.PID())
			const kills = 10
			kTimes := killAndRestart(t, b, kills, readers...)
			// The roots and files opened on the dead backends were closed: no descriptor leaks per kill.
			testenv.Eventually(t, waitTimeout, fmt.Sprintf("the relay to hold no more descriptors than the %d before the kills", fdsBefore), func() bool {
				return openFDs(t, r.proc.PID()) <= fdsBefore
			})
			stopReaders(t, stop, readers...)
			for _, rd := range readers {
				if len(rd.errs) > 0 {
					t.Errorf("the %s saw %d failed reads (of %d good), first: %v", rd.name, len(rd.errs), len(rd.ok), rd.errs[:min(len(rd.errs), 5)])
				}
				var stalls []time.Duration
				for _, at := range kTimes {
					if s := rd.stall(at); s >= 0 {
						stalls = append(stalls, s)
					}
				}
				slices.Sort(stalls)
				if len(stalls) == 0 {
					t.Errorf("the %s has no read on both sides of any kill", rd.name)
					continue
				}
				t.Logf("%s, %s: %d kills, %d good reads, %d failed; stall per kill p50 %s, max %s",
					name, rd.name, kills, len(rd.ok), len(rd.errs), stalls[len(stalls)/2].Round(time.Millisecond), stalls[len(stalls)-1].Round(time.Millisecond))
			}
			// What the stall is made of: the kill, the detach and the server's start, until it served the test.
			starts := slices.Clone(b.startKill)
			slices.Sort(starts)
			t.Logf("%s: from a kill to the next server serving (the test's own probe): p50 %s, max %s",
				name, starts[len(starts)/2].Round(time.Millisecond), starts[len(starts)-1].Round(time.Millisecond))
			// Every kill left the relay's root descriptor dead, and the readers' next read found it so.
			if got := strings.Count(r.proc.Log(), "serves again"); got != kills {
				t.Errorf("the relay logged %d backends that came back, want %d; its log:\n%s", got, kills, r.proc.Tail())
			}
		})
	}
}

// TestRelayBackendNeverReturns: a server that is not started again makes a read fail with the backend's
// errno once --backend-wait is over, not hang; the relay says so in its log and serves again once a server
// is mounted there later.
func TestRelayBackendNeverReturns(t *testing.T) {
	testenv.RequireFUSE(t)
	lab := testenv.NewLab(t)
	b := newBackend(t, lab, fuseserver.Squashfuse)
	b.start()
	const wait = 2 * time.Second
	// --attr-timeout 0 keeps no spare descriptors (spares.go): with one, an open within its time asks the
	// backend nothing and the backend's page cache answers the read, so nothing would fail to be waited out.
	r := startRelay(t, lab, b.dir, "--backend-wait", wait.String(), "--attr-timeout", "0")
	path := filepath.Join(r.mnt, fuseserver.ServedFile)
	if got, err := testenv.ReadFile(t, path, waitTimeout); err != nil || string(got) != fuseserver.Content {
		t.Fatalf("read through the relay: %q, %v", got, err)
	}
	b.kill()
	start := time.Now()
	_, err := testenv.ReadFile(t, path, wait+waitTimeout)
	took := time.Since(start)
	if !errors.Is(err, syscall.ENOTCONN) && !errors.Is(err, syscall.ECONNABORTED) {
		t.Errorf("read with the backend gone for good: %v, want ENOTCONN (the backend's errno)", err)
	}
	if took < wait-100*time.Millisecond {
		t.Errorf("the read failed after %s, before the backend wait of %s was over", took, wait)
	}
	t.Logf("the read failed after %s (backend wait %s): %v", took.Round(time.Millisecond), wait, err)
	// Later reads fail at once rather than waiting again for a backend that was given up.
	start = time.Now()
	if _, err := testenv.ReadFile(t, path, waitTimeout); err == nil {
		t.Error("a second read succeeded with no backend")
	} else if d := time.Since(start); d > wait/2 {
		t.Errorf("the second read failed only after %s", d)
	}
	if !strings.Contains(r.proc.Log(), "did not serve again within 2s") {
		t.Errorf("the relay did not log that it gave up; its log:\n%s", r.proc.Tail())
	}
	b.start()
	if got, err := testenv.ReadFile(t, path, waitTimeout); err != nil || string(got) != fuseserver.Content {
		t.Errorf("read once the backend was back: %q, %v", got, err)
	}
}

// TestRelayTakeover kills the relay itself with SIGKILL while readers run and a read is inside it (waiting
// for a stopped server), and a successor takes the
// connection over with the predecessor's handover record and node table: the kernel's node IDs and handles
// (the keep-open reader's descriptor) still work, the readers see no failed read, and a backend kill after
// the takeover is waited out as before.
func TestRelayTakeover(t *testing.T) {
	testenv.RequireFUSE(t)
	lab := testenv.NewLab(t)
	b := newBackend(t, lab, fuseserver.Squashfuse)
	b.start()
	r := startRelay(t, lab, b.dir)
	path := filepath.Join(r.mnt, fuseserver.ServedFile)
	var before unix.Stat_t
	if err := unix.Stat(path, &before); err != nil {
		t.Fatal(err)
	}
	succ, takeOver := r.runLater(t, lab, "--relay-backend", b.dir, "--takeover", r.record)
	stop := make(chan struct{})
	readers := []*reader{startReader(t, path, true, stop), startReader(t, path, false, stop)}
	defer func() {
		select {
		case <-stop:
		default:
			stopReaders(t, stop, readers...)
		}
	}()
	for _, rd := range readers {
		testenv.Eventually(t, waitTimeout, "a first read by the "+rd.name, func() bool { return rd.goodReads() >= 2 })
	}
	// A read inside the relay when it dies: the relay took it and waits for the stopped server. The kernel
	// keeps it (the test holds the connection) and resends it to the successor, which gets the answer once
	// the server goes on.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	b.stop()
	inFlight := readInFlight(t, f)
	// The killed relay does not finish exiting while the server is stopped: closing its files on the backend
	// sends FLUSH, which the kernel sends forced and waits for even in a dying process (fuse_flush in
	// fs/fuse/file.c). That does not hold up the successor.
	// The successor opens the backend's root as it starts, so the server goes on now; the read the dead relay
	// had taken can only be answered by the successor after the kernel resends it.
	r.proc.Signal(syscall.SIGKILL)
	killed := time.Now()
	takeOver()
	b.proc.Signal(syscall.SIGCONT)
	expectContent(t, inFlight, "the read inside the relay when it was killed", succ)
	r.proc.Wait(waitTimeout)
	f.Close() // only now: closing sends a FLUSH, which a dead relay would never answer
	for _, rd := range readers {
		n := rd.goodReads()
		testenv.Eventually(t, waitTimeout, "the "+rd.name+" to read twice more after the takeover (successor's log: "+succ.LogPath+")", func() bool {
			if succ.Exited() {
				t.Fatalf("the successor exited: %v\n%s", succ.Err(), succ.Tail())
			}
			return rd.goodReads() >= n+2
		})
	}
	var after unix.Stat_t
	if err := unix.Stat(path, &after); err != nil {
		t.Fatal(err)
	}
	if after.Ino != before.Ino {
		t.Errorf("inode number %d after the takeover, %d before", after.Ino, before.Ino)
	}
	b.kill()
	b.start()
	for _, rd := range readers {
		n := rd.goodReads()
		testenv.Eventually(t, waitTimeout, "the "+rd.name+" to read twice more after a backend kill under the successor", func() bool { return rd.goodReads() >= n+2 })
	}
	stopReaders(t, stop, readers...)
	for _, rd := range readers {
		if len(rd.errs) > 0 {
			t.Errorf("the %s saw %d failed reads, first: %v", rd.name, len(rd.errs), rd.errs[:min(len(rd.errs), 5)])
		}
		t.Logf("%s: stall at the relay's kill %s, %d good reads", rd.name, rd.stall(killed).Round(time.Millisecond), len(rd.ok))
	}
	if !strings.Contains(succ.Log(), "asked the kernel to resend") {
		t.Errorf("the successor did not take over with a resend; its log:\n%s", succ.Tail())
	}
}

// TestRelayReadInFlightAtServerKill: a read that is inside the real server when it dies (the server is
// stopped first, so that the read waits in it) fails there with ECONNABORTED; the relay waits for the next
// server and reads again, and the workload gets its data.
func TestRelayReadInFlightAtServerKill(t *testing.T) {
	testenv.RequireFUSE(t)
	lab := testenv.NewLab(t)
	b := newBackend(t, lab, fuseserver.Squashfuse)
	b.start()
	r := startRelay(t, lab, b.dir)
	path := filepath.Join(r.mnt, fuseserver.ServedFile)
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	b.stop()
	done := readInFlight(t, f)
	b.kill()
	b.start()
	expectContent(t, done, "the read in flight at the server's kill", r.proc)
	f.Close()
	if !strings.Contains(r.proc.Log(), "software caused connection abort") {
		t.Errorf("the relay did not see the read in flight fail with ECONNABORTED; its log:\n%s", r.proc.Tail())
	}
}

// openFDs counts the descriptors process pid holds.
// killAndRestart kills the backend's server kills times and starts it again, each time after every reader
// read twice more, and waits for two more reads of each after the last one; it returns the kills' times.
func killAndRestart(t *testing.T, b *realBackend, kills int, readers ...*reader) []time.Time {
	t.Helper()
	readTwice := func(what string) {
		for _, rd := range readers {
			n := rd.goodReads()
			testenv.Eventually(t, waitTimeout, "the "+rd.name+" to read twice more "+what, func() bool { return rd.goodReads() >= n+2 })
		}
	}
	var at []time.Time
	for k := range kills {
		readTwice(fmt.Sprintf("before kill %d", k+1))
		at = append(at, time.Now())
		b.kill()
		b.start()
	}
	readTwice("after the last kill")
	return at
}

func openFDs(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

type readResult struct {
	data string
	err  error
}

// readInFlight starts a read of f, whose server is stopped, and checks that it waits.
func readInFlight(t *testing.T, f *os.File) <-chan readResult {
	t.Helper()
	done := make(chan readResult, 1)
	go func() {
		buf := make([]byte, 4096)
		n, err := f.ReadAt(buf, 0)
		if err == io.EOF {
			err = nil
		}
		done <- readResult{string(buf[:n]), err}
	}()
	select {
	case res := <-done:
		t.Fatalf("the read returned while the server was stopped (%q, %v): it did not reach the server", res.data, res.err)
	case <-time.After(300 * time.Millisecond):
	}
	return done
}

// expectContent waits, bounded, for the read what to end with the content.
func expectContent(t *testing.T, done <-chan readResult, what string, relay *testenv.Proc) {
	t.Helper()
	select {
	case res := <-done:
		if res.err != nil || res.data != fuseserver.Content {
			t.Errorf("%s: %q, %v; want the content", what, res.data, res.err)
		}
	case <-time.After(waitTimeout):
		t.Fatalf("%s was still blocked after %s; the relay's log:\n%s", what, waitTimeout, relay.Tail())
	}
}
