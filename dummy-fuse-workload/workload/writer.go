package workload

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// The writer (Config.Write) is what a training job does to a volume: it appends pieces to a log kept open
// (fsync every Config.SyncEvery pieces) and, every Config.CheckpointEvery pieces, writes a checkpoint beside
// it, fsyncs and closes it and renames it into place. Every piece and checkpoint is logged only once the
// kernel acknowledged it, with where it went and its SHA-256, so that CheckWritten can tell, byte for byte,
// whether what the volume's storage holds afterwards is everything the writer was told was written.
//
// Pieces and checkpoints are made from their sequence numbers (Piece, CheckpointData), so a checker needs
// only the log.

// Piece is the seq-th piece the writer appends: size bytes, distinct for every seq, ending in a newline.
func Piece(seq, size int) []byte { return pattern(fmt.Sprintf("piece %08d ", seq), size) }

// CheckpointData is the checkpoint the writer writes after piece seq.
func CheckpointData(seq, size int) []byte { return pattern(fmt.Sprintf("checkpoint %08d ", seq), size) }

func pattern(unit string, size int) []byte {
	b := bytes.Repeat([]byte(unit), size/len(unit)+1)[:size]
	if size > 0 {
		b[size-1] = '\n'
	}
	return b
}

// CheckpointPath and its temporary name, beside the file.
func CheckpointPath(file string) string { return file + ".ckpt" }
func checkpointTemp(file string) string { return file + ".ckpt.tmp" }

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

type writer struct {
	cfg Config
	env Env
	log *logger
	fd  int // the file, -1 while not open
	off int64
	seq int
}

func (w *writer) loop(ctx context.Context) (code int, reason string) {
	w.log.start(w.cfg)
	defer w.close()
	return rounds(ctx, w.cfg, w.env.Clock, w.step)
}

// step appends the next piece, then syncs and checkpoints when it is their turn. It returns the error that
// counts for ExitOnError, already logged.
func (w *writer) step(ctx context.Context) error {
	if w.fd < 0 {
		if err := w.open(ctx); err != nil {
			return err
		}
	}
	p := Piece(w.seq, w.cfg.WriteSize)
	w.log.writeStart(w.seq, w.off)
	start := w.env.Clock.Now()
	err, stuck := bounded(ctx, func() error { return writeAll(w.fd, p) })
	if stuck {
		w.fd = -1 // still in use by the stuck write: not closed under it
		return ctx.Err()
	}
	if err != nil {
		// The descriptor is kept: what happens to it is what the workload shows.
		w.log.writeError("write", w.seq, err, w.since(start))
		return fmt.Errorf("write error: %w", err)
	}
	w.log.wrote(w.seq, w.off, p, w.since(start))
	w.off += int64(len(p))
	w.seq++
	if w.cfg.SyncEvery > 0 && w.seq%w.cfg.SyncEvery == 0 {
		start := w.env.Clock.Now()
		err, stuck := bounded(ctx, func() error { return unix.Fsync(w.fd) })
		if stuck {
			w.fd = -1
			return ctx.Err()
		}
		if err != nil {
			w.log.writeError("fsync", w.seq-1, err, w.since(start))
			return fmt.Errorf("fsync error: %w", err)
		}
		w.log.synced(w.seq-1, w.off, w.since(start))
	}
	if w.cfg.CheckpointEvery > 0 && w.seq%w.cfg.CheckpointEvery == 0 {
		return w.checkpoint(ctx, w.seq-1)
	}
	return nil
}

func (w *writer) open(ctx context.Context) error {
	var fd int
	var st unix.Stat_t
	err, stuck := bounded(ctx, func() error {
		var err error
		if fd, err = unix.Open(w.cfg.File, unix.O_WRONLY|unix.O_CREAT|unix.O_APPEND|unix.O_CLOEXEC, 0o644); err != nil {
			return err
		}
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return err
		}
		return nil
	})
	if stuck {
		return ctx.Err()
	}
	if err != nil {
		w.log.openError(&os.PathError{Op: "open", Path: w.cfg.File, Err: err}, 0)
		return fmt.Errorf("open error: %w", err)
	}
	w.fd, w.off = fd, st.Size
	w.log.opened(0)
	return nil
}

