package workload

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeRun runs the writer on a file of a temporary directory for rounds pieces and returns its JSON log,
// the file and the checkpoint.
func writeRun(t *testing.T, cfg Config, rounds int) (recs []Record, file, ckpt []byte) {
	t.Helper()
	cfg.File = filepath.Join(t.TempDir(), "train.log")
	cfg.Write, cfg.Format, cfg.Interval = true, FormatJSON, time.Second
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	var out bytes.Buffer
	if code := Run(ctx, cfg, Env{Out: &out, Clock: &fakeClock{now: t0, step: time.Millisecond, rounds: rounds, cancel: cancel}}); code != ExitOK {
		t.Fatalf("exit code %d; log:\n%s", code, out.String())
	}
	file, err := os.ReadFile(cfg.File)
	if err != nil {
		t.Fatal(err)
	}
	ckpt, err = os.ReadFile(CheckpointPath(cfg.File))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return records(t, out.String()), file, ckpt
}

// TestWriterLogsWhatItWrote: pieces, fsyncs and checkpoints in the order and number the flags say, and the
// checker accepts what a local filesystem kept.
func TestWriterLogsWhatItWrote(t *testing.T) {
	recs, file, ckpt := writeRun(t, Config{WriteSize: 100, SyncEvery: 2, CheckpointEvery: 3}, 7)
	want := "start open write_start write write_start write sync write_start write checkpoint write_start write sync " +
		"write_start write write_start write sync checkpoint write_start write close exit"
	if got := events(recs); got != want {
		t.Errorf("events:\n%s\nwant\n%s", got, want)
	}
	if len(file) != 700 || !bytes.HasPrefix(file, []byte("piece 00000000 ")) {
		t.Errorf("the file: %d bytes, starting %q", len(file), file[:min(len(file), 20)])
	}
	if !bytes.Equal(ckpt, CheckpointData(5, 300)) {
		t.Errorf("the checkpoint: %q", ckpt[:min(len(ckpt), 20)])
	}
	if err := CheckWritten(recs, file, ckpt); err != nil {
		t.Errorf("CheckWritten on what the writer wrote: %v", err)
	}
	// Each acknowledgement says how long its operation took (the fake clock steps 1 ms per reading), as a
	// read's does: a write that waited for a FUSE server shows as a stall.
	for _, r := range recs {
		if (r.Event == EventWrite || r.Event == EventSync || r.Event == EventCheckpoint) && (r.LatencyUS == nil || *r.LatencyUS <= 0) {
			t.Errorf("%s %v has no latency", r.Event, r.Seq)
		}
	}
}

// TestCheckWrittenFindsLosses: every way storage can differ from what the writer was told is an error that
// says what.
func TestCheckWrittenFindsLosses(t *testing.T) {
	recs, file, ckpt := writeRun(t, Config{WriteSize: 100, SyncEvery: 2, CheckpointEvery: 3}, 7)
	changed := bytes.Clone(file)
	changed[250] ^= 1
	older := CheckpointData(2, 300)
	for name, tc := range map[string]struct {
		file, ckpt []byte
		want       string
	}{
		"a lost piece":            {file[:600], ckpt, "differs from the 700 acknowledged bytes at byte 600"},
		"a changed byte":          {changed, ckpt, "at byte 250"},
		"bytes after":             {append(bytes.Clone(file), "junk"...), ckpt, "not the piece in flight"},
		"the older checkpoint":    {file, older, "neither the acknowledged checkpoint 5"},
		"no checkpoint":           {file, nil, "checkpoint 5 was acknowledged but there is none"},
		"a torn later checkpoint": {file, CheckpointData(8, 300)[:150], "neither"},
	} {
		err := CheckWritten(recs, tc.file, tc.ckpt)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", name, err, tc.want)
		}
	}
	// A later checkpoint, whole, is one whose rename was in flight when the log ended.
	if err := CheckWritten(recs, file, CheckpointData(8, 300)); err != nil {
		t.Errorf("a later whole checkpoint: %v", err)
	}
}

// TestCheckDurableSaysWhatIsLost: after a fault that loses what was not durable, the storage may lack the
// pieces after the last acknowledged fsync, and the check says which; anything less, or different, is an error.
func TestCheckDurableSaysWhatIsLost(t *testing.T) {
	recs, file, ckpt := writeRun(t, Config{WriteSize: 100, SyncEvery: 2, CheckpointEvery: 3}, 7) // fsyncs after pieces 1, 3, 5
	changed := bytes.Clone(file)
	changed[150] ^= 1
	for name, tc := range map[string]struct {
		file []byte
		want Loss
	}{
		"all of it":                   {file, Loss{First: -1}},
		"up to the last fsync":        {file[:600], Loss{First: 6, Pieces: 1, Bytes: 100}},
		"part of a piece after fsync": {file[:650], Loss{First: 6, Pieces: 1, Bytes: 50}},
	} {
		got, err := CheckDurable(recs, tc.file, ckpt)
		if err != nil || got != tc.want {
			t.Errorf("%s: %+v, %v; want %+v", name, got, err, tc.want)
		}
	}
	for name, tc := range map[string]struct {
		file, ckpt []byte
		want       string
	}{
		"less than the last fsync": {file[:400], ckpt, "less than the 600 an fsync acknowledged as durable (after piece 5)"},
		"no file":                  {nil, ckpt, "less than the 600"},
		"a changed byte":           {changed, ckpt, "at byte 150"},
		"junk after":               {append(bytes.Clone(file), "junk"...), ckpt, "not the piece in flight"},
		"the older checkpoint":     {file, CheckpointData(2, 300), "neither the acknowledged checkpoint 5"},
	} {
		if _, err := CheckDurable(recs, tc.file, tc.ckpt); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", name, err, tc.want)
		}
	}
	// Without any fsync, nothing of the file is durable: none of it may be there.
	recs, file, ckpt = writeRun(t, Config{WriteSize: 100, CheckpointEvery: 3}, 4)
	if got, err := CheckDurable(recs, nil, ckpt); err != nil || got != (Loss{First: 0, Pieces: 4, Bytes: 400}) {
		t.Errorf("no fsync, no file: %+v, %v; want all 4 pieces lost", got, err)
	}
	if got, err := CheckDurable(recs, file, ckpt); err != nil || got.Pieces != 0 {
		t.Errorf("no fsync, the whole file: %+v, %v; want nothing lost", got, err)
	}
}
