package scenarios_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/dummy-fuse-workload/workload"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

const writer = "writer"

// TestWriterContainer: a writer container's command line is one dummy-fuse-workload accepts (none of a
// reader's flags), it writes a file of its own, and the objects it leaves are that file and its checkpoint.
func TestWriterContainer(t *testing.T) {
	c := scenarios.Container{Name: writer, Write: true, ReadInterval: 20 * time.Millisecond, SyncEvery: 4}
	args := c.WorkloadArgs(200 * time.Millisecond)
	cfg, err := workload.ParseArgs(args, io.Discard)
	if err != nil {
		t.Fatalf("dummy-fuse-workload refuses %q: %v", args, err)
	}
	if !cfg.Write || cfg.File != "/mnt/writer.log" || cfg.Interval != 20*time.Millisecond || cfg.WriteSize != scenarios.WriteSize ||
		cfg.SyncEvery != 4 || cfg.CheckpointEvery != scenarios.CheckpointEvery || cfg.Format != workload.FormatJSON {
		t.Errorf("args %q give %+v", args, cfg)
	}
	if got := strings.Join(c.Objects(), " "); got != "writer.log writer.log.ckpt" {
		t.Errorf("objects %s", got)
	}
}

// writeRow is a row that writes, as the catalog's: a writer on a writable relay volume of gcsfuse, whose real
// server is killed and back, then the writer goes on; its data must all be in the bucket.
func writeRow(t *testing.T) scenarios.Scenario {
	t.Helper()
	return scenarios.Scenario{
		Name: "relay-write-test", Title: "a writer through a relay",
		Plugin: scenarios.Plugin{Mode: topology.Relay, Writable: true},
		Pod: scenarios.Pod{RestartPolicy: scenarios.RestartAlways, Containers: []scenarios.Container{
			{Name: writer, Write: true, ReadInterval: 20 * time.Millisecond}}},
		Steps: []scenarios.Step{
			scenarios.WaitFor(scenarios.Writes{C: writer, N: 6}, scenarios.Dur{Fixed: 30 * time.Second}),
			scenarios.Kill(topology.RelayServer), scenarios.Start(topology.RelayServer),
			scenarios.WaitFor(scenarios.Writes{C: writer, N: 16, After: scenarios.AfterPluginBack}, scenarios.Dur{Fixed: 30 * time.Second}),
		},
		Expect: []scenarios.Expectation{
			{Check: scenarios.WritesKept{C: writer, Writes: 16}},
			{Check: scenarios.Restarts{C: writer}},
			{Check: scenarios.VolumeDirAlive{}},
		},
		Backends: []string{scenarios.BackendLocal}, BackendsWhy: "the bucket is read on the local backend only",
		Servers: []string{fuseserver.Gcsfuse}, ServersWhy: "the rows check the bucket behind gcsfuse",
	}
}

// TestValidateWrites: a writable volume is a relay mode's; a writer needs a writable volume and none of a
// reader's settings.
func TestValidateWrites(t *testing.T) {
	if sc := writeRow(t); sc.Validate() != nil || !sc.Plugin.Writable || len(sc.Writers()) != 1 {
		t.Fatalf("%s: %v, writable %t, writers %v", sc.Name, sc.Validate(), sc.Plugin.Writable, sc.Writers())
	}
	for want, mutate := range map[string]func(s *scenarios.Scenario){
		"is for the relay modes":          func(s *scenarios.Scenario) { s.Plugin.Mode = topology.Keeper },
		"the volume is read-only":         func(s *scenarios.Scenario) { s.Plugin.Writable = false },
		"are a reader's settings":         func(s *scenarios.Scenario) { s.Pod.Containers[0].KeepOpen = true },
		"says why it runs with some serv": func(s *scenarios.Scenario) { s.Servers = nil },
	} {
		s := writeRow(t)
		s.Pod.Containers = append([]scenarios.Container(nil), s.Pod.Containers...)
		mutate(&s)
		if err := s.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: Validate = %v", want, err)
		}
	}
}

