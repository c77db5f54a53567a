package fusemode

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

func TestNewRelayRefusesBadSettings(t *testing.T) {
	for name, o := range map[string]Options{
		"relative relay dir": {Server: fuseserver.Spec{Path: "/bin/true"}, RelayDir: "relay", RelayPath: "/bin/true"},
		"no relay binary":    {Server: fuseserver.Spec{Path: "/bin/true"}, RelayDir: "/tmp/x", RelayPath: "/nonexistent/dummy-fuse"},
		"unknown server":     {Server: fuseserver.Spec{Name: "nfs", Path: "/bin/true"}, RelayDir: "/tmp/x", RelayPath: "/bin/true"},
	} {
		if _, err := NewRelay(o); err == nil {
			t.Errorf("%s: NewRelay accepted %+v", name, o)
		}
	}
}

func newRelayMode(t *testing.T, lab *testenv.Lab) (*Relay, string) {
	t.Helper()
	testenv.RequireFUSE(t)
	bin := bins.Path(t, "dummy-fuse")
	// The real server runs as nobody: its executable must be in a directory nobody can reach.
	pub := lab.Dir()
	if err := os.Chmod(pub, 0o755); err != nil {
		t.Fatal(err)
	}
	exe, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	server := filepath.Join(pub, "dummy-fuse")
	if err := os.WriteFile(server, exe, 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(lab.Dir(), "relay")
	r, err := NewRelay(Options{Server: fuseserver.Spec{Path: server, DirectIO: true}, RelayDir: dir, RelayPath: bin, RelayBackendWait: 10 * time.Second, StartTimeout: 10 * time.Second, RelayServerUID: DefaultRelayServerUID})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r, dir
}

// directReader re-reads one O_DIRECT descriptor (every read reaches the relay and, through it, the server)
// until stopped, and counts good and failed reads.
type directReader struct {
	mu        sync.Mutex
	good      int
	failures  []string
	stop      chan struct{}
	stoppedCh chan struct{}
}

func startDirectReader(t *testing.T, path string) *directReader {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	r := &directReader{stop: make(chan struct{}), stoppedCh: make(chan struct{})}
	go func() {
		defer close(r.stoppedCh)
		defer f.Close()
		buf := make([]byte, 4096)
		for {
			select {
			case <-r.stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			n, err := f.ReadAt(buf, 0)
			r.mu.Lock()
			if string(buf[:n]) == fuseserver.Content {
				r.good++
			} else {
				r.failures = append(r.failures, "read "+string(buf[:n])+": "+errString(err))
			}
			r.mu.Unlock()
		}
	}()
	t.Cleanup(func() { r.end() })
	return r
}

func errString(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}

func (r *directReader) end() {
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
}

func (r *directReader) counts() (int, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.good, append([]string(nil), r.failures...)
}

// TestRelayKeepsReadsThroughKills: a workload's descriptor reads on while the plugin restarts a SIGKILLed real
// server and a SIGKILLed relay (a successor takes the connection over); unmounting the staging path ends the
// volume, and nothing stays mounted in the relay directory.
func TestRelayKeepsReadsThroughKills(t *testing.T) {
	lab := testenv.NewLab(t)
	r, dir := newRelayMode(t, lab)
	mnt := filepath.Join(lab.Dir(), "staging")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := r.Start(ctx, Request{VolumeID: "vol/1", Mountpoint: mnt})
	if err != nil {
		t.Fatal(err)
	}
	v := s.(*relayVolume)
	t.Cleanup(func() { stopped(t, s) })
	if uid := procUID(t, v.server.pid()); uid != strconv.Itoa(DefaultRelayServerUID) {
		t.Errorf("the real server runs as uid %s, want %d", uid, DefaultRelayServerUID)
	}
	rd := startDirectReader(t, filepath.Join(mnt, ServedFile))

	for _, kind := range []string{"server", "relay"} {
		v.mu.Lock()
		p := v.server
		if kind == "relay" {
			p = v.relay
		}
		v.mu.Unlock()
		good, _ := rd.counts()
		if err := p.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 15*time.Second, "the "+kind+" to be started again and the reader to read 5 times more", func() bool {
			v.mu.Lock()
			np := v.server
			if kind == "relay" {
				np = v.relay
			}
			v.mu.Unlock()
			now, _ := rd.counts()
			return np != p && now >= good+5
		})
	}
	endRelayVolume(t, rd, s, mnt, dir, "a server kill and a relay kill")
}

// endRelayVolume ends the reader and fails on any read of it that failed through what the test did, then
// unmounts the volume's staging path and checks that the volume ended and left no mount under the relay
// directory dir.
func endRelayVolume(t *testing.T, rd *directReader, s Server, mnt, dir, through string) {
	t.Helper()
	rd.end()
	<-rd.stoppedCh
	good, failures := rd.counts()
	if len(failures) > 0 {
		t.Fatalf("%d failed reads (of %d) through %s: %q", len(failures), good+len(failures), through, failures)
	}
	t.Logf("%d good reads, none failed, through %s", good, through)
	unstage(t, s, mnt, dir)
}

// unstage unmounts the volume's staging path mnt and checks that the volume ended and left no mount under the
// relay directory dir.
func unstage(t *testing.T, s Server, mnt, dir string) {
	t.Helper()
	if _, err := mounts.UnmountAll(mnt); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the volume did not end within 10s after its staging path was unmounted")
	}
	if left, err := mounts.Under(dir); err != nil || len(left) > 0 {
		t.Fatalf("mounts left under the relay directory %s: %d (%v)", dir, len(left), err)
	}
}

