package scenarios

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/dummy-fuse-workload/workload"
)

// The checks of the writer containers (Container.Write, write.go).

// Writes holds when writer container C has had N pieces acknowledged since After (the zero anchor: the start
// of the run). A wait step uses it: a writer has written before the fault, and goes on after it.
type Writes struct {
	C     string
	N     int
	After Anchor
}

func (c Writes) after() Anchor {
	if c.After == "" {
		return FromStart
	}
	return c.After
}

func (c Writes) Describe() string {
	return fmt.Sprintf("%s has had %d pieces acknowledged %s", c.C, c.N, c.after().phrase())
}

func (c Writes) Label() string { return "until " + c.C + " writes" }

func (c Writes) Containers() []string { return names(c.C) }

func (c Writes) Eval(ev *Evidence, _ Timing) Result {
	from, why := c.after().resolve(ev)
	if why != "" {
		return Result{Why: why}
	}
	n := ev.Count(from, func(e Event) bool { return e.Container == c.C && e.IsAckedWrite() })
	return Result{OK: n >= c.N, Why: fmt.Sprintf("%s: %d pieces acknowledged %s", c.C, n, c.after().phrase())}
}

// WritesKept holds when writer container C lost nothing: its log has no failed open, write, fsync, checkpoint
// or close (or, with Errnos, every one failed with one of them: a limit row's operations that found no server), at
// least Writes pieces were acknowledged after the kill, and the storage, read without the mount after the
// writer was stopped (StorageReader), holds every acknowledged piece in order and the last acknowledged
// checkpoint, byte for byte (workload.CheckWritten). Its failure says what differed.
type WritesKept struct {
	C      string
	Writes int
	Errnos []string
}

func (c WritesKept) Describe() string {
	fails := "no open, write, fsync, checkpoint or close of it fails"
	if len(c.Errnos) > 0 {
		fails = "an open, write, fsync, checkpoint or close of it fails with " + strings.Join(c.Errnos, " or ") + " if at all"
	}
	return fmt.Sprintf("%s's writes are kept: %s, at least %d pieces are "+
		"acknowledged after the kill, and the storage (read without the mount once %s is stopped) holds every acknowledged "+
		"byte and the last acknowledged checkpoint", c.C, fails, c.Writes, c.C)
}

func (c WritesKept) Label() string { return "writes of " + c.C + " kept" }

func (c WritesKept) Containers() []string { return names(c.C) }

func (c WritesKept) Eval(ev *Evidence, _ Timing) Result {
	k, why := AfterKill.resolve(ev)
	if why != "" {
		return Result{Why: why}
	}
	failed, other := writerFailures(ev, c.C, c.Errnos)
	if len(other) > 0 {
		return Result{Why: fmt.Sprintf("%d failed operations of %s, first: %s", len(other), c.C, strings.Join(other[:min(len(other), 3)], "; "))}
	}
	after := ev.Count(k, func(e Event) bool { return e.Container == c.C && e.IsAckedWrite() })
	if after < c.Writes {
		return Result{Why: fmt.Sprintf("only %d pieces of %s acknowledged after the kill, fewer than %d: the writer did not go on", after, c.C, c.Writes)}
	}
	recs, file, ckpt, why := writerRun(ev, c.C)
	if why != "" {
		return Result{Why: why}
	}
	got, missing, why := storedData(ev, c.C, file)
	if missing {
		why = "the storage has no " + file
	}
	if why != "" {
		return Result{Why: why}
	}
	// A missing checkpoint is for CheckWritten to judge: the writer may have acknowledged none.
	gotCkpt, _, why := storedData(ev, c.C, ckpt)
	if why != "" {
		return Result{Why: why}
	}
	if err := workload.CheckWritten(recs, got, gotCkpt); err != nil {
		return Result{Why: fmt.Sprintf("the storage's %s (%d bytes) and %s against %s's log: %v", file, len(got), ckpt, c.C, err)}
	}
	pieces := ev.Count(time.Time{}, func(e Event) bool { return e.Container == c.C && e.IsAckedWrite() })
	ckpts := ev.Count(time.Time{}, func(e Event) bool { return e.Container == c.C && e.Source == SrcWorkload && e.Kind == KCheckpoint })
	return Result{OK: true, Why: fmt.Sprintf("%d pieces (%d after the kill) and %d checkpoints acknowledged, %s, longest write, fsync or checkpoint %s; "+
		"the storage's %s (%d bytes) and %s hold them all", pieces, after, ckpts, failedText(failed, c.Errnos), longestWrite(ev, c.C), file, len(got), ckpt)}
}

