package relayfs

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// journal is what a writable handle changed in its file since the backend last confirmed the file durable
// (an FSYNC or FLUSH it answered with success): the writes, in order, with their data, and the truncations
// between them. Real servers keep a file being written in a local staging file and upload it at flush or
// fsync (gcsfuse; rclone's write cache after the close), so a write they acknowledged dies with them; the
// relay replays the journal into the file opened on the next server before it forwards the next request,
// so that nothing it acknowledged is lost. Replaying is idempotent: every write is positional (the kernel
// sends an append with its offset) and a truncation sets a size.
//
// A journal is a file in the spill directory named after the kernel's file handle, so that a successor
// relay finds it: one relay dying alone loses nothing anyway (the kernel closes its descriptors of the
// backend, and each close is a FLUSH that makes a live server upload what the relay had acknowledged), but
// the relay dying together with the real server (a keeper that holds both) does, unless the successor
// replays the journal. Each record is one write(2) to the file, made before the request is forwarded; a
// write(2) survives the death of the process that made it (it is in the page cache). A record the dying
// relay left half written was never acknowledged and is ignored.
//
// The file: a header line (journalHeader as JSON), then records: 'W', offset, length (8 bytes each, little
// endian) and the data; 'T' and a size.
type journal struct {
	dir, name string // the file is dir/name; made at the first record
	header    journalHeader
	f         *os.File // nil until the first record
	start     int64    // where records start: after the header
	end       int64    // where the next record goes
	ops       []journalOp
	bytes     int64 // data in the records
	// seq counts the records made (never reset, not even by clear); replayed is seq at the last replay: a record
	// numbered up to it is in the backend file of the replay (written) already.
	seq, replayed uint64
}

// journalHeader says what a successor needs to open the file again: its node (whose path the node table
// knows, after any rename) and the flags and mode of a reopen.
type journalHeader struct {
	Node   uint64 `json:"node"`
	Reopen int    `json:"reopen"`
	Mode   uint32 `json:"mode"`
}

// journalOp is a write of n bytes at off whose data is at at in the file, or (truncate) a truncation to off;
// its record starts at rec in the file.
type journalOp struct {
	off, n, at, rec int64
	truncate        bool
}

const recordHead = 1 + 8 + 8

// journalName is the file of the journal of file handle fh.
func journalName(fh uint64) string { return fmt.Sprintf("%016x.journal", fh) }

// write records data written at off: its head and the data in one pwritev(2), without copying the data.
func (j *journal) write(data []byte, off int64) error {
	var head [recordHead]byte
	head[0] = 'W'
	binary.LittleEndian.PutUint64(head[1:], uint64(off))
	binary.LittleEndian.PutUint64(head[9:], uint64(len(data)))
	start, err := j.append(head[:], data)
	if err != nil {
		return err
	}
	j.ops = append(j.ops, journalOp{off: off, n: int64(len(data)), at: j.end - int64(len(data)), rec: start})
	j.bytes += int64(len(data))
	j.seq++
	return nil
}

// truncate records a truncation to size.
func (j *journal) truncate(size int64) error {
	rec := make([]byte, 9)
	rec[0] = 'T'
	binary.LittleEndian.PutUint64(rec[1:], uint64(size))
	start, err := j.append(rec)
	if err != nil {
		return err
	}
	j.ops = append(j.ops, journalOp{off: size, truncate: true, rec: start})
	j.seq++
	return nil
}

// unrecord drops the last record: its request failed, so there is nothing to replay.
func (j *journal) unrecord() {
	op := j.ops[len(j.ops)-1]
	j.ops, j.end = j.ops[:len(j.ops)-1], op.rec
	if !op.truncate {
		j.bytes -= op.n
	}
	_ = j.f.Truncate(j.end) // a failure leaves a record a successor replays: the file holds what it says anyway
}

