package scenarios

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestTailLines follows a file as it grows: complete lines as they come, the rest once done is closed.
func TestTailLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	w, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	r, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	lines := make(chan string, 10)
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		TailLines(r, done, time.Millisecond, func(l []byte) { lines <- string(l) })
	}()
	if _, err := w.WriteString("one\r\ntw"); err != nil {
		t.Fatal(err)
	}
	if got := <-lines; got != "one" {
		t.Errorf("first line %q, want %q", got, "one")
	}
	if _, err := w.WriteString("o\nthree"); err != nil {
		t.Fatal(err)
	}
	if got := <-lines; got != "two" {
		t.Errorf("second line %q, want %q (joined across writes)", got, "two")
	}
	close(done)
	<-finished
	close(lines)
	var rest []string
	for l := range lines {
		rest = append(rest, l)
	}
	if strings.Join(rest, ",") != "three" {
		t.Errorf("after done: %q, want the last line without a newline", rest)
	}
}

// TestLineTime: a line's own RFC 3339 stamp wins over the time it was seen; anything else keeps the latter.
func TestLineTime(t *testing.T) {
	seen := time.Date(2026, 11, 24, 12, 0, 1, 0, time.UTC)
	written := time.Date(2026, 11, 24, 12, 0, 0, 987654321, time.UTC)
	for line, want := range map[string]time.Time{
		written.Format(time.RFC3339Nano) + " csi-plugin sidecar: received": written,
		"csi-plugin sidecar: received":                                     seen,
		"2026-11-24 12:00:00 received":                                     seen,
		written.Format(time.RFC3339Nano):                                   seen, // a stamp alone is no line
		"":                                                                 seen,
		"I1124 12:00:00.000000 1 main.go:1] klog's header":                 seen,
	} {
		if got := LineTime([]byte(line), seen); !got.Equal(want) {
			t.Errorf("LineTime(%q) = %s, want %s", line, got, want)
		}
	}
}
