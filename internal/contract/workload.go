package contract

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The events of the workload's JSON log (dummy-fuse-workload --log-format=json), one WorkloadRecord per line.
const (
	WorkloadStart     = "start"
	WorkloadOpen      = "open"
	WorkloadOpenError = "open_error"
	WorkloadReadStart = "read_start" // a read that never ends (a hung FUSE request) shows as a start without an end
	WorkloadRead      = "read"
	WorkloadReadError = "read_error"
	WorkloadClose     = "close"
	WorkloadExit      = "exit"

	// The writer's (dummy-fuse-workload --write): each write of a piece starts and ends (or fails); a sync
	// follows every few, a checkpoint (written beside the file, fsync'ed, renamed into place) every few more.
	WorkloadWriteStart = "write_start"
	WorkloadWrite      = "write"
	WorkloadSync       = "sync"
	WorkloadCheckpoint = "checkpoint"
	WorkloadWriteError = "write_error"
)

// WorkloadRecord is one line of the workload's JSON log; the fields of other events are omitted.
type WorkloadRecord struct {
	Time  time.Time `json:"time"`
	Event string    `json:"event"`
	File  string    `json:"file"`

	KeepOpen    *bool  `json:"keep_open,omitempty"`
	ExitOnError *bool  `json:"exit_on_error,omitempty"`
	DirectIO    *bool  `json:"direct_io,omitempty"`
	Interval    string `json:"interval,omitempty"`

	Bytes   *int    `json:"bytes,omitempty"`
	Content *string `json:"content,omitempty"`
	// Errno is ErrnoName of the error.
	Errno *string `json:"errno,omitempty"`
	Error string  `json:"error,omitempty"`
	// LatencyUS is how long the open or read took (a read or open that waited for a FUSE server shows here);
	// in the writer's write, sync, checkpoint and write_error how long that operation took.
	LatencyUS *int64 `json:"latency_us,omitempty"`

	// The writer's: the piece's sequence number (or the checkpoint's), where it went in the file, and the
	// SHA-256 of what was written (hex); Op names what failed in a write_error (create, write, fsync, close,
	// rename). Bytes is how much was written.
	Seq    *int   `json:"seq,omitempty"`
	Offset *int64 `json:"offset,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
	Op     string `json:"op,omitempty"`

	Code   *int   `json:"code,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// ErrnoName returns the symbolic name ("ENOTCONN") of the errno inside err, or "" when err carries none.
func ErrnoName(err error) string {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return ""
	}
	if name := unix.ErrnoName(errno); name != "" {
		return name
	}
	return fmt.Sprintf("errno %d", int(errno))
}