// failedText says how many operations failed with errno: none, or how many and the first.
func failedText(failed, errnos []string) string {
	if len(failed) == 0 {
		return "none failed"
	}
	return fmt.Sprintf("%d failed with %s (first: %s)", len(failed), strings.Join(errnos, " or "), failed[0])
}

// KeepsDurableWrites holds for a limit row, a fault the relay does not promise to ride out (every holder of
// the connection dying at once): writer container C's operations after the kill fail with one of Errnos, and the
// storage, read without the mount once C is stopped, holds everything C was told was durable: its file up to
// the end of its last acknowledged fsync, in order and byte for byte, and its last acknowledged checkpoint
// (workload.CheckDurable). What the storage lacks are pieces acknowledged after the last fsync, which only
// the dead holders had; the result says exactly which.
type KeepsDurableWrites struct {
	C      string
	Errnos []string
}

func (c KeepsDurableWrites) Describe() string {
	return fmt.Sprintf("%s's writes fail with %s after the kill, and the storage (read without the mount once %s is stopped) holds "+
		"every byte an fsync of %s acknowledged and its last acknowledged checkpoint; what it lacks, acknowledged after the last fsync, is named",
		c.C, strings.Join(c.Errnos, " or "), c.C, c.C)
}

func (c KeepsDurableWrites) Label() string { return "durable writes of " + c.C + " kept" }

func (c KeepsDurableWrites) Containers() []string { return names(c.C) }

func (c KeepsDurableWrites) Eval(ev *Evidence, _ Timing) Result {
	failed, other := writerFailures(ev, c.C, c.Errnos)
	switch {
	case len(other) > 0:
		return Result{Why: fmt.Sprintf("%d operations of %s failed otherwise than with %s, first: %s", len(other), c.C, strings.Join(c.Errnos, " or "), other[0])}
	case len(failed) == 0:
		return Result{Why: fmt.Sprintf("no operation of %s failed: the fault was not the limit", c.C)}
	}
	loss, file, held, why := ev.durableLoss(c.C)
	if why != "" {
		return Result{Why: why}
	}
	ckpt := Container{Name: c.C}.Objects()[1]
	pieces := ev.Count(time.Time{}, func(e Event) bool { return e.Container == c.C && e.IsAckedWrite() })
	lost := "nothing acknowledged is missing"
	if loss.Pieces > 0 {
		lost = fmt.Sprintf("lost: %d acknowledged pieces (%d bytes) from piece %d on, all after the last fsync", loss.Pieces, loss.Bytes, loss.First)
	}
	return Result{OK: true, Why: fmt.Sprintf("%s; of %d acknowledged pieces the storage's %s holds %d bytes, "+
		"every fsync'ed one, and %s; %s", failedText(failed, c.Errnos), pieces, file, held, checkpointText(ev, c.C, ckpt), lost)}
}

// durableLoss is what the storage lacks of writer container c's acknowledged pieces (workload.CheckDurable),
// with the name of its file and how many bytes the storage holds of it, or why that cannot be told: a log
// without its writes, a file from before the run, objects not read, or a storage that differs from the log in
// more than a loss after the last fsync.
func (ev *Evidence) durableLoss(c string) (loss workload.Loss, file string, held int, why string) {
	recs, file, ckpt, why := writerRun(ev, c)
	if why != "" {
		return loss, file, 0, why
	}
	got, _, why := storedData(ev, c, file) // a missing file is one with nothing durable: CheckDurable judges it
	if why != "" {
		return loss, file, 0, why
	}
	gotCkpt, _, why := storedData(ev, c, ckpt)
	if why != "" {
		return loss, file, len(got), why
	}
	loss, err := workload.CheckDurable(recs, got, gotCkpt)
	if err != nil {
		return loss, file, len(got), fmt.Sprintf("the storage's %s (%d bytes) and %s against %s's log: %v", file, len(got), ckpt, c, err)
	}
	return loss, file, len(got), ""
}

// checkpointText says which checkpoint the storage holds for writer container c, once workload.CheckDurable
// found it the last acknowledged one or a later one whole.
func checkpointText(ev *Evidence, c, name string) string {
	e, ok := ev.Last(func(e Event) bool { return e.Container == c && e.Source == SrcWorkload && e.Kind == KCheckpoint })
	if !ok {
		return "no checkpoint was acknowledged"
	}
	if s, _ := ev.StoredObject(c, name); s.SHA256 == e.SHA256 {
		return fmt.Sprintf("its %s is the last acknowledged checkpoint (after piece %d)", name, *e.Seq)
	}
	return fmt.Sprintf("its %s is a whole checkpoint later than the last acknowledged one (after piece %d)", name, *e.Seq)
}

