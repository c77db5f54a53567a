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
