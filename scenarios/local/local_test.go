package local

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver/backing"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/catalog"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/report"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// binDir holds csi-plugin, dummy-fuse and dummy-fuse-workload, built once for all tests (when they can run).
var (
	binDir   string
	buildErr error
)

func TestMain(m *testing.M) {
	MaybeInit() // the backend re-executes this test binary as its containers' init
	code := func() int {
		flag.Parse()                                         // for testing.Short
		if testenv.FUSEProblem() == "" && !testing.Short() { // -short: the tests that would need them skip
			dir, err := os.MkdirTemp("", "dfc-scenario-bin-")
			if err != nil {
				buildErr = err
			} else {
				defer os.RemoveAll(dir)
				binDir, buildErr = dir, build(dir)
			}
		}
		return m.Run()
	}()
	os.Exit(code)
}

// build builds the binaries into dir, and a next build of the keeper's two (another version, for upgrades)
// into dir/next, as make build does.
func build(dir string) error {
	for _, b := range []struct {
		out     string
		version string
		pkgs    []string
	}{
		{dir + "/", "", []string{"csi-plugin", "dummy-fuse", "dummy-fuse-workload"}},
		{filepath.Join(dir, NextDir) + "/", "test-next", []string{"csi-plugin", "dummy-fuse"}},
	} {
		args := []string{"build", "-o", b.out}
		if b.version != "" {
			args = append(args, "-ldflags=-X "+testenv.Module+"/internal/version.Version="+b.version)
		}
		for _, p := range b.pkgs {
			args = append(args, testenv.Module+"/"+p)
		}
		cmd := exec.Command("go", args...)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

// newBackend returns a local backend with the test binaries (skipping, or failing in CI, without root and
// /dev/fuse) and registers a cleanup that asserts nothing of the run is left: no mounts below dir, no
// process alive. Should the assertion fail, it still unmounts and kills, so one failure does not cascade.
func newBackend(t *testing.T, opts Options) (*Backend, string) {
	t.Helper()
	testenv.RequireFUSE(t)
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	servers := opts.ServersDir // a test's own, kept
	opts.BinariesIn(binDir)
	if servers != "" {
		opts.ServersDir = servers
	}
	b := New(opts)
	dir := t.TempDir()
	t.Cleanup(func() {
		for _, kp := range b.procs() {
			if p := kp.p; !p.exited() {
				t.Errorf("process %d (%s) still running after the run", p.pid(), p.cmd.Path)
				_ = p.cmd.Process.Kill()
			}
		}
		if ms, err := mountsUnder(dir); err != nil || len(ms) > 0 {
			t.Errorf("mounts left under %s after the run: %d (%v)", dir, len(ms), err)
			_, _ = unmountAll(dir)
		}
	})
	return b, dir
}

func run(t *testing.T, ctx context.Context, b *Backend, sc scenarios.Scenario, dir string) *scenarios.Outcome {
	t.Helper()
	var out bytes.Buffer
	o := scenarios.Run(ctx, b, sc, scenarios.RunOptions{Dir: dir, Out: &out})
	report.PrintVerdicts(&out, o)
	if err := report.WriteReport(o); err != nil {
		t.Errorf("report: %v", err)
	}
	t.Logf("%s (wall %s):\n%s", sc.Name, o.Measures.Wall.Round(time.Millisecond), out.String())
	return o
}

// TestScenarios runs every scenario of the catalog on the local backend modelling the newest kubelet, and the
// scenarios to check on every release (their outcome or the kubelet code under them depends on the version) on
// every other modelled kubelet as well; each expected outcome for that kubelet must hold.
func TestScenarios(t *testing.T) {
	for i, kv := range KubeletVersions {
		for _, sc := range catalog.All() {
			if i > 0 && !sc.OnEveryRelease() {
				continue
			}
			t.Run(kv+"/"+sc.Name, func(t *testing.T) {
				opts := Options{KubeletVersion: kv}
				if !sc.RunsWithDummyFuse() {
					// A row that needs a real server (the rows that write: gcsfuse) runs with its first.
					server := sc.Servers[0]
					opts.ServersDir = filepath.Dir(testenv.RealServer(t, server))
					var err error
					if sc, err = sc.ForServer(server); err != nil {
						t.Fatal(err)
					}
				}
				b, dir := newBackend(t, opts)
				o := run(t, context.Background(), b, sc, dir)
				if o.Kubelet.String() != kv {
					t.Errorf("the run was judged as kubelet %s, want %s", o.Kubelet, kv)
				}
				if want := len(sc.ExpectFor(o.Kubelet)); len(o.Verdicts) != want {
					t.Errorf("%d verdicts, want the %d expectations for kubelet %s", len(o.Verdicts), want, kv)
				}
				if !o.Passed() {
					t.Errorf("scenario %s on kubelet %s failed (see the log above); report in %s", sc.Name, kv, dir)
				}
				for _, name := range o.Artifacts {
					// The backing's log holds what its fake GCS server warns of: often nothing.
					if st, err := os.Stat(filepath.Join(o.Dir, name)); err != nil || (st.Size() == 0 && name != "backing.log") {
						t.Errorf("artifact %s: %v (empty or missing)", name, err)
					}
				}
				want := "plugin.log workload.log kubelet.log"
				if sc.Plugin.Server() != fuseserver.DummyFuse {
					want += " backing.log"
				}
				if sc.Pod.Sidecar != nil {
					want += " sidecar.log"
				}
				if sc.Plugin.Topology().Has(topology.KeeperContainer) {
					want += " keeper.log"
				}
				if sc.Plugin.Remediation != nil {
					want += " remediator.log"
				}
				if got := strings.Join(o.Artifacts, " "); got != want {
					t.Errorf("artifacts %q, want %q: the plugin's, the workload's, the local kubelet's, and the sidecar's or the keeper's logs", got, want)
				}
			})
		}
	}
}

func TestModelledKubelet(t *testing.T) {
	for in, want := range map[string]string{"": KubeletVersions[0], "v1.36": "v1.36.3", "1.36.3": "v1.36.3",
		"v1.37": "v1.37.2", "v1.37.2": "v1.37.2"} {
		v, err := ModelledKubelet(in)
		if err != nil || v.String() != want {
			t.Errorf("ModelledKubelet(%q) = %s, %v; want %s", in, v, err, want)
		}
	}
	for _, in := range []string{"v1.35.4", "v1.37.1", "v2", "latest"} {
		if v, err := ModelledKubelet(in); err == nil {
			t.Errorf("ModelledKubelet(%q) = %s, want an error", in, v)
		}
	}
}

// TestWrongExpectationFails runs the restart scenario for real, judged by expectations that contradict what
// happens; the verdicts must say FAIL.
func TestWrongExpectationFails(t *testing.T) {
	sc, err := catalog.Lookup("restart")
	if err != nil {
		t.Fatal(err)
	}
	sc.Expect = []scenarios.Expectation{
		{Check: scenarios.Recovers{C: "reader", Instance: scenarios.SameInstance}}, // it recovers only after a restart
		{Check: scenarios.Restarts{C: "reader", Min: 0, Max: 0}},                   // it is restarted
		{Check: scenarios.FailsWith{C: "reader", Errno: "ENOTCONN"}},               // true: the run itself is fine
	}
	b, dir := newBackend(t, Options{})
	o := run(t, context.Background(), b, sc, dir)
	if o.Err != nil || o.CleanupErr != nil {
		t.Fatalf("the run itself must work: %v / %v", o.Err, o.CleanupErr)
	}
	if o.Passed() {
		t.Fatal("a run judged by wrong expectations passed")
	}
	for i, want := range []bool{false, false, true} {
		if o.Verdicts[i].Result.OK != want {
			t.Errorf("verdict %d (%s) = %v, want %v: %s", i, o.Verdicts[i].Expectation.Check.Describe(),
				o.Verdicts[i].Result.OK, want, o.Verdicts[i].Result.Why)
		}
	}
}

// cancelAfterKill cancels the run right after the plugin kill, as Ctrl-C would.
type cancelAfterKill struct {
	*Backend
	cancel context.CancelFunc
}

func (c cancelAfterKill) Kill(ctx context.Context, comp topology.Component) error {
	err := c.Backend.Kill(ctx, comp)
	c.cancel()
	return err
}

// TestCancelledRunCleansUp: an interrupted run (dead FUSE mounts, a container in back-off) still stops every
// process and unmounts everything (asserted by newBackend's cleanup).
func TestCancelledRunCleansUp(t *testing.T) {
	sc, err := catalog.Lookup("restart")
	if err != nil {
		t.Fatal(err)
	}
	b, dir := newBackend(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := scenarios.Run(ctx, cancelAfterKill{b, cancel}, sc, scenarios.RunOptions{Dir: dir})
	if !o.ErrCancelled() || o.Passed() {
		t.Fatalf("want a cancelled, failed run; err=%v", o.Err)
	}
	if o.CleanupErr != nil {
		t.Fatalf("cleanup after cancel: %v", o.CleanupErr)
	}
}

// TestKeepPrintsWorkingCleanup: --keep leaves the run up, and the printed commands clean it completely.
func TestKeepPrintsWorkingCleanup(t *testing.T) {
	sc, err := catalog.Lookup("restart-no-restore")
	if err != nil {
		t.Fatal(err)
	}
	sc.Steps = sc.Steps[:2] // warm up, kill: leaves a dead FUSE mount under a running container
	b, dir := newBackend(t, Options{Keep: true})
	o := run(t, context.Background(), b, sc, dir)
	if o.Err != nil || o.CleanupErr != nil {
		t.Fatalf("run: %v / %v", o.Err, o.CleanupErr)
	}
	if ms, _ := mountsUnder(dir); len(ms) == 0 {
		t.Fatal("--keep unmounted everything")
	}
	note := b.KeepNote()
	t.Logf("--keep output:\n%s", note)
	ran := 0
	sc2 := bufio.NewScanner(strings.NewReader(note))
	for sc2.Scan() {
		f := strings.Fields(sc2.Text())
		switch {
		case len(f) > 2 && f[0] == "kill" && f[1] == "-KILL":
			for _, s := range f[2:] {
				pid, err := strconv.Atoi(s)
				if err != nil {
					t.Fatalf("bad pid in %q", sc2.Text())
				}
				if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
					t.Errorf("kill %d: %v", pid, err)
				}
			}
			ran++
		case len(f) == 3 && f[0] == "umount" && f[1] == "-l":
			if err := unix.Unmount(f[2], unix.MNT_DETACH); err != nil {
				t.Errorf("umount -l %s: %v", f[2], err)
			}
			ran++
		}
	}
	if ran < 3 {
		t.Errorf("expected kill and umount commands, ran %d", ran)
	}
	for _, kp := range b.procs() {
		p := kp.p
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			t.Errorf("pid %d survived the printed kill", p.pid())
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "report.md")); err != nil {
		t.Error(err)
	}
}

func TestBackoff(t *testing.T) {
	base := 500 * time.Millisecond
	b := restartBackoff{base: base, max: 4 * base}
	exit := time.Unix(1000, 0)
	// kubelet syncs right after the exit, then every pod-worker period (one base) while starts fail; a failed
	// start leaves FinishedAt at the exit. Starts: at 0, 1, 2, 4 bases, then (delay capped at 4) every sync.
	var starts []int
	for k := 0; k <= 7; k++ {
		if b.sync(exit, exit.Add(time.Duration(k)*base)) {
			starts = append(starts, k)
		}
	}
	if fmt.Sprint(starts) != "[0 1 2 4 5 6 7]" {
		t.Errorf("starts at %v bases after the exit, want [0 1 2 4 5 6 7]", starts)
	}
	// A container that ran and exited again waits the current delay from its new exit.
	exit2 := exit.Add(20 * base)
	if w := b.wait(exit2, exit2); w != 4*base {
		t.Errorf("wait after a new exit = %v, want the capped %v", w, 4*base)
	}
	// Ten kubelet minutes (60 bases) without an update reset it.
	late := exit.Add(70 * base)
	if !b.sync(late, late) || b.delay != base {
		t.Errorf("an expired back-off starts at once and restarts at the base, delay %v", b.delay)
	}
}

// TestRootBindIsolated: mounts below the run's root appear once, below the root bind, even when the host's
// / is shared (then a plain bind would join /'s peer group and copy every mount onto the host's /).
func TestRootBindIsolated(t *testing.T) {
	testenv.RequireFUSE(t)
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	sub := filepath.Join(root, "sub")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := unmountAll(dir); err != nil {
			t.Error(err)
		}
	})
	if err := makeRShared(root); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", sub, "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	ms, err := mountsUnder(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range ms {
		if m.Mountpoint == sub {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d mounts at %s, want 1 (the root bind leaks into another peer group)", n, sub)
	}
}

// TestSidecarUnprivileged: the pod's FUSE sidecar runs as manifests/pod-sidecar.yaml declares it, user and group
// 65534 without any capability and with no_new_privs, in a PID namespace of its own, and it serves the mount.
func TestSidecarUnprivileged(t *testing.T) {
	sc, err := catalog.Lookup("sidecar-plugin-restart")
	if err != nil {
		t.Fatal(err)
	}
	b, dir := newBackend(t, Options{})
	env, err := scenarios.NewEnv(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := b.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	if err := b.Setup(context.Background(), &sc, env); err != nil {
		t.Fatal(err)
	}
	// It serves: the volume dir answers (stat would block until the sidecar took the descriptor). Only then is
	// its process surely past its init's setup (the user, no_new_privs) and running the sidecar itself.
	if _, err := os.Stat(filepath.Join(b.vol.target, scenarios.FileName)); err != nil {
		t.Errorf("the sidecar does not serve the mount: %v", err)
	}
	pid := b.peers.sidecar.current().pid()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"Uid": "65534\t65534\t65534\t65534", "Gid": "65534\t65534\t65534\t65534", "Groups": "",
		"CapInh": "0000000000000000", "CapPrm": "0000000000000000", "CapEff": "0000000000000000", "CapAmb": "0000000000000000",
		"NoNewPrivs": "1", "NSpid": fmt.Sprintf("%d\t1", pid)}
	for _, line := range strings.Split(string(status), "\n") {
		k, v, _ := strings.Cut(line, ":")
		if w, ok := want[k]; ok {
			if got := strings.TrimSpace(v); got != w {
				t.Errorf("sidecar pid %d: %s %q, want %q", pid, k, got, w)
			}
			delete(want, k)
		}
	}
	for k := range want {
		t.Errorf("sidecar pid %d: no %s in /proc/PID/status", pid, k)
	}
}

// TestDeepRunDirectory: a run directory too deep for the plugin's sockets below it (a checkout deep in a home
// directory: a unix socket path holds 107 bytes) still runs (the keeper mode: a CSI and a keeper socket): the sockets
// go to a short directory of their own, which the run removes at its end.
func TestDeepRunDirectory(t *testing.T) {
	for _, name := range []string{"keeper-plugin-restart"} { // the CSI and the keeper socket
		t.Run(name, func(t *testing.T) {
			sc, err := catalog.Lookup(name)
			if err != nil {
				t.Fatal(err)
			}
			b, dir := newBackend(t, Options{})
			deep := filepath.Join(dir, strings.Repeat("d", 60))
			if err := os.MkdirAll(deep, 0o755); err != nil {
				t.Fatal(err)
			}
			o := run(t, context.Background(), b, sc, deep)
			if !o.Passed() {
				t.Errorf("%s in a run directory of %d bytes failed (see the log above)", name, len(deep))
			}
			if b.sockDir == "" {
				t.Fatalf("the sockets stayed below %s: the test did not make the path too long", deep)
			}
			if _, err := os.Stat(b.sockDir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the sockets' directory %s is still there after the run (%v)", b.sockDir, err)
			}
		})
	}
}

// TestServerFromASpecFile: a FUSE server this project has no Go code or name for, described by a user in a spec
// file (Debian's squashfuse under a name of the user's), runs the rows that hold for every server: its crash
// behind the relay costs the workload no read, in the relay and the relay-keeper placements, and the plain
// restart row shows the loss and the recovery as with any server.
func TestServerFromASpecFile(t *testing.T) {
	exe := testenv.RealServer(t, "squashfuse")
	dir := publicTempDir(t) // the relay placements run the server as nobody: its image must be readable by anyone
	image := filepath.Join(dir, "data.sqfs")
	if err := backing.SquashfsImage(context.Background(), image); err != nil {
		t.Fatal(err)
	}
	spec := filepath.Join(dir, "mysquash.yaml")
	body := "name: mysquash\nexecutable: " + exe + "\nargs: [\"-f\", \"-o\", \"allow_other\", \"{image}\", \"{mountpoint}\"]\n" +
		"servesFD: true\nwhyNot: it answers a connection it did not initialise with EIO\nsettings: [{name: image, required: true, file: true}]\n"
	if err := os.WriteFile(spec, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"relay-server-crash", "relay-keeper-server-crash", "restart"} {
		t.Run(name, func(t *testing.T) {
			sc, err := catalog.Lookup(name)
			if err == nil {
				sc, err = sc.ForServer(spec)
			}
			if err != nil {
				t.Fatal(err)
			}
			b, dir := newBackend(t, Options{ServerOpts: map[string]string{"image": image}})
			if o := run(t, context.Background(), b, sc, dir); !o.Passed() {
				t.Errorf("%s with the server of %s failed (see the log above); report in %s", name, spec, dir)
			}
			plugin, err := os.ReadFile(filepath.Join(dir, "plugin.log"))
			if err != nil || !strings.Contains(string(plugin), "--fuse-server="+spec) {
				t.Errorf("the plugin was not given the spec file (%v): its server is not the user's", err)
			}
		})
	}
}

// TestServerThatAsksFusermount: a libfuse2 server (Debian's s3fs, docs/servers/s3fs.yaml) cannot take a passed
// /dev/fd/N, yet runs unprivileged in the keeper behind the relay-keeper placement: it asks fusermount for the
// backend connection the plugin mounted, which the keeper's stand-in hands it (the host's setuid helper is hidden
// in the keeper container, as the chart's image has none). Its crash costs the workload no read.
func TestServerThatAsksFusermount(t *testing.T) {
	testenv.RealServer(t, "s3fs") // found in $PATH by the backend, as by dfc-scenario
	rclone := testenv.FindRealServer("rclone")
	if rclone == "" {
		testenv.SkipOrFail(t, "needs rclone for its fake S3 (rclone serve s3): make servers WITH_RCLONE=1")
	}
	dir := publicTempDir(t)
	log, err := os.Create(filepath.Join(dir, "rclone-serve-s3.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// The keeper runs s3fs as its own user, which must own the credentials file.
	fake, err := backing.StartFakeS3(ctx, rclone, dir, keeperUser, log)
	if err != nil {
		t.Fatalf("%v (its log: %s)", err, log.Name())
	}
	defer fake.Stop()
	spec, err := filepath.Abs(filepath.Join("..", "..", "docs", "servers", "s3fs.yaml")) // as dfc-scenario passes it
	if err != nil {
		t.Fatal(err)
	}
	sc, err := catalog.Lookup("relay-keeper-server-crash")
	if err == nil {
		sc, err = sc.ForServer(spec)
	}
	if err != nil {
		t.Fatal(err)
	}
	b, runDir := newBackend(t, Options{ServerOpts: map[string]string{"url": fake.URL, "passwd-file": fake.Passwd}})
	if o := run(t, context.Background(), b, sc, runDir); !o.Passed() {
		t.Errorf("relay-keeper-server-crash with s3fs failed (see the log above); report in %s", runDir)
	}
	keeper, err := os.ReadFile(filepath.Join(runDir, "keeper.log"))
	if err != nil || !strings.Contains(string(keeper), "auto_unmount") || !strings.Contains(string(keeper), "fusermount/mnt") {
		t.Errorf("the keeper did not run s3fs asking fusermount on the stand-in's mountpoint (%v); keeper.log in %s", err, runDir)
	}
}

// TestUnservedVolumeDoesNotHangTheRun: a sidecar that fails before it takes the connection (it cannot read the
// server's spec, which only root may) leaves the volume mounted and never initialised, held by the plugin, where
// every stat waits in D state: kubelet's start of the pod's containers and the host probe's alike. The run must still end, within its bounds: setup fails naming the
// stuck start, and teardown aborts the run's own FUSE connection to end the waiting stats, leaving no mount and
// no process behind (newBackend's cleanup checks).
func TestUnservedVolumeDoesNotHangTheRun(t *testing.T) {
	dir := publicTempDir(t)
	spec := filepath.Join(dir, "broken.yaml")
	body := "name: broken\nexecutable: /bin/true\nargs: [\"{mountpoint}\"]\nservesFD: true\nwhyNot: it never serves\n"
	if err := os.WriteFile(spec, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	sc, err := catalog.Lookup("restart-all-sidecar")
	if err == nil {
		sc, err = sc.ForServer(spec)
	}
	if err != nil {
		t.Fatal(err)
	}
	b, runDir := newBackend(t, Options{FirstStartWait: 3 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	o := run(t, ctx, b, sc, runDir)
	if ctx.Err() != nil {
		t.Fatalf("the run only ended with its context (%s): a wait was not bounded", time.Since(start).Round(time.Second))
	}
	if o.Err == nil || !strings.Contains(o.Err.Error(), "made no start attempt within 3s") {
		t.Errorf("the run's error is %v, want setup to fail naming the stuck start", o.Err)
	}
	kubelet, err := os.ReadFile(filepath.Join(runDir, "kubelet.log"))
	if err != nil || !strings.Contains(string(kubelet), "aborted FUSE connections") {
		t.Errorf("kubelet.log does not say the run's FUSE connection was aborted to end the waiting stats (%v)", err)
	}
	t.Logf("the run ended %s after it started", time.Since(start).Round(time.Second))
}

// publicTempDir is a temporary directory anyone may enter (t.TempDir's parent is not): for a server spec and
// what the server reads, which processes running as nobody must reach.
func publicTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "dfc-spec-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}
