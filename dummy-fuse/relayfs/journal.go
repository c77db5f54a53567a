package relayfs

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// journal is what a writable handle changed in its file since the backend last confirmed the file durable
// (an FSYNC or FLUSH it answered with success): the writes, in order, with their data kept in a spill file,
// and the truncations between them. Real servers keep a file being written in a local staging file and
// upload it at flush or fsync (gcsfuse; rclone's write cache at close), so a write they acknowledged dies
// with them; the relay replays the journal into the file opened on the next server before it forwards the
// next request, so that nothing it acknowledged is lost. Replaying is idempotent: every write is
// positional (the kernel sends an append with its offset) and a truncation sets a size.
//
// The journal lives as long as the relay process: a successor relay does not find it. That is enough for
// one crash at a time: when the relay dies, the kernel closes its backend descriptors, and each close
// sends the live server a FLUSH that uploads what the relay had acknowledged.
type journal struct {
	dir   string   // where the spill file is made
	spill *os.File // unlinked; nil until the first write
	ops   []journalOp
	bytes int64 // data in the spill file
}

// journalOp is a write of n bytes at off whose data is at at in the spill file, or (truncate) a
// truncation to off.
type journalOp struct {
	off, n, at int64
	truncate   bool
}

// write records data written at off.
func (j *journal) write(data []byte, off int64) error {
	if j.spill == nil {
		f, err := os.CreateTemp(j.dir, "dummy-fuse-relay-spill-")
		if err != nil {
			return fmt.Errorf("spill file: %w", err)
		}
		// Unlinked at once: the data is the process's alone and goes with it.
		if err := os.Remove(f.Name()); err != nil {
			f.Close()
			return fmt.Errorf("spill file: %w", err)
		}
		j.spill = f
	}
	if _, err := j.spill.WriteAt(data, j.bytes); err != nil {
		return fmt.Errorf("spill file: %w", err)
	}
	j.ops = append(j.ops, journalOp{off: off, n: int64(len(data)), at: j.bytes})
	j.bytes += int64(len(data))
	return nil
}

// truncate records a truncation to size.
func (j *journal) truncate(size int64) { j.ops = append(j.ops, journalOp{off: size, truncate: true}) }

// empty reports whether there is nothing to replay.
func (j *journal) empty() bool { return len(j.ops) == 0 }

// replay applies the journal to the backend file fd, in order.
func (j *journal) replay(fd int) error {
	buf := make([]byte, 0, 1<<20)
	for _, op := range j.ops {
		if op.truncate {
			if err := unix.Ftruncate(fd, op.off); err != nil {
				return err
			}
			continue
		}
		for done := int64(0); done < op.n; {
			chunk := buf[:min(int64(cap(buf)), op.n-done)]
			if _, err := j.spill.ReadAt(chunk, op.at+done); err != nil {
				return fmt.Errorf("spill file: %w", err)
			}
			if err := pwriteAll(fd, chunk, op.off+done); err != nil {
				return err
			}
			done += int64(len(chunk))
		}
	}
	return nil
}

// clear forgets everything: the backend confirmed the file durable.
func (j *journal) clear() {
	j.ops, j.bytes = j.ops[:0], 0
	if j.spill != nil {
		_ = j.spill.Truncate(0) // gives the space back; a failure only keeps it until the handle closes
	}
}

func (j *journal) close() {
	if j.spill != nil {
		j.spill.Close()
		j.spill = nil
	}
	j.ops, j.bytes = nil, 0
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
