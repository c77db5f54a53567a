package scenarios

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/dummy-fuse-workload/workload"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// The writer containers (Container.Write): what a training job does to a volume, checked against the storage
// behind every FUSE layer at the end of the run. A writer appends pieces to its file and writes a checkpoint
// beside it every few (dummy-fuse-workload --write, with the settings below); each is in its log once the
// kernel acknowledged it, with its SHA-256. After the steps the runner has the backend stop it (SIGTERM: it
// closes its file, which a server such as gcsfuse stores only then) and read its objects from the storage
// without the mount (StorageReader); WritesKept then holds when the storage has every acknowledged byte.

// What a writer container writes: a piece of WriteSize bytes every read interval and a checkpoint every
// CheckpointEvery pieces (created, written, fsync'ed, closed, renamed into place); unless its
// Container.SyncEvery says otherwise it never fsyncs its log, which is then durable at its close only, as an
// appended log is. So at any fault every piece since the writer opened its log is acknowledged but not
// durable, only the relay's journal keeps it, and a relay that did not replay its journal would lose it: with
// an fsync every few pieces, the faults of the rows (gcsfuse stopped at its fake GCS, then killed) land where
// the last fsync's upload is already on its way to the bucket, and nothing acknowledged is missing whether the
// relay replays or not.
const (
	WriteSize       = 64 << 10
	CheckpointEvery = 8
)

// WriterGrace is how long a writer has after SIGTERM, when the run stops it (StorageReader), before SIGKILL: its
// last close is a FLUSH that a relay answers once a real server serves again, within its backend wait (30 s by
// default). On a cluster it is the writing pod's termination grace period.
const WriterGrace = 40 * time.Second

// WrittenObject is the name, inside the volume, of the file writer container c writes: one of its own, so
// that writers of one pod never share a file.
func (c Container) WrittenObject() string { return c.Name + ".log" }

// Objects are the names inside the volume of what writer container c leaves in the storage: its file and its
// checkpoint.
func (c Container) Objects() []string {
	return []string{c.WrittenObject(), workload.CheckpointPath(c.WrittenObject())}
}

// writerArgs are dummy-fuse-workload's arguments for writer container c writing every interval.
func (c Container) writerArgs(interval time.Duration) []string {
	args := []string{
		"--write",
		"--file=" + c.File(),
		"--log-format=json",
		"--read-interval=" + interval.String(),
		"--write-size=" + strconv.Itoa(WriteSize),
		"--sync-every=" + strconv.Itoa(c.SyncEvery),
		"--checkpoint-every=" + strconv.Itoa(CheckpointEvery),
	}
	if c.ExitOnError {
		args = append(args, "--exit-on-error")
	}
	return args
}

// Writers are the pod's writer containers.
func (s *Scenario) Writers() []Container {
	var out []Container
	for _, c := range s.Pod.Containers {
		if c.Write {
			out = append(out, c)
		}
	}
	return out
}

// validateWrites checks the writable volume and the writers: a writable volume needs a relay mode; a writer needs a writable volume and takes none of a reader's settings.
func (s *Scenario) validateWrites() error {
	t := s.Plugin.Topology()
	if s.Plugin.Writable && !t.Has(topology.RelayProcess) {
		return fmt.Errorf("a writable volume (--relay-writable) is for the relay modes, not %s", t)
	}
	for _, c := range s.Writers() {
		switch {
		case !s.Plugin.Writable:
			return fmt.Errorf("container %s writes, but the volume is read-only (Plugin.Writable)", c.Name)
		case c.KeepOpen || c.DirectIO || c.SubPath != "":
			return fmt.Errorf("container %s writes: keep-open, direct-io and subPath are a reader's settings", c.Name)
		}
	}
	return nil
}

// StorageReader is a Backend that can read the volume's storage behind every FUSE layer, at the objectURL of the
// server's spec (both backends). The runner calls CollectWrites after the steps and before judging
// a scenario with writers; a backend without it leaves no stored objects in the evidence, and WritesKept says
// so.
type StorageReader interface {
	// CollectWrites stops each writer container of the pod gracefully (SIGTERM, a bounded grace, then
	// SIGKILL), as a job that ends, without restarting it, and reads each one's Objects from the storage, not
	// through any mount, recording each with Recorder.AddStored, also one it could not read (with why). Its
	// error is what kept it from doing so at all.
	CollectWrites(ctx context.Context) error
}

