// Package workload is an application that keeps reading a file, the way a pod reads from a FUSE volume, and
// logs every open, read and error so that a mount loss can be seen and measured; or, with Config.Write, keeps
// writing one (see writer).
//
// With KeepOpen it opens the file once and re-reads the same descriptor (pread at offset 0) forever, even
// after an error: a descriptor opened before a FUSE server crash stays broken, and that is what it shows.
// Without KeepOpen every round opens, reads and closes the file, showing whether new opens work.
package workload

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Exit codes of Run.
const (
	ExitOK    = 0 // stopped by a signal (the context)
	ExitError = 1 // first I/O error with ExitOnError
	ExitUsage = 2 // bad command line
)

// Config is what the command line sets.
type Config struct {
	File        string
	ExitOnError bool
	Interval    time.Duration
	KeepOpen    bool
	// DirectIO opens the file with O_DIRECT: every read bypasses the page cache and reaches the FUSE server
	// (fuse_direct_IO in fs/fuse/file.c), whether or not the server asked for direct I/O itself.
	DirectIO bool
	Format   Format
	// Write makes it write instead (see writer): pieces of WriteSize bytes every Interval, an fsync every
	// SyncEvery pieces and a checkpoint every CheckpointEvery (0: never).
	Write                      bool
	WriteSize                  int
	SyncEvery, CheckpointEvery int
}

// File is an open file that reads with one pread(2) per call, so that every read is one FUSE READ request
// with direct I/O.
type File interface {
	ReadAt(p []byte, off int64) (int, error)
	Close() error
}

// Clock abstracts time so tests run without sleeping.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

// Env holds Run's dependencies; zero fields mean the real ones (os.Stdout, wall clock, open(2) with
// O_DIRECT when Config.DirectIO).
type Env struct {
	Out   io.Writer
	Clock Clock
	Open  func(path string) (File, error)
}

// readBufSize is more than the file holds; one pread returns all of it.
const readBufSize = 4096

// Run reads cfg.File until ctx is done (exit 0) or, with ExitOnError, until the first open or read error
// (exit 1). The first read happens at once, then one every cfg.Interval. It returns the exit code.
func Run(ctx context.Context, cfg Config, env Env) int {
	if env.Out == nil {
		env.Out = os.Stdout
	}
	if env.Clock == nil {
		env.Clock = realClock{}
	}
	if env.Open == nil {
		env.Open = func(path string) (File, error) { return openFile(path, cfg.DirectIO) }
	}
	log := newLogger(cfg.Format, env.Out, env.Clock, cfg.File)
	if cfg.Write {
		code, reason := (&writer{cfg: cfg, env: env, log: log, fd: -1}).loop(ctx)
		log.exit(code, reason)
		return code
	}
	r := &runner{cfg: cfg, env: env, log: log, buf: make([]byte, readBufSize)}
	code, reason := r.loop(ctx)
	if r.f != nil {
		r.close()
	}
	r.log.exit(code, reason)
	return code
}

type runner struct {
	cfg Config
	env Env
	log *logger
	buf []byte
	f   File // the open file (KeepOpen), nil when not open
}

func (r *runner) loop(ctx context.Context) (code int, reason string) {
	r.log.start(r.cfg)
	return rounds(ctx, r.cfg, r.env.Clock, r.round)
}

// rounds runs round at once and then every cfg.Interval until ctx is done (exit 0) or, with ExitOnError, a
// round fails (exit 1, the reason its error): the reader's and the writer's loop.
func rounds(ctx context.Context, cfg Config, clock Clock, round func(context.Context) error) (code int, reason string) {
	for {
		if err := round(ctx); err != nil {
			if ctx.Err() != nil {
				return ExitOK, stopReason(ctx)
			}
			if cfg.ExitOnError {
				return ExitError, err.Error()
			}
		}
		if ctx.Err() != nil {
			return ExitOK, stopReason(ctx)
		}
		select {
		case <-ctx.Done():
			return ExitOK, stopReason(ctx)
		case <-clock.After(cfg.Interval):
		}
	}
}

func stopReason(ctx context.Context) string {
	if err := context.Cause(ctx); err != nil {
		return err.Error()
	}
	return "stopped"
}

