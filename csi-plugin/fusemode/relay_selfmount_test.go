package fusemode

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/dummy-fuse-workload/workload"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver/backing"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// s3fsSpec is the spec of Debian's s3fs (libfuse2), a server that cannot serve a passed connection.
var s3fsSpec = filepath.Join("..", "..", "docs", "servers", "s3fs.yaml")

// TestRelaySelfMountingServerKeepsReads: s3fs, which mounts its directory itself, runs behind the relay on the
// relay's backend directory, against a fake S3 (rclone serve s3). A workload's O_DIRECT descriptor reads on with
// no error while the plugin detaches the dead backend of a SIGKILLed s3fs and starts it again, twice; nothing
// stays mounted in the relay directory once the volume ends.
func TestRelaySelfMountingServerKeepsReads(t *testing.T) {
	sv := startS3fsVolume(t, false)
	dir, mnt, s, v := sv.dir, sv.mnt, sv.s, sv.v
	// Mounting is the plugin's privilege: the self-mounting server runs as the plugin's user, not nobody.
	if uid := procUID(t, v.server.pid()); uid != strconv.Itoa(os.Geteuid()) {
		t.Errorf("s3fs runs as uid %s, want the plugin's %d", uid, os.Geteuid())
	}
	rd := startDirectReader(t, filepath.Join(mnt, ServedFile))

	for kill := 1; kill <= 2; kill++ {
		v.mu.Lock()
		p := v.server
		v.mu.Unlock()
		good, _ := rd.counts()
		if err := p.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 20*time.Second, "s3fs to be started again and the reader to read 5 times more", func() bool {
			v.mu.Lock()
			np := v.server
			v.mu.Unlock()
			now, _ := rd.counts()
			return np != p && now >= good+5
		})
		// The dead mount was detached, not stacked under the new one.
		if at, err := mounts.MountsAt(v.backend); err != nil || len(at) != 1 || at[0].FSType != "fuse.s3fs" {
			t.Fatalf("after kill %d, mounts at the backend %s: %v (%v), want one of type fuse.s3fs", kill, v.backend, at, err)
		}
	}
	endRelayVolume(t, rd, s, mnt, dir, "two kills of s3fs")
}

// startFakeS3 starts rclone serve s3 (backing.StartFakeS3) for s3fs run as the plugin's user, stopped by the
// test's cleanup.
func startFakeS3(t *testing.T, lab *testenv.Lab, rclone string) *backing.FakeS3 {
	t.Helper()
	log, err := os.Create(filepath.Join(lab.Dir(), "rclone-serve-s3.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	f, err := backing.StartFakeS3(ctx, rclone, lab.Dir(), os.Geteuid(), log)
	if err != nil {
		t.Fatalf("%v (its log: %s)", err, log.Name())
	}
	t.Cleanup(f.Stop)
	return f
}

// TestRelayWritableVolumeKeepsWrites: a writable volume of the relay mode (Options.Writable) with s3fs, which
// uploads a file at flush and fsync, written by dummy-fuse-workload --write while the plugin restarts a
// SIGKILLed s3fs twice and a SIGKILLed relay once (its standby successor takes over): no write, fsync, close
// or rename fails, and the fake S3's bucket holds every byte the writer was told it wrote.
func TestRelayWritableVolumeKeepsWrites(t *testing.T) {
	sv := startS3fsVolume(t, true)
	lab, s3, dir, mnt, s, v := sv.lab, sv.s3, sv.dir, sv.mnt, sv.s, sv.v
	w := testenv.StartWriter(t, lab, bins.Path(t, "dummy-fuse-workload"), filepath.Join(mnt, "train.log"))
	for _, kind := range []string{"server", "relay", "server"} {
		w.WaitFor(t, 3, workload.EventWrite, "before the "+kind+"'s kill")
		v.mu.Lock()
		p := v.server
		if kind == "relay" {
			p = v.relay
		}
		v.mu.Unlock()
		if err := p.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 20*time.Second, "the "+kind+" to be started again", func() bool {
			v.mu.Lock()
			defer v.mu.Unlock()
			if kind == "relay" {
				return v.relay != p
			}
			return v.server != p
		})
	}
	w.WaitFor(t, 1, workload.EventCheckpoint, "after the kills")
	recs := w.Stop(t)
	if errs := testenv.Failures(recs); len(errs) > 0 {
		t.Errorf("the writer saw %d errors, first: %v", len(errs), errs[:min(len(errs), 5)])
	}
	file, err := s3.Object("train.log")
	if err != nil {
		t.Fatal(err)
	}
	ckpt, err := s3.Object("train.log.ckpt")
	if err != nil {
		t.Fatal(err)
	}
	if err := workload.CheckWritten(recs, file, ckpt); err != nil {
		t.Errorf("the bucket against the writer's log: %v", err)
	}
	unstage(t, s, mnt, dir)
}

// s3fsVolume is a volume of the relay mode with s3fs, which mounts its backend itself, against a fake S3.
type s3fsVolume struct {
	lab      *testenv.Lab
	s3       *backing.FakeS3
	dir, mnt string // the relay directory and the staging path
	s        Server
	v        *relayVolume
}

// startS3fsVolume starts the relay mode with s3fs (writable: with Options.Writable and s3fs mounting its
// backend read-write) and stages a volume at a staging path of the test's; the test's end aborts the FUSE
// connections under its directory first, so that no kill waits on a server, then stops the volume.
func startS3fsVolume(t *testing.T, writable bool) s3fsVolume {
	t.Helper()
	testenv.RequireFUSE(t)
	s3fs := testenv.FindRealServer("s3fs")
	if s3fs == "" {
		testenv.SkipOrFail(t, "needs s3fs, a libfuse2 server: apt-get install s3fs")
	}
	rclone := testenv.FindRealServer("rclone")
	if rclone == "" {
		testenv.SkipOrFail(t, "needs rclone for its fake S3 (rclone serve s3): make servers WITH_RCLONE=1")
	}
	lab := testenv.NewLab(t)
	s3 := startFakeS3(t, lab, rclone)
	opts := map[string]string{"url": s3.URL, "passwd-file": s3.Passwd}
	if writable {
		opts["access"] = "rw"
	}
	dir := filepath.Join(lab.Dir(), "relay")
	r, err := NewRelay(Options{Server: fuseserver.Spec{Name: s3fsSpec, Path: s3fs, Opts: opts},
		RelayDir: dir, RelayPath: bins.Path(t, "dummy-fuse"), RelayBackendWait: 10 * time.Second, StartTimeout: 20 * time.Second,
		RelayServerUID: DefaultRelayServerUID, Writable: writable})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	if r.selfMount == nil {
		t.Fatal("the relay mode would hand s3fs /dev/fd/3, which libfuse2 takes for a directory")
	}
	mnt := filepath.Join(lab.Dir(), "staging")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := r.Start(ctx, Request{VolumeID: "vol/s3fs", Mountpoint: mnt})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := testenv.AbortFUSEUnder([]string{lab.Dir()}, nil); err != nil {
			t.Error(err)
		}
		stopped(t, s)
	})
	return s3fsVolume{lab: lab, s3: s3, dir: dir, mnt: mnt, s: s, v: s.(*relayVolume)}
}
