package state

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

// loadWithin runs Load and fails the test if it does not return in time (a FIFO used to block it forever).
func loadWithin(t *testing.T, s *Store) ([]Stage, []Publish, []error) {
	t.Helper()
	type result struct {
		stages []Stage
		pubs   []Publish
		errs   []error
	}
	ch := make(chan result, 1)
	go func() {
		st, p, e := s.Load()
		ch <- result{st, p, e}
	}()
	select {
	case r := <-ch:
		return r.stages, r.pubs, r.errs
	case <-time.After(10 * time.Second):
		t.Fatal("Load blocked")
		return nil, nil, nil
	}
}

// TestLoadSkipsSpecialFiles: a FIFO, a symlink, a directory and an oversized file named like records are each
// reported with their path and skipped; the good record next to them loads.
func TestLoadSkipsSpecialFiles(t *testing.T) {
	s := openStore(t)
	good := Stage{VolumeID: "good", StagingPath: "/staging/good", FuseMode: "child"}
	if err := s.PutStage(good); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(s.Dir(), stagedDir)
	fifo := filepath.Join(dir, "fifo.json")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	goodFile, _ := s.StagePath("good")
	link := filepath.Join(dir, "link.json")
	if err := os.Symlink(goodFile, link); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "dir.json")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.json")
	if err := os.WriteFile(big, []byte(`{"volumeID":"big","stagingPath":"/`+strings.Repeat("x", maxRecordSize)+`"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	stages, _, errs := loadWithin(t, s)
	if len(stages) != 1 || stages[0].VolumeID != "good" {
		t.Fatalf("stages = %+v, want only the good one", stages)
	}
	for _, bad := range []string{fifo, link, sub, big} {
		found := false
		for _, err := range errs {
			if strings.Contains(err.Error(), bad) {
				found = true
			}
		}
		if !found {
			t.Errorf("no error names %s: %v", bad, errs)
		}
	}
}

// TestRemoveTemp: temp files of interrupted writes go at start-up; records and anything not a regular file stay.
func TestRemoveTemp(t *testing.T) {
	s := openStore(t)
	if err := s.PutPublish(Publish{VolumeID: "v", StagingPath: "/s", TargetPath: "/t"}); err != nil {
		t.Fatal(err)
	}
	tmp := []string{
		filepath.Join(s.Dir(), stagedDir, "v.json.tmp123"),
		filepath.Join(s.Dir(), publishedDir, "abc.json.tmp9"),
	}
	for _, p := range tmp {
		if err := os.WriteFile(p, []byte(`{"volumeID": "v", "sta`), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	keep := filepath.Join(s.Dir(), stagedDir, "x.json.tmpdir")
	if err := os.Mkdir(keep, 0o700); err != nil {
		t.Fatal(err)
	}
	removed, err := s.RemoveTemp()
	if err != nil || !reflect.DeepEqual(removed, tmp) {
		t.Fatalf("RemoveTemp = %v, %v; want %v", removed, err, tmp)
	}
	for _, p := range tmp {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s still there", p)
		}
	}
	if _, err := os.Lstat(keep); err != nil {
		t.Errorf("a directory was removed: %v", err)
	}
	if _, pubs, errs := s.Load(); len(pubs) != 1 || len(errs) != 0 {
		t.Fatalf("records after RemoveTemp: %v %v", pubs, errs)
	}
}

// TestLoadRejectsUncleanPaths: a record whose paths are relative, unclean, "/" or hold NUL is skipped.
func TestLoadRejectsUncleanPaths(t *testing.T) {
	for _, p := range []string{"relative", "/a/../etc", "/a//b", "/a/", "/", "/a/./b", "/nul\x00", "/" + strings.Repeat("x", 256)} {
		s := openStore(t)
		b, _ := json.Marshal(Stage{VolumeID: "v", StagingPath: p})
		f, _ := s.StagePath("v")
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
		pb, _ := json.Marshal(Publish{VolumeID: "v", StagingPath: "/s", TargetPath: p})
		if err := os.WriteFile(s.PublishPath(p), pb, 0o600); err != nil {
			t.Fatal(err)
		}
		stages, pubs, errs := loadWithin(t, s)
		if len(stages)+len(pubs) != 0 || len(errs) != 2 {
			t.Errorf("path %q: loaded %v %v, errors %v; want both records rejected", p, stages, pubs, errs)
		}
	}
}

// FuzzParseRecord: the record parser never panics, and what it accepts has usable paths and an ID that names a
// single file, and survives a round trip through the store's encoding.
func FuzzParseRecord(f *testing.F) {
	for _, seed := range []string{
		`{"volumeID":"vol-1","stagingPath":"/staging/vol-1","readOnly":true,"fuseMode":"child","createdDir":true,"time":"2026-01-02T03:04:05Z"}`,
		`{"volumeID":"vol-1","stagingPath":"/s","targetPath":"/pods/a/mount","capability":{"accessMode":"SINGLE_NODE_WRITER","mountFlags":["ro"]}}`,
		`{"volumeID":"..","stagingPath":"/s","targetPath":"/t"}`,
		`{"volumeID":"v","stagingPath":"/a/../b","targetPath":"/"}`,
		`{"volumeID":"v","stagingPath":"/a\u0000b"}`,
		`{"volumeID": "vol-a", "targetPa`,
		`null`, `[]`, `{}`, "\x00\x01", `{"volumeID":1}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, err := ParseStage(b); err == nil {
			if ValidateFileName(r.VolumeID) != nil || ValidatePath(r.StagingPath) != nil {
				t.Fatalf("accepted stage record %+v", r)
			}
			enc, _ := json.Marshal(r)
			r2, err := ParseStage(enc)
			if enc2, _ := json.Marshal(r2); err != nil || string(enc) != string(enc2) {
				t.Fatalf("round trip of %s: %s, %v", enc, enc2, err)
			}
		}
		if r, err := ParsePublish(b); err == nil {
			if ValidateFileName(r.VolumeID) != nil || ValidatePath(r.StagingPath) != nil || ValidatePath(r.TargetPath) != nil {
				t.Fatalf("accepted publish record %+v", r)
			}
			if !filepath.IsAbs(r.TargetPath) || filepath.Clean(r.TargetPath) != r.TargetPath {
				t.Fatalf("accepted target %q", r.TargetPath)
			}
		}
	})
}

// TestParseStageInit: a stage record's handover record round-trips as base64 and is bounded.
func TestParseStageInit(t *testing.T) {
	ok, _ := json.Marshal(Stage{VolumeID: "v", StagingPath: "/s", Init: make([]byte, MaxInit)})
	if r, err := ParseStage(ok); err != nil || len(r.Init) != MaxInit {
		t.Errorf("record with a %d-byte handover record: %v (%d bytes)", MaxInit, err, len(r.Init))
	}
	huge, _ := json.Marshal(Stage{VolumeID: "v", StagingPath: "/s", Init: make([]byte, MaxInit+1)})
	if _, err := ParseStage(huge); err == nil || !strings.Contains(err.Error(), "handover record") {
		t.Errorf("record with a %d-byte handover record: %v", MaxInit+1, err)
	}
	if _, err := ParseStage([]byte(`{"volumeID":"v","stagingPath":"/s","init":"not base64!"}`)); err == nil {
		t.Error("a handover record that is not base64 was accepted")
	}
}
