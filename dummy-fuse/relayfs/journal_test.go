package relayfs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// replayed is what replaying j into a file holding start gives.
func replayed(t *testing.T, j *journal, start string) string {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "file"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(start); err != nil {
		t.Fatal(err)
	}
	if err := j.replay(int(f.Fd())); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestJournalSurvivesItsRelay: what a journal recorded is what a successor loads and replays, in order; a
// record dropped (its request failed) or cleared (the backend made the file durable) is not replayed; a last
// record cut short by a crash is ignored; a file that is not a journal is refused.
func TestJournalSurvivesItsRelay(t *testing.T) {
	dir := t.TempDir()
	j := &journal{dir: dir, name: journalName(0x1234), header: journalHeader{Node: 7, Reopen: unix.O_WRONLY | unix.O_CREAT, Mode: 0o640}}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(j.write([]byte("gone"), 0))
	j.clear() // durable: nothing before this is replayed
	must(j.truncate(0))
	must(j.write([]byte("hello world"), 0))
	must(j.write([]byte("WORLD"), 6))
	must(j.write([]byte("failed"), 20))
	j.unrecord()
	must(j.truncate(8))
	if got := replayed(t, j, "old content that is long"); got != "hello WO" {
		t.Errorf("replay in this relay: %q", got)
	}
	loaded, err := loadJournal(dir, 0x1234)
	if err != nil || loaded == nil {
		t.Fatalf("loading the journal: %v, %v", loaded, err)
	}
	if loaded.header != j.header || len(loaded.ops) != len(j.ops) || loaded.bytes != j.bytes {
		t.Errorf("loaded %+v, %d ops, %d bytes; wrote %+v, %d ops, %d bytes", loaded.header, len(loaded.ops), loaded.bytes, j.header, len(j.ops), j.bytes)
	}
	if got := replayed(t, loaded, "old content that is long"); got != "hello WO" {
		t.Errorf("replay in a successor: %q", got)
	}
	// A successor's next record goes after the loaded ones.
	must(loaded.write([]byte("!"), 8))
	again, err := loadJournal(dir, 0x1234)
	if err != nil || replayed(t, again, "") != "hello WO!" {
		t.Errorf("a record appended by the successor: %v", err)
	}

	// A write record cut short: never acknowledged, ignored.
	name := filepath.Join(dir, journalName(0x1234))
	st, _ := os.Stat(name)
	f, _ := os.OpenFile(name, os.O_WRONLY|os.O_APPEND, 0)
	f.Write([]byte{'W', 1, 0, 0, 0, 0, 0, 0, 0, 100, 0, 0, 0, 0, 0, 0, 0, 'x'})
	f.Close()
	cut, err := loadJournal(dir, 0x1234)
	if err != nil || cut.end != st.Size() || replayed(t, cut, "") != "hello WO!" {
		t.Errorf("a cut last record: %v (end %d, file was %d)", err, cut.end, st.Size())
	}
	if j, err := loadJournal(dir, 0x9999); j != nil || err != nil {
		t.Errorf("no journal: %v, %v", j, err)
	}
	for content, want := range map[string]string{"no header at all": "no header", "{\"node\":1}\nZ": "record of kind"} {
		if err := os.WriteFile(filepath.Join(dir, journalName(0x77)), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := loadJournal(dir, 0x77); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error with %q", content, err, want)
		}
	}
	loaded.remove()
	if _, err := os.Stat(name); !os.IsNotExist(err) {
		t.Errorf("the removed journal is still there: %v", err)
	}
}

// TestJournalReplaysInAscendingOrder: a replay writes what the records add up to, each range once and from the
// lowest offset up, as a server streaming a new file into an upload needs, and leaves the same content as the
// records one by one would.
func TestJournalReplaysInAscendingOrder(t *testing.T) {
	j := &journal{dir: t.TempDir(), name: journalName(1), header: journalHeader{Node: 2}}
	for _, w := range []struct {
		data string
		off  int64
	}{{"aaaa", 0}, {"bbbb", 4}, {"BBBB", 4}, {"cc", 8}, {"x", 1}} {
		if err := j.write([]byte(w.data), w.off); err != nil {
			t.Fatal(err)
		}
	}
	segs, low, _, sized := j.extents()
	for i := 1; i < len(segs); i++ {
		if segs[i].off != segs[i-1].off+segs[i-1].n {
			t.Errorf("segments %+v: not one after another", segs)
		}
	}
	if low != -1 || sized || len(segs) != 5 {
		t.Errorf("segments %+v, lowest truncation %d, sized %t", segs, low, sized)
	}
	if got := replayed(t, j, ""); got != "axaaBBBBcc" {
		t.Errorf("replay: %q", got)
	}
	// A truncation after the writes: the replay ends at its size, cutting or extending the file.
	if err := j.truncate(12); err != nil {
		t.Fatal(err)
	}
	if got := replayed(t, j, "0123456789abcdef"); got != "axaaBBBBccab" {
		t.Errorf("replay with a truncation after the writes, into a longer file: %q", got)
	}
	if got := replayed(t, j, ""); got != "axaaBBBBcc\x00\x00" {
		t.Errorf("replay with a truncation after the writes, into an empty file: %q", got)
	}
	// What the relay's log says of a journal it could not keep: the records, their bytes and the file's ranges.
	if got, want := j.String(), "6 writes and truncations (15 bytes; file ranges [0-10])"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	apart := &journal{dir: t.TempDir(), name: journalName(2)}
	for off := int64(0); off < 50; off += 10 {
		if err := apart.write([]byte("x"), off); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := apart.String(), "5 writes and truncations (5 bytes; file ranges [0-1 10-11 20-21 and 2 more])"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

// TestJournalKnowsWhatItsReplayWrote: a record numbered up to the last replay is in the replayed file (a write
// the server died inside is not sent again: Writable.Write), one made after it is not, and clearing the journal
// does not number records anew.
func TestJournalKnowsWhatItsReplayWrote(t *testing.T) {
	j := &journal{dir: t.TempDir(), name: journalName(1), header: journalHeader{Node: 1, Reopen: unix.O_WRONLY}}
	if err := j.write([]byte("a"), 0); err != nil {
		t.Fatal(err)
	}
	first := j.seq
	if j.replayed >= first {
		t.Fatalf("before any replay: replayed %d, seq %d", j.replayed, first)
	}
	if got := replayed(t, j, ""); got != "a" || j.replayed < first {
		t.Fatalf("replay: %q, replayed %d, want a and at least %d", got, j.replayed, first)
	}
	j.clear()
	if err := j.write([]byte("b"), 1); err != nil {
		t.Fatal(err)
	}
	if j.seq <= first || j.replayed >= j.seq {
		t.Errorf("after a clear and a write: seq %d (first %d), replayed %d: the new record counts as replayed", j.seq, first, j.replayed)
	}
}