// TestServersWhy: a row that says why it needs its servers runs with them only among the built-in ones: not
// with dummy-fuse nor another real server; a server described in a spec file runs a row that writes when its
// spec says where the storage is read (objectURL), and not otherwise.
func TestServersWhy(t *testing.T) {
	sc := writeRow(t)
	if sc.RunsWithDummyFuse() {
		t.Fatal("a row that writes runs with dummy-fuse")
	}
	if _, err := sc.ForServer(""); err == nil || !strings.Contains(err.Error(), "runs with gcsfuse only, not dummy-fuse: the rows check the bucket behind gcsfuse") {
		t.Errorf("with dummy-fuse: %v", err)
	}
	if _, err := sc.ForServer(fuseserver.Squashfuse); err == nil || !strings.Contains(err.Error(), "the spec of squashfuse gives none") {
		t.Errorf("with squashfuse: %v", err)
	}
	dir := t.TempDir()
	spec := func(name, objectURL string) string {
		f := filepath.Join(dir, name+".yaml")
		body := "name: " + name + "\nexecutable: /bin/true\nargs: [\"{mountpoint}\"]\nservesFD: true\nwhyNot: EIO\nsettings: [{name: url}]\n" + objectURL
		if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}
	if _, err := sc.ForServer(spec("nostore", "")); err == nil || !strings.Contains(err.Error(), "objectURL") {
		t.Errorf("with a spec without objectURL: %v", err)
	}
	if s, err := sc.ForServer(spec("store", "objectURL: \"{url}/b/{object}\"\n")); err != nil || !strings.HasSuffix(s.Plugin.FuseServer, "store.yaml") {
		t.Errorf("with a spec with objectURL: %v", err)
	}
	if _, err := sc.ForServer(spec("later", "objectURL: \"{url}/b/{object}\"\ndurableAt: later\n")); err == nil || !strings.Contains(err.Error(), "durableAt: later") {
		t.Errorf("with a spec whose writes are durable only after the close: %v", err)
	}
	if s, err := sc.ForServer(fuseserver.Gcsfuse); err != nil || s.Plugin.FuseServer != fuseserver.Gcsfuse {
		t.Errorf("with gcsfuse: %v", err)
	}
	if !slices.Contains(sc.Plugin.Args(), "--relay-writable") {
		t.Errorf("plugin args %v lack --relay-writable", sc.Plugin.Args())
	}
}

// writeLog is a writer's story: its log lines (as dummy-fuse-workload writes them, through ParseWorkloadLine),
// what it wrote, and when.
type writeLog struct {
	rec       *scenarios.Recorder
	t         time.Time
	seq       int
	off       int64
	file      []byte
	ckpt      []byte
	sizePiece int
}

