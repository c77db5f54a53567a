// Package state persists the plugin's mount records so that a restarted plugin can restore its mounts: one JSON
// file per staged volume (staged/<volume ID>.json) and one per published target
// (published/<sha256 of the target path>.json), so that two pods using one volume on one node never overwrite
// each other's record. Writes are atomic (temp file in the same directory, fsync, rename, fsync of the
// directory): a crash leaves the old record or the new one, never half of one. A new mount is recorded twice: as
// an intent (Pending) before the plugin mounts, and as done after, so that a crash between the two leaves a
// record of what the plugin may have mounted.
package state

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/atomicfile"
)

const (
	stagedDir    = "staged"
	publishedDir = "published"
	suffix       = ".json"
	tempInfix    = atomicfile.TempInfix // temp files are <record>.json.tmp<random>
)

// Stage records one NodeStageVolume that succeeded, or (Pending) one that is about to mount.
type Stage struct {
	VolumeID    string `json:"volumeID"`
	StagingPath string `json:"stagingPath"`
	ReadOnly    bool   `json:"readOnly"`
	FuseMode    string `json:"fuseMode"`
	// CreatedDir says that the plugin created the staging directory, so unstaging removes it again.
	CreatedDir bool `json:"createdDir,omitempty"`
	// Ephemeral marks an inline ephemeral volume: the plugin staged it itself (kubelet never calls
	// NodeStageVolume for one), so unpublishing its last target also unstages it.
	Ephemeral bool `json:"ephemeral,omitempty"`
	// Capability is what the volume was staged with; a repeated call with another one is refused. Absent in
	// records of older versions (then any capability is accepted).
	Capability *Capability `json:"capability,omitempty"`
	// Init is the FUSE connection's handover record (the kernel's INIT and the first server's reply) in modes
	// that keep connections alive across server restarts (keeper): a restarted plugin checks the copies it
	// re-collects against it.
	Init []byte    `json:"init,omitempty"`
	Time time.Time `json:"time"`
	// Pending marks an intent: the plugin was about to mount the path and had not recorded the outcome yet.
	// Whatever is mounted there is the plugin's unfinished work, to undo (or redo) before anything else.
	Pending bool `json:"pending,omitempty"`
}

// MaxInit bounds a stage record's handover record (an INIT request and reply are a few hundred bytes).
const MaxInit = 1024

// Capability is the part of a CSI VolumeCapability that makes two calls compatible or not.
type Capability struct {
	AccessMode string   `json:"accessMode"`
	FsType     string   `json:"fsType,omitempty"`
	MountFlags []string `json:"mountFlags,omitempty"`
}

// Publish records one NodePublishVolume that succeeded, or (Pending) one that is about to mount.
type Publish struct {
	VolumeID    string `json:"volumeID"`
	StagingPath string `json:"stagingPath"`
	TargetPath  string `json:"targetPath"`
	ReadOnly    bool   `json:"readOnly"`
	FuseMode    string `json:"fuseMode"`
	// CreatedDir says that the plugin created the target directory, so unpublishing removes it again.
	CreatedDir bool        `json:"createdDir,omitempty"`
	Capability *Capability `json:"capability,omitempty"`
	// Time is when the plugin made the target's current mount: a repair (rebind, stack) renews it.
	Time time.Time `json:"time"`
	// Reattached is what the setns strategy's pass over running containers did right after the repair at Time
	// (nil when no such pass ran): the remediator leaves a container that started before Time alone only when
	// this pass replaced every dead copy it found.
	Reattached *Reattached `json:"reattached,omitempty"`
	// Pending marks an intent, as in Stage.
	Pending bool `json:"pending,omitempty"`
}

// Reattached says what one setns pass (restore.Reattach) did for a repaired target.
type Reattached struct {
	Namespaces int `json:"namespaces"` // mount namespaces that held a copy of the dead connection
	Replaced   int `json:"replaced"`   // dead mounts replaced by a bind of the new staging mount
	Failed     int `json:"failed"`
	// Error is why the pass did not complete ("" when it did).
	Error string `json:"error,omitempty"`
}

// Complete says whether the pass replaced every dead copy it found in running containers.
func (r *Reattached) Complete() bool { return r != nil && r.Failed == 0 && r.Error == "" }

// Store reads and writes records below one directory. Its methods are safe for concurrent use on different
// records; the caller serialises operations on one volume.
type Store struct {
	dir string
}

// Open creates dir (and its two subdirectories) if needed and returns a Store on it.
func Open(dir string) (*Store, error) {
	if dir == "" {
		return nil, errors.New("state directory must not be empty")
	}
	for _, d := range []string{stagedDir, publishedDir} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, fmt.Errorf("creating state directory: %w", err)
		}
	}
	return &Store{dir: dir}, nil
}

// Dir returns the store's directory.
func (s *Store) Dir() string { return s.dir }

