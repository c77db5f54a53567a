package relayfs_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/dummy-fuse-workload/workload"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// TestWritableRelayForwardsChanges: every kind of change made through a writable relay's mount is in the
// backend (a plain directory here), read there directly; the kernel checks the caller's permissions.
func TestWritableRelayForwardsChanges(t *testing.T) {
	testenv.RequireFUSE(t)
	lab := testenv.NewLab(t)
	backend := t.TempDir()
	r := startRelay(t, lab, backend, "--relay-writable", "--spill-dir", t.TempDir())
	mnt := func(p string) string { return filepath.Join(r.mnt, p) }
	inBackend := func(p, want string) {
		t.Helper()
		got, err := os.ReadFile(filepath.Join(backend, p))
		if err != nil || string(got) != want {
			t.Errorf("backend %s: %q, %v; want %q", p, got, err, want)
		}
	}
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s through the relay: %v", what, err)
		}
	}

	must("write a new file", os.WriteFile(mnt("new"), []byte("first\n"), 0o644))
	inBackend("new", "first\n")
	if _, err := os.OpenFile(mnt("new"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644); !errors.Is(err, os.ErrExist) {
		t.Errorf("O_EXCL create of an existing file: %v, want EEXIST", err)
	}

	// Appends: the kernel sends each with its offset; the backend file must not be O_APPEND for them.
	for _, line := range []string{"second\n", "third\n"} {
		f, err := os.OpenFile(mnt("new"), os.O_APPEND|os.O_WRONLY, 0)
		must("open for appending", err)
		_, err = f.WriteString(line)
		must("append", err)
		must("close", f.Close())
	}
	inBackend("new", "first\nsecond\nthird\n")
	must("truncate", os.Truncate(mnt("new"), 6))
	inBackend("new", "first\n")
	f, err := os.OpenFile(mnt("new"), os.O_WRONLY|os.O_TRUNC, 0)
	must("open with O_TRUNC", err)
	_, err = f.WriteAt([]byte("over"), 0)
	must("overwrite", err)
	must("fsync", f.Sync())
	must("close", f.Close())
	inBackend("new", "over")

	must("mkdir", os.Mkdir(mnt("dir"), 0o750))
	must("rename into the directory", os.Rename(mnt("new"), mnt("dir/moved")))
	inBackend("dir/moved", "over")
	if _, err := os.Lstat(filepath.Join(backend, "new")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the rename's source is still in the backend: %v", err)
	}
	// The renamed file is found and read under its new name, also by a node looked up before the rename.
	got, err := os.ReadFile(mnt("dir/moved"))
	if err != nil || string(got) != "over" {
		t.Errorf("reading the renamed file through the relay: %q, %v", got, err)
	}
	must("rename the directory", os.Rename(mnt("dir"), mnt("dir2")))
	inBackend("dir2/moved", "over")
	got, err = os.ReadFile(mnt("dir2/moved"))
	if err != nil || string(got) != "over" {
		t.Errorf("reading beneath the renamed directory through the relay: %q, %v", got, err)
	}

	must("symlink", os.Symlink("dir2/moved", mnt("link")))
	if target, err := os.Readlink(filepath.Join(backend, "link")); err != nil || target != "dir2/moved" {
		t.Errorf("backend link: %q, %v", target, err)
	}
	must("chmod", os.Chmod(mnt("dir2/moved"), 0o600))
	mtime := time.Date(2020, 2, 2, 2, 2, 2, 0, time.UTC)
	must("set times", os.Chtimes(mnt("dir2/moved"), mtime, mtime))
	st, err := os.Stat(filepath.Join(backend, "dir2/moved"))
	if err != nil || st.Mode().Perm() != 0o600 || !st.ModTime().Equal(mtime) {
		t.Errorf("backend file after chmod and chtimes: %v, %v", st, err)
	}

	// default_permissions: another user may not write a file only root may write.
	out, err := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sh", "-c", "echo x >> "+mnt("dir2/moved")).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "ermission denied") {
		t.Errorf("an unprivileged user appending to a 0600 root file through the relay: %v, %s; want permission denied", err, out)
	}
	inBackend("dir2/moved", "over")

	must("unlink", os.Remove(mnt("link")))
	must("unlink", os.Remove(mnt("dir2/moved")))
	must("rmdir", os.Remove(mnt("dir2")))
	ents, err := os.ReadDir(backend)
	if err != nil || len(ents) != 0 {
		t.Errorf("the backend after removing everything: %v, %v", ents, err)
	}
	// A file made again under a removed name is the new one.
	must("write a file under a removed name", os.WriteFile(mnt("again"), []byte("1"), 0o644))
	must("remove it", os.Remove(mnt("again")))
	must("write it anew", os.WriteFile(mnt("again"), []byte("2"), 0o644))
	got, err = os.ReadFile(mnt("again"))
	if err != nil || string(got) != "2" {
		t.Errorf("a file made anew under a removed name: %q, %v", got, err)
	}
}

