package workload

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/contract"
)

// Format is the log format: FormatText for people, FormatJSON (one object per line) for programs.
type Format string

const (
	FormatText Format = "text"
	FormatJSON Format = "json"
)

// String and Set make Format a flag.Value.
func (f *Format) String() string { return string(*f) }

func (f *Format) Set(s string) error {
	switch Format(s) {
	case FormatText, FormatJSON:
		*f = Format(s)
		return nil
	}
	return fmt.Errorf("unknown log format %q (want text or json)", s)
}

// The JSON log's event names and record, for the tests that read it; internal/contract defines them.
const (
	EventStart     = contract.WorkloadStart
	EventOpen      = contract.WorkloadOpen
	EventOpenError = contract.WorkloadOpenError
	EventReadStart = contract.WorkloadReadStart
	EventRead      = contract.WorkloadRead
	EventReadError = contract.WorkloadReadError
	EventClose     = contract.WorkloadClose
	EventExit      = contract.WorkloadExit

	EventWriteStart = contract.WorkloadWriteStart
	EventWrite      = contract.WorkloadWrite
	EventSync       = contract.WorkloadSync
	EventCheckpoint = contract.WorkloadCheckpoint
	EventWriteError = contract.WorkloadWriteError
)

// Record is one JSON log line.
type Record = contract.WorkloadRecord

type logger struct {
	format Format
	w      io.Writer
	clock  Clock
	file   string
}

func newLogger(f Format, w io.Writer, c Clock, file string) *logger {
	if f == "" {
		f = FormatText
	}
	return &logger{format: f, w: w, clock: c, file: file}
}

// emit writes one line: the JSON record, or the text line after the time. Write errors are ignored: the
// workload keeps reading even when nobody reads its log.
func (l *logger) emit(rec Record, text string) {
	now := l.clock.Now().UTC()
	if l.format == FormatJSON {
		if rec.Event == "" {
			return // a text-only line
		}
		rec.Time = now
		rec.File = l.file
		b, err := json.Marshal(rec)
		if err != nil {
			b = fmt.Appendf(nil, `{"event":"log_error","error":%q}`, err.Error())
		}
		_, _ = l.w.Write(append(b, '\n'))
		return
	}
	if text == "" {
		return
	}
	_, _ = fmt.Fprintf(l.w, "%s %s\n", now.Format(time.RFC3339), text)
}

func ptr[T any](v T) *T { return &v }

func (l *logger) start(c Config) {
	if c.Write {
		l.emit(Record{Event: EventStart, ExitOnError: ptr(c.ExitOnError), Interval: c.Interval.String(), Bytes: ptr(c.WriteSize)},
			fmt.Sprintf("starting to write: file %s, pieces of %d bytes every %s, fsync every %d, checkpoint every %d, exit-on-error %t",
				l.file, c.WriteSize, c.Interval, c.SyncEvery, c.CheckpointEvery, c.ExitOnError))
		return
	}
	l.emit(Record{Event: EventStart, KeepOpen: ptr(c.KeepOpen), ExitOnError: ptr(c.ExitOnError), DirectIO: ptr(c.DirectIO), Interval: c.Interval.String()},
		fmt.Sprintf("starting: file %s, keep-open %t, exit-on-error %t, direct-io %t, read interval %s", l.file, c.KeepOpen, c.ExitOnError, c.DirectIO, c.Interval))
}

// writeStart marks a write that began: one without its end is in flight (or hung).
func (l *logger) writeStart(seq int, off int64) {
	l.emit(Record{Event: EventWriteStart, Seq: ptr(seq), Offset: ptr(off)}, "")
}

func (l *logger) wrote(seq int, off int64, p []byte, latency time.Duration) {
	l.emit(Record{Event: EventWrite, Seq: ptr(seq), Offset: ptr(off), Bytes: ptr(len(p)), SHA256: sum(p), LatencyUS: ptr(latency.Microseconds())},
		fmt.Sprintf("wrote piece %d: %d bytes at %d", seq, len(p), off))
}

func (l *logger) synced(seq int, end int64, latency time.Duration) {
	l.emit(Record{Event: EventSync, Seq: ptr(seq), Offset: ptr(end), LatencyUS: ptr(latency.Microseconds())}, fmt.Sprintf("fsync after piece %d: durable up to %d", seq, end))
}

func (l *logger) checkpointed(seq int, data []byte, latency time.Duration) {
	l.emit(Record{Event: EventCheckpoint, Seq: ptr(seq), Bytes: ptr(len(data)), SHA256: sum(data), LatencyUS: ptr(latency.Microseconds())},
		fmt.Sprintf("checkpoint after piece %d: %d bytes renamed into place", seq, len(data)))
}

func (l *logger) writeError(op string, seq int, err error, latency time.Duration) {
	l.emit(Record{Event: EventWriteError, Op: op, Seq: ptr(seq), Errno: ptr(contract.ErrnoName(err)), Error: err.Error(), LatencyUS: ptr(latency.Microseconds())},
		fmt.Sprintf("%s error at piece %d: %v", op, seq, err))
}

func (l *logger) opened(latency time.Duration) {
	l.emit(Record{Event: EventOpen, LatencyUS: ptr(latency.Microseconds())}, "opened file "+l.file)
}

func (l *logger) openError(err error, latency time.Duration) {
	l.emit(Record{Event: EventOpenError, Errno: ptr(contract.ErrnoName(err)), Error: err.Error(), LatencyUS: ptr(latency.Microseconds())}, "open error: "+err.Error())
}

// reading marks the start of a read: a read that never returns (a hung FUSE request) shows as a start
// without an end, and a scenario can tell that a read is inside the FUSE server right now.
func (l *logger) reading() { l.emit(Record{Event: EventReadStart}, "reading") }

func (l *logger) read(data []byte, latency time.Duration) {
	l.emit(Record{Event: EventRead, Bytes: ptr(len(data)), Content: ptr(string(data)), LatencyUS: ptr(latency.Microseconds())},
		fmt.Sprintf("read %d bytes: %q", len(data), data))
}

func (l *logger) readError(err error, latency time.Duration) {
	l.emit(Record{Event: EventReadError, Errno: ptr(contract.ErrnoName(err)), Error: err.Error(), LatencyUS: ptr(latency.Microseconds())},
		"read error: "+err.Error())
}

// closed logs a close; a failing close (flush on a dead mount) is logged with its error but is not an
// I/O error for --exit-on-error: the read before it already succeeded or failed on its own.
func (l *logger) closed(err error) {
	if err != nil {
		l.emit(Record{Event: EventClose, Errno: ptr(contract.ErrnoName(err)), Error: err.Error()}, "close error: "+err.Error())
		return
	}
	l.emit(Record{Event: EventClose}, "closed file "+l.file)
}

func (l *logger) exit(code int, reason string) {
	l.emit(Record{Event: EventExit, Code: ptr(code), Reason: reason}, fmt.Sprintf("exiting with code %d: %s", code, reason))
}
