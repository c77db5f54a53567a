package scenarios

import (
	"bufio"
	"bytes"
	"io"
	"time"
)

// TailLines calls f for every line appended to r (a growing log file), without its newline, until done is
// closed and r is drained; a last line without a newline is passed too. At the end of r it looks again every
// poll.
func TailLines(r io.Reader, done <-chan struct{}, poll time.Duration, f func([]byte)) {
	br := bufio.NewReaderSize(r, 64*1024)
	var line []byte
	finished := false
	for {
		chunk, err := br.ReadBytes('\n')
		line = append(line, chunk...)
		if err == nil {
			f(bytes.TrimRight(line, "\r\n"))
			line = nil
			continue
		}
		if err != io.EOF || finished {
			if len(line) > 0 {
				f(line)
			}
			return
		}
		t := time.NewTimer(poll)
		select {
		case <-done:
			finished = true // one more pass drains what was written before done
		case <-t.C:
		}
		t.Stop()
	}
}

// LineTime returns the time a log line was written when it starts with its writer's RFC 3339 timestamp (as
// `csi-plugin sidecar` stamps its lines), else seen: a tailer sees lines up to one poll late, and lines of two
// tailed files can arrive in the wrong order.
func LineTime(line []byte, seen time.Time) time.Time {
	stamp, _, ok := bytes.Cut(line, []byte(" "))
	if !ok {
		return seen
	}
	if t, err := time.Parse(time.RFC3339Nano, string(stamp)); err == nil {
		return t
	}
	return seen
}