// chunk is the i-th piece a writer writes: distinct bytes, so that a piece lost, repeated or misplaced shows.
func chunk(i int) []byte { return workload.Piece(i, 64<<10) }

// TestRelayKeepsWritesThroughServerKills: gcsfuse, which keeps what is written in a local staging file or an
// unfinished upload until a FLUSH finishes it, is killed again and again under a writer that appends to a
// log (fsync every fourth piece) and renames a checkpoint into place every eighth, once with a write inside
// it. No write, fsync, close or rename fails, and the objects in the fake GCS, read through its API, hold
// every byte the writer was told it wrote.
func TestRelayKeepsWritesThroughServerKills(t *testing.T) {
	testenv.RequireFUSE(t)
	for _, name := range []string{fuseserver.Gcsfuse, s3fs} {
		t.Run(name, func(t *testing.T) { keepsWritesThroughKills(t, name) })
	}
}

func keepsWritesThroughKills(t *testing.T, name string) {
	lab := testenv.NewLab(t)
	b := newBackend(t, lab, name)
	b.start()
	r := startRelay(t, lab, b.dir, "--relay-writable", "--spill-dir", t.TempDir())
	w := testenv.StartWriter(t, lab, testenv.Build(t, "dummy-fuse-workload"), filepath.Join(r.mnt, "train.log"))
	const kills = 6
	for k := range kills {
		w.WaitFor(t, 3, workload.EventWrite, fmt.Sprintf("before kill %d", k+1))
		if k == kills/2 {
			// An operation inside the server when it dies (a write, an fsync or a checkpoint's): the relay's
			// request fails with ECONNABORTED. The writer logs nothing while it waits (the stop waits until
			// every thread of the server stopped).
			b.stop()
			var recs []workload.Record
			testenv.Eventually(t, waitTimeout, "the writer to wait for the stopped gcsfuse (its log not growing for 300 ms)", func() bool {
				n := len(w.Records(t))
				time.Sleep(300 * time.Millisecond)
				recs = w.Records(t)
				return len(recs) == n
			})
			t.Logf("killing %s with the writer waiting after %q", name, recs[len(recs)-1].Event)
		}
		b.kill()
		b.start()
	}
	w.WaitFor(t, 2, workload.EventCheckpoint, "after the last kill")
	recs := w.Stop(t)

	file := expectWritten(t, b, recs)
	if got := strings.Count(r.proc.Log(), "serves again"); got != kills {
		t.Errorf("the relay logged %d backends that came back, want %d; its log:\n%s", got, kills, r.proc.Tail())
	}
	// A write the server died inside is in the replay and not written again: gcsfuse, streaming a new file, takes
	// only writes that follow each other and rewrites the whole file through a temporary copy otherwise (which
	// fails where its /tmp is read-only, as a cluster's keeper found).
	if n := strings.Count(b.logs(), "OutOfOrderError"); n > 0 {
		t.Errorf("%s was sent %d writes out of order (a write done again after its replay?); the relay's log:\n%s", name, n, r.proc.Tail())
	}
	// The kills found acknowledged writes that only gcsfuse had: without the replay they were lost.
	replays := strings.Count(r.proc.Log(), "had not made durable")
	if replays == 0 {
		t.Errorf("the relay replayed nothing after %d kills: the test did not kill gcsfuse with writes it had not made durable; its log:\n%s", kills, r.proc.Tail())
	}
	if t.Failed() {
		return
	}
	t.Logf("%d kills of %s under the writer, %d replays: %d pieces (%d bytes) and %d checkpoints acknowledged, no error, all in the bucket",
		kills, name, replays, w.Count(t, workload.EventWrite), len(file), w.Count(t, workload.EventCheckpoint))
}