// round opens the file if needed, reads it once and, without KeepOpen, closes it. It returns the error that
// counts for ExitOnError, already logged.
func (r *runner) round(ctx context.Context) error {
	if r.f == nil {
		start := r.env.Clock.Now()
		f, err, stuck := r.openCtx(ctx)
		if stuck {
			return ctx.Err() // stopped while the open was stuck: nothing to log about it
		}
		latency := r.env.Clock.Now().Sub(start)
		if err != nil {
			r.log.openError(err, latency)
			return fmt.Errorf("open error: %w", err)
		}
		r.f = f
		r.log.opened(latency)
	}
	r.log.reading()
	start := r.env.Clock.Now()
	n, err := r.readCtx(ctx)
	latency := r.env.Clock.Now().Sub(start)
	if n < 0 {
		return ctx.Err() // stopped while the read was stuck: nothing to log about it
	}
	if err != nil {
		// KeepOpen keeps this descriptor: re-opening would hide that it is broken for good.
		r.log.readError(err, latency)
		if !r.cfg.KeepOpen {
			r.close()
		}
		return fmt.Errorf("read error: %w", err)
	}
	r.log.read(r.buf[:n], latency)
	if !r.cfg.KeepOpen {
		r.close()
	}
	return nil
}

// openCtx opens the file in a goroutine, for the same reason as readCtx: an open waits for the FUSE server
// too. stuck reports that ctx ended first (the file, if the open ever returns, is closed then).
func (r *runner) openCtx(ctx context.Context) (f File, err error, stuck bool) {
	type result struct {
		f   File
		err error
	}
	done := make(chan result, 1)
	go func() {
		f, err := r.env.Open(r.cfg.File)
		done <- result{f, err}
	}()
	select {
	case res := <-done:
		return res.f, res.err, false
	case <-ctx.Done():
		go func() {
			if res := <-done; res.err == nil {
				_ = res.f.Close()
			}
		}()
		return nil, nil, true
	}
}

// readCtx reads in a goroutine so that a read stuck in the kernel (a FUSE server that is gone while someone
// still holds its /dev/fuse descriptor) does not keep the workload from stopping. It returns n < 0 and a nil
// error when ctx ended first.
func (r *runner) readCtx(ctx context.Context) (int, error) {
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	buf := make([]byte, len(r.buf))
	f := r.f
	go func() {
		n, err := f.ReadAt(buf, 0)
		done <- result{n, err}
	}()
	select {
	case res := <-done:
		copy(r.buf, buf[:max(res.n, 0)])
		return res.n, res.err
	case <-ctx.Done():
		r.f = nil // the stuck goroutine still uses it; do not close under it
		return -1, nil
	}
}

func (r *runner) close() {
	err := r.f.Close()
	r.f = nil
	r.log.closed(err)
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// osFile is a descriptor read with exactly one pread per ReadAt (os.File.ReadAt loops until the buffer is full,
// which would cost a second FUSE request per read to see EOF). It is a bare descriptor, not an os.File: Go
// adds an os.File to its poller when the file supports poll (a FUSE server may answer POLL), and once the
// connection dies epoll reports an error on it and every read fails with "not pollable" before the kernel is
// asked, hiding the errno the workload must log (seen with k8s-csi-s3's rclone).
type osFile struct {
	fd   int
	path string
}

func openFile(path string, direct bool) (File, error) {
	flags := unix.O_RDONLY | unix.O_CLOEXEC
	if direct {
		flags |= unix.O_DIRECT
	}
	for {
		fd, err := unix.Open(path, flags, 0)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return nil, &os.PathError{Op: "open", Path: path, Err: err}
		}
		return osFile{fd: fd, path: path}, nil
	}
}

func (o osFile) ReadAt(p []byte, off int64) (int, error) {
	for {
		n, err := unix.Pread(o.fd, p, off)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return 0, &os.PathError{Op: "read", Path: o.path, Err: err}
		}
		return n, nil
	}
}

func (o osFile) Close() error {
	if err := unix.Close(o.fd); err != nil {
		return &os.PathError{Op: "close", Path: o.path, Err: err}
	}
	return nil
}