// TestRelayRecollectDetachesOnlyItsBackends: at a restart the plugin detaches a recorded volume's dead backend
// and nothing else: not a mount of another type at that path, not a backend of a volume it has no record of.
func TestRelayRecollectDetachesOnlyItsBackends(t *testing.T) {
	lab := testenv.NewLab(t)
	r, _ := newRelayMode(t, lab)
	mount := func(volume, fstype string) string {
		dir := filepath.Join(r.volumeDir(volume), "backend")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if fstype == "tmpfs" {
			if err := unix.Mount("tmpfs", dir, "tmpfs", 0, ""); err != nil {
				t.Fatal(err)
			}
			return dir
		}
		// A dead connection of the server's type: mounted, its descriptor closed at once.
		dev, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer dev.Close()
		if err := unix.Mount(fstype, dir, "fuse."+fstype, unix.MS_RDONLY, "fd="+itoa(int(dev.Fd()))+",rootmode=40000,user_id=0,group_id=0"); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	recorded := mount("recorded", fuseserver.DummyFuse)
	foreignType := mount("foreign-type", "tmpfs")
	unrecorded := mount("unrecorded", fuseserver.DummyFuse)
	if _, err := r.Recollect(Records{Stages: []Recorded{{VolumeID: "recorded"}, {VolumeID: "foreign-type"}}}); err != nil {
		t.Fatal(err)
	}
	for dir, want := range map[string]bool{recorded: false, foreignType: true, unrecorded: true} {
		if got, err := mounts.IsMountPoint(dir); err != nil || got != want {
			t.Errorf("%s mounted = %v (%v) after Recollect, want %v", dir, got, err, want)
		}
	}

	// A server that mounts the backend itself names the type (libfuse2 after its executable): any FUSE mount
	// at a recorded backend directory is the plugin's, still nothing else.
	r.selfMount = errors.New("servesFD: false")
	selfMounted := mount("self-mounted", "s3fs")
	selfForeign := mount("self-foreign", "tmpfs")
	if _, err := r.Recollect(Records{Stages: []Recorded{{VolumeID: "self-mounted"}, {VolumeID: "self-foreign"}}}); err != nil {
		t.Fatal(err)
	}
	for dir, want := range map[string]bool{selfMounted: false, selfForeign: true} {
		if got, err := mounts.IsMountPoint(dir); err != nil || got != want {
			t.Errorf("self-mounting server: %s mounted = %v (%v) after Recollect, want %v", dir, got, err, want)
		}
	}
}

// TestSelfMountingServerPlacements: a server that cannot serve a passed connection runs behind the plugin's
// relay, mounting the backend itself; the relay-keeper mode refuses it, whose keeper could not mount.
func TestSelfMountingServerPlacements(t *testing.T) {
	spec := filepath.Join(t.TempDir(), "self.yaml")
	if err := os.WriteFile(spec, []byte("name: self\nexecutable: /bin/true\nargs: [\"{mountpoint}\"]\nwhyNot: EIO\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := Options{Server: fuseserver.Spec{Name: spec}, RelayDir: "/tmp/x", RelayPath: "/bin/true"}
	r, err := NewRelay(o)
	if err != nil {
		t.Fatalf("NewRelay: %v", err)
	}
	_ = r.Close()
	if r.selfMount == nil || r.serverFD != nil {
		t.Errorf("NewRelay would give the server %q, want it to mount the backend itself", r.serverFD)
	}
	if _, err := NewRelayKeeper(o); err == nil || !strings.Contains(err.Error(), "servesFD: false") {
		t.Errorf("NewRelayKeeper: %v, want a refusal naming servesFD: false", err)
	}
}

// procUID is the real user ID of pid as /proc tells.
func procUID(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
			return f[1]
		}
	}
	return ""
}

func itoa(n int) string { return strconv.Itoa(n) }