// TestServerKillLosesWritesWithoutTheRelay is what the relay is for: a writer straight on gcsfuse's mount
// gets ENOTCONN once gcsfuse dies, and even what it had fsync'ed is not in the bucket.
func TestServerKillLosesWritesWithoutTheRelay(t *testing.T) {
	testenv.RequireFUSE(t)
	lab := testenv.NewLab(t)
	b := newBackend(t, lab, fuseserver.Gcsfuse)
	b.start()
	f, err := os.OpenFile(filepath.Join(b.dir, "ckpt"), os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i := range 2 {
		if _, err := f.Write(chunk(i)); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync: %v", err)
	}
	b.kill()
	if _, err := f.Write(chunk(2)); !errors.Is(err, unix.ENOTCONN) {
		t.Errorf("a write after gcsfuse died: %v, want ENOTCONN", err)
	}
	b.start()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	// gcsfuse streams a new file into an upload that only a FLUSH (close) finishes: the fsync that returned 0
	// left nothing in the bucket.
	if got, err := b.gcs.Object(ctx, "ckpt"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the object after the kill: %d bytes, %v; want none (what this test shows has changed: the relay's Fsync comment cites it)", len(got), err)
	}
}

// TestWritableRelayTakeover kills the writable relay itself under the writer, with writes gcsfuse had only
// staged, and a successor takes the connection over; then gcsfuse is killed under the successor. The dead
// relay's descriptors of gcsfuse's files are closed by the kernel, and each close is a FLUSH that makes
// gcsfuse upload what the relay had acknowledged; the successor adopts the writer's handles at its next
// request. No operation fails and the bucket holds every acknowledged byte.
func TestWritableRelayTakeover(t *testing.T) {
	testenv.RequireFUSE(t)
	lab := testenv.NewLab(t)
	b := newBackend(t, lab, fuseserver.Gcsfuse)
	b.start()
	spill := t.TempDir()
	r := startRelay(t, lab, b.dir, "--relay-writable", "--spill-dir", spill)
	// Forked now, before the writer holds files on the relay's mount (see runLater).
	succ, takeOver := r.runLater(t, lab, "--relay-backend", b.dir, "--relay-writable", "--spill-dir", spill, "--takeover", r.record)
	w := testenv.StartWriter(t, lab, testenv.Build(t, "dummy-fuse-workload"), filepath.Join(r.mnt, "train.log"))
	w.WaitFor(t, 5, workload.EventWrite, "before the relay's kill")
	r.proc.Signal(syscall.SIGKILL)
	takeOver()
	r.proc.Wait(waitTimeout)
	w.WaitFor(t, 1, workload.EventCheckpoint, "after the takeover")
	w.WaitFor(t, 2, workload.EventWrite, "before gcsfuse's kill under the successor")
	b.kill()
	b.start()
	w.WaitFor(t, 1, workload.EventCheckpoint, "after gcsfuse's kill")
	recs := w.Stop(t)
	expectWritten(t, b, recs)
	if !strings.Contains(succ.Log(), "asked the kernel to resend") {
		t.Errorf("the successor did not take over with a resend; its log:\n%s", succ.Tail())
	}
	if !strings.Contains(succ.Log(), "had not made durable") {
		t.Errorf("the successor replayed nothing at gcsfuse's kill; its log:\n%s", succ.Tail())
	}
}

// TestWritableRelayAndServerDieTogether: gcsfuse and the relay die together under the writer (as a keeper
// holding both does), gcsfuse first, so that the dying relay's closes cannot make it upload anything. What
// gcsfuse had acknowledged but not uploaded is in the dead relay's journals only; the successor finds them
// in the spill directory and replays them at the writer's next request. No operation fails and the bucket
// holds every acknowledged byte.
func TestWritableRelayAndServerDieTogether(t *testing.T) {
	testenv.RequireFUSE(t)
	lab := testenv.NewLab(t)
	b := newBackend(t, lab, fuseserver.Gcsfuse)
	b.start()
	spill := t.TempDir()
	r := startRelay(t, lab, b.dir, "--relay-writable", "--spill-dir", spill)
	succ, takeOver := r.runLater(t, lab, "--relay-backend", b.dir, "--relay-writable", "--spill-dir", spill, "--takeover", r.record)
	w := testenv.StartWriter(t, lab, testenv.Build(t, "dummy-fuse-workload"), filepath.Join(r.mnt, "train.log"))
	w.WaitFor(t, 10, workload.EventWrite, "before the kills")
	b.kill()
	r.proc.Signal(syscall.SIGKILL)
	r.proc.Wait(waitTimeout)
	takeOver()
	b.start()
	w.WaitFor(t, 2, workload.EventCheckpoint, "after the kills")
	recs := w.Stop(t)
	expectWritten(t, b, recs)
	if !strings.Contains(succ.Log(), "had not made durable") {
		t.Errorf("the successor replayed no journal of its predecessor; its log:\n%s", succ.Tail())
	}
	if left, _ := filepath.Glob(filepath.Join(spill, "*.journal")); len(left) > 0 {
		t.Errorf("journals left after the writer closed every file: %v", left)
	}
}

// TestWritableRelayDoesNotResurrectARemovedFile: a file the writer removed while it still had it open is not
// made again on the next server when the relay must open it again after gcsfuse's death: the writer's next
// write fails with ESTALE, and the bucket has no such object. (A file written, unlinked and kept open is the
// writer's alone; after a crash nothing of it can be reached.)
func TestWritableRelayDoesNotResurrectARemovedFile(t *testing.T) {
	testenv.RequireFUSE(t)
	lab := testenv.NewLab(t)
	b := newBackend(t, lab, fuseserver.Gcsfuse)
	b.start()
	r := startRelay(t, lab, b.dir, "--relay-writable", "--spill-dir", t.TempDir())
	restart := b.startLater() // forked before the test holds a file on the relay's mount
	path := filepath.Join(r.mnt, "scratch")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte("first")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	b.kill()
	restart()
	if _, err := f.Write([]byte("second")); !errors.Is(err, syscall.ESTALE) {
		t.Errorf("a write to the removed file after gcsfuse's death: %v, want ESTALE", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if got, err := b.object(ctx, "scratch"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the removed file is in the bucket again: %q, %v", got, err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the removed file is there again through the relay: %v", err)
	}
}

// expectWritten checks a stopped writer's log: no operation failed, and the storage behind b holds what it
// says (written); it returns the file.
func expectWritten(t *testing.T, b *realBackend, recs []workload.Record) []byte {
	t.Helper()
	if errs := testenv.Failures(recs); len(errs) > 0 {
		t.Errorf("the writer saw %d failed operations, first: %v", len(errs), errs[:min(len(errs), 5)])
	}
	file, err := written(t, b, recs)
	if err != nil {
		t.Error(err)
	}
	return file
}

// written reads the writer's file and checkpoint from the storage behind b, without any mount, and checks
// them against its log (workload.CheckWritten), and that no temporary checkpoint is left; it returns the file.
func written(t *testing.T, b *realBackend, recs []workload.Record) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	file, err := b.object(ctx, "train.log")
	if err != nil {
		t.Fatal(err)
	}
	ckpt, err := b.object(ctx, "train.log.ckpt")
	if err != nil {
		t.Fatal(err)
	}
	if err := workload.CheckWritten(recs, file, ckpt); err != nil {
		return file, fmt.Errorf("the storage against the writer's log: %w", err)
	}
	if _, err := b.object(ctx, "train.log.ckpt.tmp"); !errors.Is(err, os.ErrNotExist) {
		return file, fmt.Errorf("the checkpoint's temporary object is still there: %v", err)
	}
	return file, nil
}