// Stored is an object a backend read from the volume's storage after the steps (StorageReader): what a writer
// container's data became. Its data stays out of events.json (megabytes); its size and SHA-256 are there.
type Stored struct {
	Container string `json:"container"`
	// Name is the object's name inside the volume (Container.Objects).
	Name string `json:"name"`
	Data []byte `json:"-"`
	Size int    `json:"size"`
	// SHA256 is the data's, hex.
	SHA256 string `json:"sha256,omitempty"`
	// Missing: the storage has no such object; Err: it could not be read, and why.
	Missing bool   `json:"missing,omitempty"`
	Err     string `json:"error,omitempty"`
}

// NewStored is the object name of container c as a read of the storage returned it (data, err); an error that
// is fs.ErrNotExist is a storage without the object, any other one that could not be read.
func NewStored(c, name string, data []byte, err error) Stored {
	s := Stored{Container: c, Name: name}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		s.Missing = true
	case err != nil:
		s.Err = err.Error()
	default:
		sum := sha256.Sum256(data)
		s.Data, s.Size, s.SHA256 = data, len(data), hex.EncodeToString(sum[:])
	}
	return s
}

// StoreWrites reads the Objects of each writer container of s with read (a backend's reader of the storage, a
// missing object fs.ErrNotExist) and records each with rec.AddStored, also one it could not read; logf says what
// it found. The backends' CollectWrites end with it.
func (s *Scenario) StoreWrites(ctx context.Context, rec *Recorder, read func(ctx context.Context, name string) ([]byte, error), logf func(string, ...any)) {
	for _, w := range s.Writers() {
		for _, name := range w.Objects() {
			data, err := read(ctx, name)
			st := NewStored(w.Name, name, data, err)
			logf("storage: container %s's %s: %d bytes, missing %t, error %q", w.Name, name, st.Size, st.Missing, st.Err)
			rec.AddStored(st)
		}
	}
}

// text says what the read of the storage found, for its event.
func (s Stored) text() string {
	switch {
	case s.Missing:
		return s.Name + ": no such object in the storage"
	case s.Err != "":
		return s.Name + ": not read from the storage: " + s.Err
	}
	return fmt.Sprintf("%s: %d bytes in the storage (sha256 %.12s…)", s.Name, s.Size, s.SHA256)
}

// StoredObject is the object name of container c that the backend read from the storage.
func (ev *Evidence) StoredObject(c, name string) (Stored, bool) {
	i := slices.IndexFunc(ev.Stored, func(s Stored) bool { return s.Container == c && s.Name == name })
	if i < 0 {
		return Stored{}, false
	}
	return ev.Stored[i], true
}

// collectWait bounds the collection of the writers' data: a writer's grace after SIGTERM (a close that waits
// for a server to come back), then the reads of the storage.
const collectWait = 2 * time.Minute

// collectWrites has a backend that can read the storage stop the scenario's writers and read what they wrote,
// before the verdicts; a scenario without writers has nothing to collect.
func (r *Runner) collectWrites(ctx context.Context) error {
	ws := r.o.Scenario.Writers()
	if len(ws) == 0 {
		return nil
	}
	sr, ok := r.b.(StorageReader)
	if !ok {
		r.own = append(r.own, runnerEvent(KStep, fmt.Sprintf("the %s backend cannot read the volume's storage: the writers' data is not checked", r.b.Name())))
		return nil
	}
	r.own = append(r.own, runnerEvent(KStep, "after the steps: stop the writers (SIGTERM) and read what they wrote from the storage, without the mount"))
	ctx, cancel := context.WithTimeout(ctx, collectWait)
	defer cancel()
	if err := sr.CollectWrites(ctx); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("%w (bound: %s)", err, collectWait)
		}
		return fmt.Errorf("collecting the writers' data from the storage: %w", err)
	}
	return nil
}
