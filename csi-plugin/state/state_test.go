package state

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func openStore(t *testing.T) *Store {
	t.Helper()
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestRoundTrip(t *testing.T) {
	s := openStore(t)
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	st := Stage{VolumeID: "vol-1", StagingPath: "/staging/vol-1", ReadOnly: true, FuseMode: "keeper", CreatedDir: true, Init: []byte{0, 1, 2, 255}, Time: now}
	if err := s.PutStage(st); err != nil {
		t.Fatal(err)
	}
	pubs := []Publish{
		{VolumeID: "vol-1", StagingPath: "/staging/vol-1", TargetPath: "/pods/a/mount", FuseMode: "child", Time: now},
		{VolumeID: "vol-1", StagingPath: "/staging/vol-1", TargetPath: "/pods/b/mount", ReadOnly: true, FuseMode: "child", Time: now},
	}
	for _, p := range pubs {
		if err := s.PutPublish(p); err != nil {
			t.Fatal(err)
		}
	}
	// A reopened store (a restarted plugin) sees the same records.
	s2, err := Open(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	stages, publishes, errs := s2.Load()
	if len(errs) != 0 {
		t.Fatalf("Load errors: %v", errs)
	}
	if len(stages) != 1 || !reflect.DeepEqual(stages[0], st) {
		t.Fatalf("stages = %+v, want [%+v]", stages, st)
	}
	// Two pods using one volume keep two records: neither overwrote the other.
	if len(publishes) != 2 || publishes[0] != pubs[0] || publishes[1] != pubs[1] {
		t.Fatalf("publishes = %+v, want %+v", publishes, pubs)
	}

	if err := s2.DeletePublish("/pods/a/mount"); err != nil {
		t.Fatal(err)
	}
	if err := s2.DeletePublish("/pods/a/mount"); err != nil {
		t.Fatalf("deleting a missing record: %v", err)
	}
	if err := s2.DeleteStage("vol-1"); err != nil {
		t.Fatal(err)
	}
	stages, publishes, _ = s2.Load()
	if len(stages) != 0 || len(publishes) != 1 || publishes[0].TargetPath != "/pods/b/mount" {
		t.Fatalf("after deletes: stages %+v, publishes %+v", stages, publishes)
	}
}

// TestEphemeralFlagRoundTrip: the ephemeral mark survives a reload, and a record written before the field
// existed loads as a persistent volume.
func TestEphemeralFlagRoundTrip(t *testing.T) {
	s := openStore(t)
	eph := Stage{VolumeID: "csi-0a1b", StagingPath: "/csi/ephemeral/csi-0a1b", FuseMode: "child", CreatedDir: true, Ephemeral: true}
	if err := s.PutStage(eph); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.Dir(), stagedDir, "old.json"), []byte(`{"volumeID": "old", "stagingPath": "/staging/old"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	stages, _, errs := s.Load()
	if len(errs) != 0 || len(stages) != 2 {
		t.Fatalf("stages = %+v, errors %v", stages, errs)
	}
	if !reflect.DeepEqual(stages[0], eph) || stages[1].VolumeID != "old" || stages[1].Ephemeral {
		t.Fatalf("stages = %+v, want %+v then a persistent \"old\"", stages, eph)
	}
}

func TestCorruptRecordsAreSkipped(t *testing.T) {
	s := openStore(t)
	good := Stage{VolumeID: "good", StagingPath: "/staging/good", FuseMode: "child"}
	if err := s.PutStage(good); err != nil {
		t.Fatal(err)
	}
	garbage := filepath.Join(s.Dir(), stagedDir, "garbage.json")
	truncated := filepath.Join(s.Dir(), publishedDir, "0123.json")
	renamed := filepath.Join(s.Dir(), stagedDir, "other.json") // content says volume "good": not its file
	relative := filepath.Join(s.Dir(), stagedDir, "rel.json")
	leftover := filepath.Join(s.Dir(), stagedDir, "good.json.tmp123") // an interrupted write: ignored silently
	for name, content := range map[string]string{
		garbage:   "\x00\x01not json",
		truncated: `{"volumeID": "vol", "targetPa`,
		renamed:   `{"volumeID": "good", "stagingPath": "/staging/good"}`,
		relative:  `{"volumeID": "rel", "stagingPath": "staging/rel"}`,
		leftover:  `{"volumeID": "good"`,
	} {
		if err := os.WriteFile(name, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	unreadable := filepath.Join(s.Dir(), stagedDir, "dir.json")
	if err := os.Mkdir(unreadable, 0o700); err != nil {
		t.Fatal(err)
	}

	stages, publishes, errs := s.Load()
	if len(stages) != 1 || stages[0].VolumeID != "good" || len(publishes) != 0 {
		t.Fatalf("Load = %+v, %+v; want only the good stage", stages, publishes)
	}
	bad := map[string]bool{}
	for _, err := range errs {
		var re *RecordError
		if !errors.As(err, &re) {
			t.Fatalf("error %v is not a RecordError", err)
		}
		if !strings.Contains(err.Error(), re.Path) {
			t.Errorf("error %q does not name its file", err)
		}
		bad[re.Path] = true
	}
	for _, p := range []string{garbage, truncated, renamed, relative, unreadable} {
		if !bad[p] {
			t.Errorf("no error reported for %s (errors: %v)", p, errs)
		}
	}
	if bad[leftover] {
		t.Errorf("leftover temp file reported as a record")
	}
}

func TestAtomicWriteLeavesNoTempFiles(t *testing.T) {
	s := openStore(t)
	for i := 0; i < 20; i++ {
		if err := s.PutPublish(Publish{VolumeID: "v", StagingPath: "/s", TargetPath: "/t", Time: time.Unix(int64(i), 0)}); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := os.ReadDir(filepath.Join(s.Dir(), publishedDir))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || !strings.HasSuffix(entries[0].Name(), ".json") {
		t.Fatalf("published/ holds %v, want exactly one record", entries)
	}
	_, pubs, errs := s.Load()
	if len(errs) != 0 || len(pubs) != 1 || !pubs[0].Time.Equal(time.Unix(19, 0)) {
		t.Fatalf("Load = %+v, %v; want the last write", pubs, errs)
	}

	// A failed write (the directory is gone) must not leave a temp file or a partial record behind.
	if err := os.RemoveAll(filepath.Join(s.Dir(), stagedDir)); err != nil {
		t.Fatal(err)
	}
	if err := s.PutStage(Stage{VolumeID: "v", StagingPath: "/s"}); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("PutStage into a missing directory = %v, want ErrNotExist", err)
	}
}

func TestValidateFileName(t *testing.T) {
	for _, bad := range []string{"", ".", "..", "a/b", "../etc", "/abs", "a\x00b", strings.Repeat("x", 129)} {
		if ValidateFileName(bad) == nil {
			t.Errorf("ValidateFileName(%q) accepted it", bad)
		}
		if _, err := openStore(t).StagePath(bad); err == nil {
			t.Errorf("StagePath(%q) accepted it", bad)
		}
	}
	for _, good := range []string{"vol-1", "..x", "a.b", "pvc-0b2c", strings.Repeat("x", 128)} {
		if err := ValidateFileName(good); err != nil {
			t.Errorf("ValidateFileName(%q) = %v", good, err)
		}
	}
	// Publish records are keyed by a hash: any target path stays inside published/.
	s := openStore(t)
	p := s.PublishPath("/../../etc/passwd")
	if filepath.Dir(p) != filepath.Join(s.Dir(), publishedDir) {
		t.Fatalf("PublishPath escaped: %s", p)
	}
}

// TestIntents: a pending record (written before a mount) replaces and is replaced by the record of the outcome
// in one file; Read returns it apart, Load (the remediator's view of what succeeded) leaves it out.
func TestIntents(t *testing.T) {
	s := openStore(t)
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	st := Stage{VolumeID: "vol-1", StagingPath: "/staging/vol-1", FuseMode: "child", CreatedDir: true, Time: now, Pending: true}
	pub := Publish{VolumeID: "vol-1", StagingPath: "/staging/vol-1", TargetPath: "/pods/a/mount", FuseMode: "child", Time: now, Pending: true}
	if err := s.PutStage(st); err != nil {
		t.Fatal(err)
	}
	if err := s.PutPublish(pub); err != nil {
		t.Fatal(err)
	}
	c := s.Read()
	if len(c.Stages)+len(c.Publishes)+len(c.Errs) != 0 || !reflect.DeepEqual(c.PendingStages, []Stage{st}) || !reflect.DeepEqual(c.PendingPublishes, []Publish{pub}) {
		t.Fatalf("Read of two intents: %+v", c)
	}
	if stages, pubs, errs := s.Load(); len(stages)+len(pubs)+len(errs) != 0 {
		t.Fatalf("Load returned intents: %v %v %v", stages, pubs, errs)
	}
	st.Pending, pub.Pending = false, false
	if err := s.PutStage(st); err != nil {
		t.Fatal(err)
	}
	if err := s.PutPublish(pub); err != nil {
		t.Fatal(err)
	}
	stages, pubs, errs := s.Load()
	if !reflect.DeepEqual(stages, []Stage{st}) || !reflect.DeepEqual(pubs, []Publish{pub}) || len(errs) != 0 {
		t.Fatalf("Load after the outcomes: %v %v %v", stages, pubs, errs)
	}
	if c := s.Read(); len(c.PendingStages)+len(c.PendingPublishes) != 0 {
		t.Fatalf("intents left after their outcomes were recorded: %+v", c)
	}
}
