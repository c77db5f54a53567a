// Package state persists the plugin's mount records so that a restarted plugin can restore its mounts: one JSON
// file per staged volume (staged/<volume ID>.json) and one per published target
// (published/<sha256 of the target path>.json), so that two pods using one volume on one node never overwrite
// each other's record. Writes are atomic (temp file in the same directory, fsync, rename, fsync of the
// directory): a crash leaves the old record or the new one, never half of one.
package state

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

const (
	stagedDir    = "staged"
	publishedDir = "published"
	suffix       = ".json"
)

// Stage records one NodeStageVolume that succeeded.
type Stage struct {
	VolumeID    string `json:"volumeID"`
	StagingPath string `json:"stagingPath"`
	ReadOnly    bool   `json:"readOnly"`
	FuseMode    string `json:"fuseMode"`
	// CreatedDir says that the plugin created the staging directory, so unstaging removes it again.
	CreatedDir bool `json:"createdDir,omitempty"`
	// Ephemeral marks an inline ephemeral volume: the plugin staged it itself (kubelet never calls
	// NodeStageVolume for one), so unpublishing its last target also unstages it.
	Ephemeral bool      `json:"ephemeral,omitempty"`
	Time      time.Time `json:"time"`
}

// Publish records one NodePublishVolume that succeeded.
type Publish struct {
	VolumeID    string    `json:"volumeID"`
	StagingPath string    `json:"stagingPath"`
	TargetPath  string    `json:"targetPath"`
	ReadOnly    bool      `json:"readOnly"`
	FuseMode    string    `json:"fuseMode"`
	Time        time.Time `json:"time"`
}

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

// Load reads every record. Records that cannot be read or parsed, or that contradict their file name, are
// skipped and returned as RecordErrors for the caller to log: one bad file must never stop the others from
// being restored. Leftover temp files of an interrupted write are ignored. Results are sorted by volume ID and
// target path, so restores run in a stable order.
func (s *Store) Load() ([]Stage, []Publish, []error) {
	var (
		stages    []Stage
		publishes []Publish
		errs      []error
	)
	for _, f := range s.list(stagedDir, &errs) {
		var r Stage
		if err := readJSON(f, &r); err != nil {
			errs = append(errs, &RecordError{Path: f, Err: err})
			continue
		}
		if want, err := s.StagePath(r.VolumeID); err != nil || want != f || !filepath.IsAbs(r.StagingPath) {
			errs = append(errs, &RecordError{Path: f, Err: fmt.Errorf("invalid stage record (volume ID %q, staging path %q)", r.VolumeID, r.StagingPath)})
			continue
		}
		stages = append(stages, r)
	}
	for _, f := range s.list(publishedDir, &errs) {
		var r Publish
		if err := readJSON(f, &r); err != nil {
			errs = append(errs, &RecordError{Path: f, Err: err})
			continue
		}
		if ValidateFileName(r.VolumeID) != nil || !filepath.IsAbs(r.TargetPath) || !filepath.IsAbs(r.StagingPath) ||
			s.PublishPath(r.TargetPath) != f {
			errs = append(errs, &RecordError{Path: f, Err: fmt.Errorf("invalid publish record (volume ID %q, target %q, staging path %q)", r.VolumeID, r.TargetPath, r.StagingPath)})
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
	return stages, publishes, errs
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

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("parsing: %w", err)
	}
	return nil
}

// writeJSON replaces path atomically: temp file in the same directory, fsync, rename, fsync of the directory
// (without the last step the rename itself may be lost in a crash).
func writeJSON(path string, v any) (err error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding %s: %w", path, err)
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("writing mount record: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.Remove(f.Name())
		}
	}()
	if _, err = f.Write(append(b, '\n')); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing mount record %s: %w", f.Name(), err)
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("writing mount record: %w", err)
	}
	return syncDir(dir)
}

func remove(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing mount record: %w", err)
	}
	return syncDir(filepath.Dir(path))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	return nil
}