// ValidateFileName checks that name can be used as a single file name inside a directory: not empty, not "." or
// "..", no "/", no NUL, at most 128 bytes (the CSI spec's limit for IDs; well below NAME_MAX with the suffix).
func ValidateFileName(name string) error {
	switch {
	case name == "":
		return errors.New("must not be empty")
	case name == "." || name == "..":
		return fmt.Errorf("must not be %q", name)
	case strings.ContainsRune(name, '/'):
		return errors.New("must not contain '/'")
	case strings.ContainsRune(name, 0):
		return errors.New("must not contain NUL")
	case len(name) > 128:
		return fmt.Errorf("must be at most 128 bytes, not %d", len(name))
	}
	return nil
}

// MaxPathLen is the longest path accepted in a record or a request (PATH_MAX, with its NUL, is 4096).
const MaxPathLen = 4095

// ValidatePath checks that p can be a staging or target path: absolute, clean (no ".", "..", "//" or trailing
// "/"), not "/", no NUL, at most MaxPathLen bytes and no element longer than NAME_MAX (255 bytes).
func ValidatePath(p string) error {
	switch {
	case p == "":
		return errors.New("must not be empty")
	case strings.ContainsRune(p, 0):
		return errors.New("must not contain NUL")
	case len(p) > MaxPathLen:
		return fmt.Errorf("must be at most %d bytes, not %d", MaxPathLen, len(p))
	case !filepath.IsAbs(p):
		return errors.New("must be an absolute path")
	case filepath.Clean(p) != p:
		return errors.New("must be a clean path (no '..', '.', '//' or trailing '/')")
	case p == "/":
		return errors.New("must not be /")
	}
	for _, e := range strings.Split(p[1:], "/") {
		if len(e) > 255 {
			return fmt.Errorf("has an element of %d bytes (at most 255)", len(e))
		}
	}
	return nil
}

// ParseStage decodes and checks one stage record.
func ParseStage(b []byte) (Stage, error) {
	var r Stage
	if err := json.Unmarshal(b, &r); err != nil {
		return Stage{}, fmt.Errorf("parsing: %w", err)
	}
	if err := ValidateFileName(r.VolumeID); err != nil {
		return Stage{}, fmt.Errorf("volume ID %q: %w", r.VolumeID, err)
	}
	if err := ValidatePath(r.StagingPath); err != nil {
		return Stage{}, fmt.Errorf("staging path %q: %w", r.StagingPath, err)
	}
	if len(r.Init) > MaxInit {
		return Stage{}, fmt.Errorf("handover record of %d bytes (at most %d)", len(r.Init), MaxInit)
	}
	return r, nil
}

// ParsePublish decodes and checks one publish record.
func ParsePublish(b []byte) (Publish, error) {
	var r Publish
	if err := json.Unmarshal(b, &r); err != nil {
		return Publish{}, fmt.Errorf("parsing: %w", err)
	}
	if err := ValidateFileName(r.VolumeID); err != nil {
		return Publish{}, fmt.Errorf("volume ID %q: %w", r.VolumeID, err)
	}
	if err := ValidatePath(r.StagingPath); err != nil {
		return Publish{}, fmt.Errorf("staging path %q: %w", r.StagingPath, err)
	}
	if err := ValidatePath(r.TargetPath); err != nil {
		return Publish{}, fmt.Errorf("target path %q: %w", r.TargetPath, err)
	}
	return r, nil
}

// StagePath returns the file that holds the stage record of volumeID.
func (s *Store) StagePath(volumeID string) (string, error) {
	if err := ValidateFileName(volumeID); err != nil {
		return "", fmt.Errorf("volume ID %q: %w", volumeID, err)
	}
	return filepath.Join(s.dir, stagedDir, volumeID+suffix), nil
}

// PublishPath returns the file that holds the publish record of targetPath.
func (s *Store) PublishPath(targetPath string) string {
	sum := sha256.Sum256([]byte(filepath.Clean(targetPath)))
	return filepath.Join(s.dir, publishedDir, hex.EncodeToString(sum[:])+suffix)
}

// PutStage writes (or replaces) the stage record of r.VolumeID.
func (s *Store) PutStage(r Stage) error {
	p, err := s.StagePath(r.VolumeID)
	if err != nil {
		return err
	}
	return writeJSON(p, r)
}

// DeleteStage removes the stage record of volumeID; a missing record is not an error.
func (s *Store) DeleteStage(volumeID string) error {
	p, err := s.StagePath(volumeID)
	if err != nil {
		return err
	}
	return remove(p)
}

// PutPublish writes (or replaces) the publish record of r.TargetPath.
func (s *Store) PutPublish(r Publish) error {
	return writeJSON(s.PublishPath(r.TargetPath), r)
}

// DeletePublish removes the publish record of targetPath; a missing record is not an error.
func (s *Store) DeletePublish(targetPath string) error {
	return remove(s.PublishPath(targetPath))
}

// RecordError says which record file could not be used and why.
type RecordError struct {
	Path string
	Err  error
}

func (e *RecordError) Error() string { return fmt.Sprintf("mount record %s: %v", e.Path, e.Err) }
func (e *RecordError) Unwrap() error { return e.Err }