// checkpoint writes the checkpoint of piece seq beside the file, fsyncs and closes it, and renames it into
// place, as a training job saves its state.
func (w *writer) checkpoint(ctx context.Context, seq int) error {
	data := CheckpointData(seq, w.cfg.WriteSize*w.cfg.CheckpointEvery)
	tmp := checkpointTemp(w.cfg.File)
	op := "create"
	start := w.env.Clock.Now()
	err, stuck := bounded(ctx, func() error {
		fd, err := unix.Open(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return err
		}
		op = "write"
		if err := writeAll(fd, data); err != nil {
			unix.Close(fd)
			return err
		}
		op = "fsync"
		if err := unix.Fsync(fd); err != nil {
			unix.Close(fd)
			return err
		}
		op = "close"
		if err := unix.Close(fd); err != nil {
			return err
		}
		op = "rename"
		return unix.Rename(tmp, CheckpointPath(w.cfg.File))
	})
	if stuck {
		return ctx.Err()
	}
	if err != nil {
		w.log.writeError(op, seq, err, w.since(start))
		return fmt.Errorf("checkpoint %s error: %w", op, err)
	}
	w.log.checkpointed(seq, data, w.since(start))
	return nil
}

// since is how long an operation begun at start took: logged with it, so that a reader of the log sees how
// long a write waited for a FUSE server (a stall) as it sees a read's.
func (w *writer) since(start time.Time) time.Duration { return w.env.Clock.Now().Sub(start) }

func (w *writer) close() {
	if w.fd < 0 {
		return
	}
	err := unix.Close(w.fd)
	w.fd = -1
	if err != nil {
		w.log.closed(&os.PathError{Op: "close", Path: w.cfg.File, Err: err})
		return
	}
	w.log.closed(nil)
}

// bounded runs op in a goroutine, so that an operation stuck in a FUSE server does not keep the workload
// from stopping; stuck reports that ctx ended first.
func bounded(ctx context.Context, op func() error) (err error, stuck bool) {
	done := make(chan error, 1)
	go func() { done <- op() }()
	select {
	case err := <-done:
		return err, false
	case <-ctx.Done():
		return nil, true
	}
}

// writeAll writes all of p to fd (a short write goes on where it stopped).
func writeAll(fd int, p []byte) error {
	for len(p) > 0 {
		n, err := unix.Write(fd, p)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return err
		case n == 0:
			return unix.EIO
		}
		p = p[n:]
	}
	return nil
}

// CheckWritten checks what a writer's log says it was told against what the storage holds afterwards: file
// (from the first piece's offset on) must be every acknowledged piece in order, with at most the piece that
// was in flight when the log ends after them, and ckpt must be the last acknowledged checkpoint or the one
// in flight after it. nil ckpt: the writer wrote no checkpoint.
func CheckWritten(recs []Record, file, ckpt []byte) error {
	w, err := readLog(recs)
	if err != nil {
		return err
	}
	if int64(len(file)) < w.start {
		return fmt.Errorf("the file holds %d bytes, less than the %d before the first piece", len(file), w.start)
	}
	got := file[w.start:]
	if !bytes.HasPrefix(got, w.acked.Bytes()) {
		i := 0
		for i < len(got) && i < w.acked.Len() && got[i] == w.acked.Bytes()[i] {
			i++
		}
		return fmt.Errorf("the file differs from the %d acknowledged bytes at byte %d (%d bytes there): an acknowledged write was lost or changed", w.acked.Len(), w.start+int64(i), len(got))
	}
	if err := w.checkExtra(got[w.acked.Len():]); err != nil {
		return err
	}
	return w.checkCheckpoint(ckpt)
}

// Loss is what a storage lacks of a writer's acknowledged pieces: Pieces of them, Bytes in all, from piece
// First on (CheckDurable).
type Loss struct {
	First, Pieces int
	Bytes         int64
}

