package testenv

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/dummy-fuse-workload/workload"
)

// Writer is a dummy-fuse-workload --write process. A test's writer must be a process of its own, not the
// test: the test forks servers' restarts, and a fork's exec closes the child's copies of the test's files,
// each close a FLUSH that a relay answers only once a server is back.
type Writer struct {
	Proc *Proc
	File string
}

// writerWait bounds every wait for the writer.
const writerWait = 30 * time.Second

// StartWriter starts bin (dummy-fuse-workload) writing file: a 64 KiB piece every 20 ms, an fsync every 4th,
// a checkpoint every 8th. When t fails, its log but the writes is logged.
func StartWriter(t testing.TB, lab *Lab, bin, file string) *Writer {
	t.Helper()
	cmd := exec.Command(bin, "--write", "--file", file, "--log-format=json",
		"--read-interval=20ms", "--write-size=65536", "--sync-every=4", "--checkpoint-every=8")
	w := &Writer{Proc: lab.Start("writer", cmd), File: file}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		var b strings.Builder
		for _, r := range w.Records(t) {
			if r.Event != workload.EventWriteStart && r.Event != workload.EventWrite {
				fmt.Fprintf(&b, "%s %s seq %s %s %s\n", r.Time.Format("15:04:05.000"), r.Event, seq(r.Seq), r.Op, r.Error)
			}
		}
		t.Logf("the writer's log but its writes (%d writes):\n%s", w.Count(t, workload.EventWrite), b.String())
	})
	return w
}

func seq(p *int) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprint(*p)
}

// Records is the writer's log so far (a last line half written is left out).
func (w *Writer) Records(t testing.TB) []workload.Record {
	t.Helper()
	var recs []workload.Record
	for _, line := range strings.Split(w.Proc.Log(), "\n") {
		var r workload.Record
		if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &r) != nil {
			continue
		}
		recs = append(recs, r)
	}
	return recs
}

// Count is how many records of event the log has.
func (w *Writer) Count(t testing.TB, event string) int {
	n := 0
	for _, r := range w.Records(t) {
		if r.Event == event {
			n++
		}
	}
	return n
}

// WaitFor waits until the writer logged n more records of event than it had; what says when, for the
// failure.
func (w *Writer) WaitFor(t testing.TB, n int, event, what string) {
	t.Helper()
	want := w.Count(t, event) + n
	Eventually(t, writerWait, fmt.Sprintf("the writer to log %d more %s %s (its log: %s)", n, event, what, w.Proc.LogPath), func() bool {
		if w.Proc.Exited() {
			t.Fatalf("the writer exited: %v\n%s", w.Proc.Err(), w.Proc.Tail())
		}
		return w.Count(t, event) >= want
	})
}

// Stop ends the writer with SIGTERM (it closes its file: a FLUSH) and returns its log.
func (w *Writer) Stop(t testing.TB) []workload.Record {
	t.Helper()
	w.Proc.Signal(syscall.SIGTERM)
	if code := w.Proc.Wait(writerWait); code != 0 {
		t.Fatalf("the writer exited with %d; its log:\n%s", code, w.Proc.Tail())
	}
	return w.Records(t)
}

// Failures are the writer's failed operations, as "event op: error".
func Failures(recs []workload.Record) []string {
	var out []string
	for _, r := range recs {
		if r.Event == workload.EventWriteError || r.Event == workload.EventOpenError || (r.Event == workload.EventClose && r.Error != "") {
			out = append(out, r.Event+" "+r.Op+": "+r.Error)
		}
	}
	return out
}