// Contents is everything in a store, sorted by volume ID and target path (restores run in a stable order).
type Contents struct {
	// Stages and Publishes are the records of what succeeded.
	Stages    []Stage
	Publishes []Publish
	// PendingStages and PendingPublishes are intents whose outcome was never recorded: the plugin was killed
	// between recording the intent and recording the outcome.
	PendingStages    []Stage
	PendingPublishes []Publish
	// Errs are the unusable records (RecordErrors), for the caller to log.
	Errs []error
}

// Load reads the records of what succeeded (Read's Stages, Publishes and Errs), leaving intents out.
func (s *Store) Load() ([]Stage, []Publish, []error) {
	c := s.Read()
	return c.Stages, c.Publishes, c.Errs
}

// Read reads every record. Records that cannot be read or parsed, that are not regular files, or that contradict
// their file name, are skipped and returned as RecordErrors for the caller to log: one bad file must never stop
// the others from being restored, nor block the start-up (a FIFO is never opened for a blocking read). Results
// are sorted by volume ID and target path, so restores run in a stable order.
func (s *Store) Read() Contents {
	var (
		stages    []Stage
		publishes []Publish
		errs      []error
	)
	for _, f := range s.list(stagedDir, &errs) {
		b, err := readRecord(f)
		var r Stage
		if err == nil {
			r, err = ParseStage(b)
		}
		if err == nil {
			if want, _ := s.StagePath(r.VolumeID); want != f {
				err = fmt.Errorf("record of volume %q in the wrong file", r.VolumeID)
			}
		}
		if err != nil {
			errs = append(errs, &RecordError{Path: f, Err: err})
			continue
		}
		stages = append(stages, r)
	}
	for _, f := range s.list(publishedDir, &errs) {
		b, err := readRecord(f)
		var r Publish
		if err == nil {
			r, err = ParsePublish(b)
		}
		if err == nil && s.PublishPath(r.TargetPath) != f {
			err = fmt.Errorf("record of target %q in the wrong file", r.TargetPath)
		}
		if err != nil {
			errs = append(errs, &RecordError{Path: f, Err: err})
			continue
		}
		publishes = append(publishes, r)
	}
	sort.Slice(stages, func(i, j int) bool { return stages[i].VolumeID < stages[j].VolumeID })
	sort.Slice(publishes, func(i, j int) bool {
		if publishes[i].VolumeID != publishes[j].VolumeID {
			return publishes[i].VolumeID < publishes[j].VolumeID
		}
		return publishes[i].TargetPath < publishes[j].TargetPath
	})
	c := Contents{Errs: errs}
	for _, r := range stages {
		if r.Pending {
			c.PendingStages = append(c.PendingStages, r)
		} else {
			c.Stages = append(c.Stages, r)
		}
	}
	for _, r := range publishes {
		if r.Pending {
			c.PendingPublishes = append(c.PendingPublishes, r)
		} else {
			c.Publishes = append(c.Publishes, r)
		}
	}
	return c
}

// RemoveTemp removes the temp files of writes that a crash cut off (regular files named "<record>.json.tmp*",
// only ever created by writeJSON) and returns the paths it removed. Call it at start-up, before any write.
func (s *Store) RemoveTemp() ([]string, error) {
	var removed []string
	var errs []error
	for _, sub := range []string{stagedDir, publishedDir} {
		dir := filepath.Join(s.dir, sub)
		entries, err := os.ReadDir(dir)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, e := range entries {
			if !e.Type().IsRegular() || !strings.Contains(e.Name(), suffix+tempInfix) {
				continue
			}
			p := filepath.Join(dir, e.Name())
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
				continue
			}
			removed = append(removed, p)
		}
	}
	return removed, errors.Join(errs...)
}

// list returns the record files in sub; only names ending in .json count (temp files do not).
func (s *Store) list(sub string, errs *[]error) []string {
	dir := filepath.Join(s.dir, sub)
	entries, err := os.ReadDir(dir)
	if err != nil {
		*errs = append(*errs, &RecordError{Path: dir, Err: err})
		return nil
	}
	var files []string
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), suffix) {
			continue
		}
		files = append(files, filepath.Join(dir, e.Name()))
	}
	return files
}

// maxRecordSize bounds what is read of one record (real ones are a few hundred bytes).
const maxRecordSize = 64 << 10

// readRecord reads a record file without following a symlink and without blocking on a FIFO or a device:
// anything but a regular file of at most maxRecordSize bytes is an error.
func readRecord(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file (%v)", fi.Mode().Type())
	}
	b, err := io.ReadAll(io.LimitReader(f, maxRecordSize+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxRecordSize {
		return nil, fmt.Errorf("larger than %d bytes", maxRecordSize)
	}
	return b, nil
}

// writeJSON replaces path atomically (atomicfile).
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding %s: %w", path, err)
	}
	if err := atomicfile.Write(path, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("writing mount record: %w", err)
	}
	return nil
}

func remove(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing mount record: %w", err)
	}
	return atomicfile.SyncDir(filepath.Dir(path))
}