// CheckDurable checks the storage after a fault that loses what was not durable (every holder of a FUSE
// connection dying at once): file (nil: no such object) must hold, from the first piece's offset on, the
// acknowledged pieces in order up to at least the end the writer's last acknowledged fsync made durable, and
// nothing that differs from them (past them at most the piece in flight); ckpt is checked as CheckWritten
// does (a checkpoint is fsync'ed and closed before it counts). It returns what is lost: the acknowledged
// pieces past what the file holds, all acknowledged after the last durable point.
func CheckDurable(recs []Record, file, ckpt []byte) (Loss, error) {
	w, err := readLog(recs)
	if err != nil {
		return Loss{}, err
	}
	if len(file) > 0 && int64(len(file)) < w.start {
		return Loss{}, fmt.Errorf("the file holds %d bytes, less than the %d before the first piece", len(file), w.start)
	}
	var got []byte
	if len(file) > 0 {
		got = file[w.start:]
	}
	want := w.acked.Bytes()
	n := min(len(got), len(want))
	if i := mismatch(got[:n], want[:n]); i >= 0 {
		return Loss{}, fmt.Errorf("the file differs from the acknowledged bytes at byte %d (%d bytes there): an acknowledged write was changed", w.start+int64(i), len(got))
	}
	if err := w.checkExtra(got[n:]); err != nil {
		return Loss{}, err
	}
	if held := w.start + int64(len(got)); w.durable > held {
		return Loss{}, fmt.Errorf("the file holds %d bytes, less than the %d an fsync acknowledged as durable (after piece %d): a durable write was lost", held, w.durable, w.durableSeq)
	}
	if err := w.checkCheckpoint(ckpt); err != nil {
		return Loss{}, err
	}
	loss := Loss{First: -1}
	for _, p := range w.pieces {
		if p.end-w.start > int64(len(got)) {
			if loss.First < 0 {
				loss.First = p.seq
			}
			loss.Pieces++
			loss.Bytes += p.end - max(p.end-p.n, w.start+int64(len(got)))
		}
	}
	return loss, nil
}

// mismatch is the first index where a and b (of one length) differ, -1 when they do not.
func mismatch(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// writtenLog is what a writer's log says it was told: the acknowledged pieces from offset start on, the piece
// in flight at the end (-1: none), the last acknowledged checkpoint and the end the last fsync made durable.
type writtenLog struct {
	start      int64
	acked      bytes.Buffer
	pieces     []ackedPiece
	inFlight   int
	lastCkpt   Record
	durable    int64 // 0: no fsync acknowledged
	durableSeq int
}

type ackedPiece struct {
	seq    int
	n, end int64
}

func readLog(recs []Record) (*writtenLog, error) {
	w := &writtenLog{start: -1, inFlight: -1}
	for _, r := range recs {
		switch r.Event {
		case EventWriteStart:
			w.inFlight = *r.Seq
		case EventWrite:
			if w.start < 0 {
				w.start = *r.Offset
			}
			if *r.Offset != w.start+int64(w.acked.Len()) {
				return nil, fmt.Errorf("piece %d was written at %d, after %d bytes from %d: the log is not one writer's", *r.Seq, *r.Offset, w.acked.Len(), w.start)
			}
			p := Piece(*r.Seq, *r.Bytes)
			if sum(p) != r.SHA256 {
				return nil, fmt.Errorf("piece %d: the log's SHA-256 is not the piece's", *r.Seq)
			}
			w.acked.Write(p)
			w.pieces = append(w.pieces, ackedPiece{seq: *r.Seq, n: int64(len(p)), end: *r.Offset + int64(len(p))})
			w.inFlight = -1
		case EventSync:
			if r.Offset != nil && *r.Offset > w.durable {
				w.durable, w.durableSeq = *r.Offset, *r.Seq
			}
		case EventCheckpoint:
			w.lastCkpt = r
		}
	}
	if w.start < 0 {
		return nil, errors.New("the log has no acknowledged write")
	}
	return w, nil
}

// checkExtra checks what the file holds past the acknowledged pieces: at most the piece in flight.
func (w *writtenLog) checkExtra(extra []byte) error {
	if len(extra) > 0 && (w.inFlight < 0 || !bytes.Equal(extra, Piece(w.inFlight, len(extra)))) {
		return fmt.Errorf("the file holds %d bytes after the acknowledged ones that are not the piece in flight", len(extra))
	}
	return nil
}

// checkCheckpoint checks ckpt (nil: none) against the last acknowledged checkpoint: it or a later one whole.
func (w *writtenLog) checkCheckpoint(ckpt []byte) error {
	last := w.lastCkpt
	if last.Event == "" {
		return nil
	}
	if ckpt == nil {
		return fmt.Errorf("checkpoint %d was acknowledged but there is none", *last.Seq)
	}
	if sum(ckpt) != last.SHA256 {
		var seq int
		if _, err := fmt.Sscanf(string(ckpt), "checkpoint %d ", &seq); err != nil || seq <= *last.Seq || !bytes.Equal(ckpt, CheckpointData(seq, len(ckpt))) {
			return fmt.Errorf("the checkpoint (%d bytes) is neither the acknowledged checkpoint %d nor a later one whole", len(ckpt), *last.Seq)
		}
	}
	return nil
}