func newWriteLog(rec *scenarios.Recorder) *writeLog {
	return &writeLog{rec: rec, t: time.Now().Add(-time.Minute), sizePiece: 100}
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func (w *writeLog) line(r workload.Record) {
	w.t = w.t.Add(time.Millisecond)
	r.Time, r.File = w.t, "/mnt/writer.log"
	b, err := json.Marshal(r)
	if err != nil {
		panic(err)
	}
	w.rec.Add(scenarios.ParseWorkloadLine(b, writer, 0, w.t))
}

// pieces writes n pieces, a checkpoint after every 8th.
func (w *writeLog) pieces(n int) {
	for range n {
		seq, off := w.seq, w.off
		p := workload.Piece(seq, w.sizePiece)
		lat := int64(1500)
		w.line(workload.Record{Event: workload.EventWriteStart, Seq: &seq, Offset: &off})
		w.line(workload.Record{Event: workload.EventWrite, Seq: &seq, Offset: &off, Bytes: &w.sizePiece, SHA256: sum(p), LatencyUS: &lat})
		w.file = append(w.file, p...)
		w.seq++
		w.off += int64(len(p))
		if w.seq%8 == 0 {
			c := workload.CheckpointData(seq, 8*w.sizePiece)
			n := len(c)
			w.line(workload.Record{Event: workload.EventCheckpoint, Seq: &seq, Bytes: &n, SHA256: sum(c), LatencyUS: &lat})
			w.ckpt = c
		}
	}
}

// sync logs an fsync of everything written so far.
func (w *writeLog) sync() {
	seq, end, lat := w.seq-1, w.off, int64(900)
	w.line(workload.Record{Event: workload.EventSync, Seq: &seq, Offset: &end, LatencyUS: &lat})
}

// fail logs a failed write of the next piece with errno.
func (w *writeLog) fail(errno string) {
	seq := w.seq
	w.line(workload.Record{Event: workload.EventWriteError, Op: "write", Seq: &seq, Errno: &errno, Error: "write error"})
}

// now moves the story's clock to now, unless its events are ahead of it already.
func (w *writeLog) now() {
	if now := time.Now(); now.After(w.t) {
		w.t = now
	}
}

func (w *writeLog) kill() {
	w.t = w.t.Add(time.Millisecond)
	w.rec.Add(scenarios.Event{Time: w.t, Source: scenarios.SrcComponent, Component: topology.RelayServer, Kind: scenarios.KKilled})
}

func (w *writeLog) store(file, ckpt []byte) {
	for name, data := range map[string][]byte{"writer.log": file, "writer.log.ckpt": ckpt} {
		var err error
		if data == nil {
			err = os.ErrNotExist
		}
		w.rec.AddStored(scenarios.NewStored(writer, name, data, err))
	}
}

// TestWritesKept: the check holds when the storage has every acknowledged piece and the last checkpoint, and
// otherwise says what differed: a lost piece, a failed write, a missing checkpoint, nothing read, a writer that
// did not go on after the kill.
func TestWritesKept(t *testing.T) {
	check := scenarios.WritesKept{C: writer, Writes: 10}
	story := func(after int, broken func(w *writeLog)) *scenarios.Evidence {
		rec := &scenarios.Recorder{}
		w := newWriteLog(rec)
		w.pieces(6)
		w.kill()
		w.pieces(after)
		if broken != nil {
			broken(w)
		} else {
			w.store(w.file, w.ckpt)
		}
		return rec.Snapshot()
	}
	r := check.Eval(story(12, nil), scenarios.Timing{})
	if !r.OK || !strings.Contains(r.Why, "18 pieces (12 after the kill) and 2 checkpoints acknowledged") || !strings.Contains(r.Why, "longest write, fsync or checkpoint 1.5ms") {
		t.Errorf("every byte stored: %+v", r)
	}
	for want, tc := range map[string]struct {
		after  int
		broken func(w *writeLog)
	}{
		"differs from the 1800 acknowledged bytes at byte 1700": {12, func(w *writeLog) { w.store(w.file[:1700], w.ckpt) }},
		"checkpoint 15 was acknowledged but there is none":      {12, func(w *writeLog) { w.store(w.file, nil) }},
		"the storage has no writer.log":                         {12, func(w *writeLog) { w.store(nil, w.ckpt) }},
		"nothing was read from the volume's storage":            {12, func(*writeLog) {}},
		"only 4 pieces of writer acknowledged after the kill":   {4, nil},
		"1 failed operations of writer, first: writer#0 write_error EIO": {12, func(w *writeLog) {
			seq, errno := 17, "EIO"
			w.line(workload.Record{Event: workload.EventWriteError, Op: "fsync", Seq: &seq, Errno: &errno, Error: "input/output error"})
			w.store(w.file, w.ckpt)
		}},
		"close": {12, func(w *writeLog) {
			errno := "ENOTCONN"
			w.line(workload.Record{Event: workload.EventClose, Errno: &errno, Error: "close /mnt/writer.log: transport endpoint is not connected"})
			w.store(w.file, w.ckpt)
		}},
	} {
		r := check.Eval(story(tc.after, tc.broken), scenarios.Timing{})
		if r.OK || !strings.Contains(r.Why, want) {
			t.Errorf("%s: %+v", want, r)
		}
	}
}

// TestWriteChecksWantAFreshStorage: a writer whose file was in the storage before the run (it appends at its
// end) cannot be judged: its checkpoint may be an earlier run's too. Both checks of the writes say so.
func TestWriteChecksWantAFreshStorage(t *testing.T) {
	rec := &scenarios.Recorder{}
	w := newWriteLog(rec)
	earlier := []byte("an earlier run's line\n")
	w.off, w.file = int64(len(earlier)), earlier
	w.pieces(6)
	w.kill()
	w.fail("ENOTCONN")
	w.pieces(10)
	w.store(w.file, w.ckpt)
	ev := rec.Snapshot()
	for _, check := range []scenarios.Check{scenarios.WritesKept{C: writer, Writes: 10, Errnos: []string{"ENOTCONN"}},
		scenarios.KeepsDurableWrites{C: writer, Errnos: []string{"ENOTCONN"}}} {
		if r := check.Eval(ev, scenarios.Timing{}); r.OK || !strings.Contains(r.Why, "first piece went at offset 22: its file was in the storage before the run") {
			t.Errorf("%T: %+v", check, r)
		}
	}
}

// TestWritesKeptWithFailures: a limit row's writer may fail with the errno it names, and then only with it;
// the storage must hold every acknowledged byte all the same.
func TestWritesKeptWithFailures(t *testing.T) {
	story := func(errno string, stored int) *scenarios.Evidence {
		rec := &scenarios.Recorder{}
		w := newWriteLog(rec)
		w.pieces(6)
		w.kill()
		w.fail(errno)
		w.fail(errno)
		w.pieces(10)
		w.store(w.file[:stored], w.ckpt)
		return rec.Snapshot()
	}
	check := scenarios.WritesKept{C: writer, Writes: 10, Errnos: []string{"ENOTCONN"}}
	// A writer's recovery is its first acknowledged write after its failure.
	if m := story("ENOTCONN", 1600).Measure(writer); !m.Failed || m.KillToRecovery <= m.KillToError {
		t.Errorf("measures %+v: the writer's writes after its failures are no recovery", m)
	}
	if r := check.Eval(story("ENOTCONN", 1600), scenarios.Timing{}); !r.OK || !strings.Contains(r.Why, "2 failed with ENOTCONN (first: writer#0 write_error ENOTCONN") {
		t.Errorf("failures with the errno, every byte stored: %+v", r)
	}
	for want, ev := range map[string]*scenarios.Evidence{
		"2 failed operations of writer, first: writer#0 write_error EIO": story("EIO", 1600),
		"differs from the 1600 acknowledged bytes at byte 1500":          story("ENOTCONN", 1500),
	} {
		if r := check.Eval(ev, scenarios.Timing{}); r.OK || !strings.Contains(r.Why, want) {
			t.Errorf("%s: %+v", want, r)
		}
	}
}

// TestKeepsDurableWrites: after every holder died, the check holds when the writer's operations failed with the
// errno and the storage has every fsync'ed byte and the last checkpoint, and names the pieces that are lost;
// it fails on a write that did not fail, a lost fsync'ed byte, another errno or a lost checkpoint.
func TestKeepsDurableWrites(t *testing.T) {
	check := scenarios.KeepsDurableWrites{C: writer, Errnos: []string{"ENOTCONN", "ECONNABORTED"}}
	story := func(failed bool, errno string, store func(w *writeLog, durable int)) *scenarios.Evidence {
		rec := &scenarios.Recorder{}
		w := newWriteLog(rec)
		w.pieces(10)
		w.sync() // durable: 1000 bytes, pieces 0–9; the checkpoint after piece 7
		durable := len(w.file)
		w.pieces(3)
		w.kill()
		if failed {
			w.fail(errno)
		}
		store(w, durable)
		return rec.Snapshot()
	}
	upToSync := func(w *writeLog, durable int) { w.store(w.file[:durable], w.ckpt) }
	if got := story(true, "ENOTCONN", upToSync).Measure(writer).Lost; got != (workload.Loss{First: 10, Pieces: 3, Bytes: 300}) {
		t.Errorf("the run's measured loss: %+v, want the 3 pieces after the fsync", got)
	}
	r := check.Eval(story(true, "ENOTCONN", upToSync), scenarios.Timing{})
	if !r.OK || !strings.Contains(r.Why, "1 failed with ENOTCONN or ECONNABORTED") || !strings.Contains(r.Why, "lost: 3 acknowledged pieces (300 bytes) from piece 10 on, all after the last fsync") ||
		!strings.Contains(r.Why, "writer.log.ckpt is the last acknowledged checkpoint (after piece 7)") {
		t.Errorf("stored up to the fsync: %+v", r)
	}
	if r := check.Eval(story(true, "ENOTCONN", func(w *writeLog, _ int) { w.store(w.file, w.ckpt) }), scenarios.Timing{}); !r.OK || !strings.Contains(r.Why, "nothing acknowledged is missing") {
		t.Errorf("all stored: %+v", r)
	}
	for want, ev := range map[string]*scenarios.Evidence{
		"no operation of writer failed: the fault was not the limit": story(false, "", upToSync),
		"failed otherwise than with ENOTCONN or ECONNABORTED":        story(true, "EIO", upToSync),
		"less than the 1000 an fsync acknowledged as durable":        story(true, "ENOTCONN", func(w *writeLog, d int) { w.store(w.file[:d-100], w.ckpt) }),
		"checkpoint 7 was acknowledged but there is none":            story(true, "ENOTCONN", func(w *writeLog, d int) { w.store(w.file[:d], nil) }),
		"nothing was read from the volume's storage":                 story(true, "ENOTCONN", func(*writeLog, int) {}),
	} {
		if r := check.Eval(ev, scenarios.Timing{}); r.OK || !strings.Contains(r.Why, want) {
			t.Errorf("%s: %+v", want, r)
		}
	}
}

// storageBackend scripts a writable relay row: writes before the kill, the real server killed and back, writes
// after it; wrapped in collecting, it implements StorageReader and stores what was written.
type storageBackend struct {
	w     *writeLog
	calls []string
}

func (b *storageBackend) Name() string               { return scenarios.BackendLocal }
func (b *storageBackend) Describe() string           { return "backend fake" }
func (b *storageBackend) KeepNote() string           { return "" }
func (b *storageBackend) Stop(context.Context) error { b.calls = append(b.calls, "stop"); return nil }
func (b *storageBackend) Timing() scenarios.Timing {
	return scenarios.Timing{ReadInterval: 10 * time.Millisecond, BackoffBase: 20 * time.Millisecond}
}

func (b *storageBackend) Setup(_ context.Context, _ *scenarios.Scenario, env *scenarios.Env) error {
	b.calls = append(b.calls, "setup")
	env.Rec.SetPaths(map[string]string{scenarios.PathVolume: "/k/v"})
	env.Rec.Add(scenarios.Event{Source: scenarios.SrcProbe, Kind: scenarios.KProbe, Path: scenarios.PathVolume})
	env.Rec.Add(scenarios.Event{Source: scenarios.SrcKubelet, Kind: scenarios.KContainerStarted, Container: writer})
	b.w = newWriteLog(env.Rec)
	b.w.now()
	b.w.pieces(6)
	return nil
}

func (b *storageBackend) Kill(context.Context, topology.Component) error {
	b.calls = append(b.calls, "kill")
	b.w.now()
	b.w.kill()
	return nil
}

func (b *storageBackend) Start(context.Context, topology.Component) error {
	b.calls = append(b.calls, "start")
	b.w.now()
	b.w.rec.Add(scenarios.Event{Time: b.w.t, Source: scenarios.SrcComponent, Component: topology.RelayServer, Kind: scenarios.KReady})
	b.w.pieces(16)
	return nil
}

func (b *storageBackend) Upgrade(context.Context, topology.Component) error {
	return errors.ErrUnsupported
}

// collecting is storageBackend with the optional StorageReader.
type collecting struct{ *storageBackend }

func (b collecting) CollectWrites(context.Context) error {
	b.calls = append(b.calls, "collect")
	b.w.store(b.w.file, b.w.ckpt)
	return nil
}

// TestRunnerCollectsWrites: the runner has a backend that can read the storage collect the writers' data after
// the steps and before the verdicts, which then hold; one that cannot leaves WritesKept failing, saying so.
func TestRunnerCollectsWrites(t *testing.T) {
	sc, err := writeRow(t).ForServer(fuseserver.Gcsfuse)
	if err != nil {
		t.Fatal(err)
	}
	b := &storageBackend{}
	o := scenarios.Run(context.Background(), collecting{b}, sc, scenarios.RunOptions{Dir: t.TempDir(), Poll: time.Millisecond})
	if !o.Passed() {
		t.Errorf("with the storage read: %v %+v", o.Err, o.Verdicts)
	}
	if got := strings.Join(b.calls, ","); got != "setup,kill,start,collect,stop" {
		t.Errorf("calls %s: want the collection after the steps, before the teardown", got)
	}
	o = scenarios.Run(context.Background(), &storageBackend{}, sc, scenarios.RunOptions{Dir: t.TempDir(), Poll: time.Millisecond})
	if o.Passed() || !strings.Contains(o.Verdicts[0].Result.Why, "nothing was read from the volume's storage") {
		t.Errorf("without StorageReader: %v %+v", o.Err, o.Verdicts)
	}
}