// writerFailures are writer container c's failed operations, cited: a failed open, write, fsync or checkpoint,
// and a failed close, which for a writer is a failed flush of what it wrote; those that failed with errno
// (one of errnos) apart from the others.
func writerFailures(ev *Evidence, c string, errnos []string) (withErrno, other []string) {
	for _, e := range ev.Events {
		if e.Container != c || e.Source != SrcWorkload {
			continue
		}
		if e.IsWorkloadError() || (e.Kind == KClose && (e.Errno != "" || e.Message != "")) {
			what := cite(ev, e)
			if e.Op != "" {
				what += " (" + e.Op + ")"
			}
			if slices.Contains(errnos, e.Errno) {
				withErrno = append(withErrno, what)
			} else {
				other = append(other, what+": "+e.Message)
			}
		}
	}
	return withErrno, other
}

// writerLog is writer container c's log as the writer's records, for workload.CheckWritten: every instance's,
// in time order (a restarted writer appends on at the end of the file).
func writerLog(ev *Evidence, c string) ([]workload.Record, error) {
	var recs []workload.Record
	for _, e := range ev.Events {
		if e.Container != c || e.Source != SrcWorkload {
			continue
		}
		r := workload.Record{Time: e.Time, Event: string(e.Kind), Seq: e.Seq, Offset: e.Offset, Bytes: e.Bytes, SHA256: e.SHA256, Op: e.Op}
		switch e.Kind {
		case KWriteStart:
			if e.Seq == nil {
				return nil, fmt.Errorf("%s's log: a write_start at %s without its piece's number", c, at(ev, e.Time))
			}
		case KSync:
			if e.Seq == nil || e.Offset == nil {
				return nil, fmt.Errorf("%s's log: an fsync at %s without its piece's number or the end it made durable", c, at(ev, e.Time))
			}
		case KWrite, KCheckpoint:
			if e.Seq == nil || e.Bytes == nil || e.SHA256 == "" || (e.Kind == KWrite && e.Offset == nil) {
				return nil, fmt.Errorf("%s's log: a %s at %s without its number, offset, size or SHA-256", c, e.Kind, at(ev, e.Time))
			}
		default:
			continue
		}
		recs = append(recs, r)
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("%s's log has no write: is it a writer (Container.Write)?", c)
	}
	return recs, nil
}

// writerRun is writer container c's log as the writer's records and the names of its file and checkpoint, or
// why its run cannot be judged (a log without its writes; a file that was there before the run: freshStart).
func writerRun(ev *Evidence, c string) (recs []workload.Record, file, ckpt, why string) {
	recs, err := writerLog(ev, c)
	if err != nil {
		return nil, "", "", err.Error()
	}
	if why := freshStart(recs, c); why != "" {
		return nil, "", "", why
	}
	ctr := Container{Name: c}
	return recs, ctr.WrittenObject(), ctr.Objects()[1], ""
}

// freshStart says why writer container c's run cannot be judged when its first piece did not go at offset 0:
// its file was there already (it appends), an earlier run's, and so may its checkpoint be, which would pass for
// this run's. Empty when it started an empty file.
func freshStart(recs []workload.Record, c string) string {
	for _, r := range recs {
		if r.Event == workload.EventWrite {
			if *r.Offset != 0 {
				return fmt.Sprintf("%s's first piece went at offset %d: its file was in the storage before the run (an earlier run's, "+
					"and its checkpoint may be too); each run needs a bucket without %s's objects", c, *r.Offset, c)
			}
			return ""
		}
	}
	return ""
}

// storedData is the data of object name of container c that the backend read from the storage, or that the
// storage has no such object (missing), or why it was not read.
func storedData(ev *Evidence, c, name string) (data []byte, missing bool, why string) {
	s, ok := ev.StoredObject(c, name)
	switch {
	case !ok && len(ev.Stored) == 0:
		return nil, false, fmt.Sprintf("nothing was read from the volume's storage: the backend cannot read it, or did not (no %s in the evidence)", name)
	case !ok:
		return nil, false, fmt.Sprintf("%s of %s was not read from the storage", name, c)
	case s.Err != "":
		return nil, false, fmt.Sprintf("%s could not be read from the storage: %s", name, s.Err)
	}
	return s.Data, s.Missing, ""
}

// longestWrite is the longest write, fsync or checkpoint of writer container c, as its log timed them.
func longestWrite(ev *Evidence, c string) time.Duration {
	var d time.Duration
	for _, e := range ev.Events {
		if e.Container == c && e.Source == SrcWorkload && (e.Kind == KWrite || e.Kind == KSync || e.Kind == KCheckpoint) {
			d = max(d, e.Latency)
		}
	}
	return d.Round(100 * time.Microsecond)
}