// append writes the record made of parts at the end of the file, making the file first, and returns where
// the record starts.
func (j *journal) append(parts ...[]byte) (int64, error) {
	if j.f == nil {
		hdr, err := json.Marshal(j.header)
		if err != nil {
			return 0, err
		}
		f, err := os.OpenFile(filepath.Join(j.dir, j.name), os.O_RDWR|os.O_CREATE|os.O_TRUNC|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return 0, fmt.Errorf("journal: %w", err)
		}
		if _, err := f.WriteAt(append(hdr, '\n'), 0); err != nil {
			f.Close()
			return 0, fmt.Errorf("journal %s: %w", f.Name(), err)
		}
		j.f, j.start, j.end = f, int64(len(hdr)+1), int64(len(hdr)+1)
	}
	start, n := j.end, 0
	for _, p := range parts {
		n += len(p)
	}
	if err := pwritevAll(int(j.f.Fd()), parts, start, n); err != nil {
		return 0, fmt.Errorf("journal %s: %w", j.f.Name(), err)
	}
	j.end += int64(n)
	return start, nil
}

// pwritevAll writes all n bytes of parts at off, going on after a short write.
func pwritevAll(fd int, parts [][]byte, off int64, n int) error {
	for n > 0 {
		w, err := unix.Pwritev(fd, parts, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if w == 0 {
			return io.ErrShortWrite
		}
		off, n = off+int64(w), n-w
		for w > 0 {
			if w >= len(parts[0]) {
				w -= len(parts[0])
				parts = parts[1:]
				continue
			}
			parts[0] = parts[0][w:]
			w = 0
		}
	}
	return nil
}

// String says what the journal holds, as the relay's log names what it could not keep: the writes and
// truncations, their bytes, and the ranges of the file they cover.
func (j *journal) String() string {
	segs, _, _, _ := j.extents()
	var spans [][2]int64 // the segments, those that follow each other as one
	for _, sg := range segs {
		if n := len(spans); n > 0 && spans[n-1][1] == sg.off {
			spans[n-1][1] += sg.n
			continue
		}
		spans = append(spans, [2]int64{sg.off, sg.off + sg.n})
	}
	var ranges []string
	for i, sp := range spans {
		if i == 3 {
			ranges = append(ranges, fmt.Sprintf("and %d more", len(spans)-3))
			break
		}
		ranges = append(ranges, fmt.Sprintf("%d-%d", sp[0], sp[1]))
	}
	return fmt.Sprintf("%d writes and truncations (%d bytes; file ranges [%s])", len(j.ops), j.bytes, strings.Join(ranges, " "))
}

// empty reports whether there is nothing to replay.
func (j *journal) empty() bool { return len(j.ops) == 0 }

// replay applies the journal to the backend file fd: not record by record, but what they add up to, in
// ascending offsets. A server that streams a new file into an upload takes only writes that follow each
// other (gcsfuse answers any other with EIO, "OutOfOrderError"), and a journal may hold a range written
// twice (a write the workload did again after an error). So the replay truncates to the lowest size any
// truncation set, writes each range's newest data from the lowest offset up, and sets the size the last
// truncation left when the writes after it did not reach past it.
func (j *journal) replay(fd int) error {
	if err := j.apply(fd); err != nil {
		return err
	}
	j.replayed = j.seq
	return nil
}

// apply writes what the records add up to into fd (replay).
func (j *journal) apply(fd int) error {
	segs, low, size, sized := j.extents()
	if low >= 0 {
		if err := unix.Ftruncate(fd, low); err != nil {
			return err
		}
	}
	buf := make([]byte, 0, 1<<20)
	for _, sg := range segs {
		for done := int64(0); done < sg.n; {
			chunk := buf[:min(int64(cap(buf)), sg.n-done)]
			if _, err := j.f.ReadAt(chunk, sg.at+done); err != nil {
				return fmt.Errorf("journal %s: %w", j.f.Name(), err)
			}
			if err := pwriteAll(fd, chunk, sg.off+done); err != nil {
				return err
			}
			done += int64(len(chunk))
		}
	}
	if sized && (len(segs) == 0 || segs[len(segs)-1].off+segs[len(segs)-1].n < size) {
		return unix.Ftruncate(fd, size)
	}
	return nil
}

// segment is a range of the file (n bytes at off) whose newest data is at at in the journal's file.
type segment struct{ off, n, at int64 }

// extents adds the records up: the ranges written, without overlaps and in ascending order, each with its
// newest data; the lowest size a truncation set (-1: none); and the size after the last record when a
// truncation set one (sized).
func (j *journal) extents() (segs []segment, low, size int64, sized bool) {
	low = -1
	for _, op := range j.ops {
		if op.truncate {
			var kept []segment
			for _, sg := range segs {
				if sg.off < op.off {
					sg.n = min(sg.n, op.off-sg.off)
					kept = append(kept, sg)
				}
			}
			segs, size, sized = kept, op.off, true
			if low < 0 || op.off < low {
				low = op.off
			}
			continue
		}
		end := op.off + op.n
		var next []segment
		for _, sg := range segs {
			sgEnd := sg.off + sg.n
			if sgEnd <= op.off || sg.off >= end { // apart
				next = append(next, sg)
				continue
			}
			if sg.off < op.off { // the part before the new write
				next = append(next, segment{off: sg.off, n: op.off - sg.off, at: sg.at})
			}
			if sgEnd > end { // the part after it
				next = append(next, segment{off: end, n: sgEnd - end, at: sg.at + (end - sg.off)})
			}
		}
		next = append(next, segment{off: op.off, n: op.n, at: op.at})
		slices.SortFunc(next, func(a, b segment) int { return cmp.Compare(a.off, b.off) })
		segs = next
		if sized {
			size = max(size, end)
		}
	}
	return segs, low, size, sized
}

// clear forgets every record: the backend confirmed the file durable.
func (j *journal) clear() {
	j.ops, j.bytes = j.ops[:0], 0
	if j.f != nil {
		j.end = j.start
		_ = j.f.Truncate(j.start) // a failure leaves records a successor replays again: harmless
	}
}

// remove deletes the journal: its handle is released.
func (j *journal) remove() {
	if j.f != nil {
		os.Remove(j.f.Name())
		j.f.Close()
		j.f = nil
	}
	j.ops, j.bytes = nil, 0
}

// loadJournal reads the journal a predecessor left for file handle fh in dir; nil, nil when there is none.
func loadJournal(dir string, fh uint64) (*journal, error) {
	f, err := os.OpenFile(filepath.Join(dir, journalName(fh)), os.O_RDWR|unix.O_CLOEXEC, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("journal %s: %w", f.Name(), err)
	}
	j := &journal{dir: dir, name: journalName(fh), f: f}
	nl := bytes.IndexByte(b, '\n')
	if nl < 0 || json.Unmarshal(b[:nl], &j.header) != nil {
		f.Close()
		return nil, fmt.Errorf("journal %s: no header: not a journal this relay wrote", f.Name())
	}
	j.start = int64(nl + 1)
	at := j.start
records:
	for rest := b[nl+1:]; len(rest) > 0; {
		switch {
		case rest[0] == 'T' && len(rest) >= 9:
			j.ops = append(j.ops, journalOp{off: int64(binary.LittleEndian.Uint64(rest[1:])), truncate: true, rec: at})
			rest, at = rest[9:], at+9
			continue
		case rest[0] == 'W' && len(rest) >= recordHead:
			n := int64(binary.LittleEndian.Uint64(rest[9:]))
			if n >= 0 && int64(len(rest))-recordHead >= n {
				j.ops = append(j.ops, journalOp{off: int64(binary.LittleEndian.Uint64(rest[1:])), n: n, at: at + recordHead, rec: at})
				j.bytes += n
				rest, at = rest[recordHead+n:], at+recordHead+n
				continue
			}
		case rest[0] != 'T' && rest[0] != 'W':
			f.Close()
			return nil, fmt.Errorf("journal %s: a record of kind %q at %d: not a journal this relay wrote", f.Name(), rest[0], at)
		}
		break records // a record the predecessor did not finish writing: never acknowledged
	}
	j.end = at
	return j, nil
}

// pwriteAll writes all of p at off to fd.
func pwriteAll(fd int, p []byte, off int64) error {
	for len(p) > 0 {
		n, err := unix.Pwrite(fd, p, off)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return err
		case n == 0:
			return unix.EIO // a server that takes nothing would loop here forever
		}
		p, off = p[n:], off+int64(n)
	}
	return nil
}
