package dummyfs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// kernelInit returns an INIT request as a kernel speaking protocol 7.minor sends it (64-byte fuse_init_in
// since 7.36), announcing flags.
func kernelInit(minor uint32, flags uint64) []byte {
	size := inHeaderLen + initInLen
	if minor < 36 {
		size = inHeaderLen + initInLenOld
	}
	b := make([]byte, size)
	binary.NativeEndian.PutUint32(b[0:], uint32(size))
	binary.NativeEndian.PutUint32(b[4:], opInit)
	binary.NativeEndian.PutUint64(b[8:], 2) // unique
	binary.NativeEndian.PutUint32(b[inHeaderLen:], kernelMajor)
	binary.NativeEndian.PutUint32(b[inHeaderLen+4:], minor)
	binary.NativeEndian.PutUint32(b[inHeaderLen+8:], 128*1024)
	binary.NativeEndian.PutUint32(b[inHeaderLen+12:], uint32(flags))
	if minor >= 36 {
		binary.NativeEndian.PutUint32(b[initFlags2At:], uint32(flags>>32))
	}
	return b
}

// record returns the handover record a first server with opts writes for req.
func record(t *testing.T, req []byte, opts Options) []byte {
	t.Helper()
	c := NewConn(-1, New(opts), MountOptions(opts), 1)
	out := make([]byte, c.bufSize)
	m, st := c.ps.HandleRequest([][]byte{req}, [][]byte{out})
	if !st.Ok() || m < outHeaderLen {
		t.Fatalf("INIT: %v, %d bytes", st, m)
	}
	return append(append([]byte(nil), req...), out[:m]...)
}

func TestReplayInit(t *testing.T) {
	opts := DefaultOptions()
	for _, tc := range []struct {
		name   string
		minor  uint32
		flags  uint64
		resend bool
	}{
		{"7.45 with FUSE_HAS_RESEND", 45, fuse.CAP_ASYNC_READ | fuse.CAP_HAS_RESEND, true},
		{"7.45 without", 45, fuse.CAP_ASYNC_READ, false},
		{"7.31, old layout", 31, fuse.CAP_ASYNC_READ, false},
	} {
		rec := record(t, kernelInit(tc.minor, tc.flags), opts)
		c := NewConn(-1, New(opts), MountOptions(opts), 1)
		if err := c.replayInit(rec); err != nil {
			t.Errorf("%s: replayInit: %v", tc.name, err)
			continue
		}
		if got := kernelHasResend(c.InitRecord()); got != tc.resend {
			t.Errorf("%s: kernelHasResend = %t, want %t", tc.name, got, tc.resend)
		}
	}
}

func TestReplayInitRefuses(t *testing.T) {
	opts := DefaultOptions()
	good := record(t, kernelInit(45, fuse.CAP_HAS_RESEND), opts)
	reqLen := inHeaderLen + initInLen
	edit := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	for name, rec := range map[string][]byte{
		"empty":           nil,
		"short":           good[:20],
		"not INIT":        edit(func(b []byte) []byte { binary.NativeEndian.PutUint32(b[4:], 1); return b }),
		"cut request":     good[:reqLen-4],
		"unknown layout":  edit(func(b []byte) []byte { binary.NativeEndian.PutUint32(b[0:], inHeaderLen+32); return b }),
		"major 8":         edit(func(b []byte) []byte { binary.NativeEndian.PutUint32(b[inHeaderLen:], 8); return b }),
		"layout vs minor": edit(func(b []byte) []byte { binary.NativeEndian.PutUint32(b[inHeaderLen+4:], 35); return b }),
		"no reply":        good[:reqLen],
		"cut reply":       good[:len(good)-1],
		"refused INIT":    edit(func(b []byte) []byte { binary.NativeEndian.PutUint32(b[reqLen+4:], uint32(0xffffffff-4)); return b }),
		"other max_write": edit(func(b []byte) []byte { binary.NativeEndian.PutUint32(b[reqLen+outHeaderLen+20:], 4096); return b }),
		"other successor": record(t, kernelInit(45, fuse.CAP_HAS_RESEND), Options{AllowOther: true, FsName: "x"}),
	} {
		c := NewConn(-1, New(opts), MountOptions(opts), 1)
		if name == "other successor" {
			// A successor with another max_write than the first server negotiated.
			mo := MountOptions(opts)
			mo.MaxWrite = 64 * 1024
			c = NewConn(-1, New(opts), mo, 1)
		}
		var he *HandoverError
		if err := c.replayInit(rec); !errors.As(err, &he) {
			t.Errorf("%s: replayInit = %v, want a *HandoverError", name, err)
		}
		if c.InitRecord() != nil {
			t.Errorf("%s: a refused record was kept", name)
		}
	}
}

func TestInitRecordFile(t *testing.T) {
	rec := record(t, kernelInit(45, fuse.CAP_HAS_RESEND), DefaultOptions())
	path := filepath.Join(t.TempDir(), "init")
	if err := WriteInitRecord(path, rec); err != nil {
		t.Fatal(err)
	}
	got, err := ReadInitRecord(path)
	if err != nil || string(got) != string(rec) {
		t.Fatalf("ReadInitRecord = %x, %v; want %x", got, err, rec)
	}
	if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 1 {
		t.Errorf("temporary files left: %v", entries)
	}
	big := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(big, make([]byte, MaxInitRecord+1), 0o600); err != nil {
		t.Fatal(err)
	}
	var he *HandoverError
	if _, err := ReadInitRecord(big); !errors.As(err, &he) {
		t.Errorf("ReadInitRecord(too large) = %v, want a *HandoverError", err)
	}
}

// TestReplayInitEveryLength: a record whose INIT request claims any length up to past both layouts is refused
// with a HandoverError, never a panic (a record comes from another process: the keeper, the plugin's records).
func TestReplayInitEveryLength(t *testing.T) {
	opts := DefaultOptions()
	good := record(t, kernelInit(45, fuse.CAP_HAS_RESEND), opts)
	for n := 0; n <= inHeaderLen+initInLen+40; n++ {
		rec := append([]byte(nil), good...)
		binary.NativeEndian.PutUint32(rec[0:], uint32(n))
		for _, cut := range []int{len(rec), n, n + outHeaderLen} {
			if cut > len(rec) {
				continue
			}
			c := NewConn(-1, New(opts), MountOptions(opts), 1)
			err := func() (err error) {
				defer func() {
					if p := recover(); p != nil {
						err = fmt.Errorf("panic: %v", p)
					}
				}()
				return c.replayInit(rec[:cut])
			}()
			var he *HandoverError
			if n == inHeaderLen+initInLen && cut == len(rec) {
				if err != nil {
					t.Errorf("INIT length %d: the good record is refused: %v", n, err)
				}
			} else if !errors.As(err, &he) {
				t.Errorf("INIT length %d, record of %d bytes: replayInit = %v, want a *HandoverError", n, cut, err)
			}
		}
	}
}

// FuzzReplayInit: no handover record makes a server panic; a record it accepts is kept as it came.
func FuzzReplayInit(f *testing.F) {
	opts := DefaultOptions()
	good := func(minor uint32, flags uint64) []byte {
		c := NewConn(-1, New(opts), MountOptions(opts), 1)
		req := kernelInit(minor, flags)
		out := make([]byte, c.bufSize)
		m, _ := c.ps.HandleRequest([][]byte{req}, [][]byte{out})
		return append(req, out[:m]...)
	}
	f.Add(good(45, fuse.CAP_HAS_RESEND))
	f.Add(good(31, fuse.CAP_ASYNC_READ))
	f.Add(good(12, 0))
	f.Add([]byte{})
	f.Add(make([]byte, inHeaderLen))
	f.Fuzz(func(t *testing.T, rec []byte) {
		c := NewConn(-1, New(opts), MountOptions(opts), 1)
		err := c.replayInit(rec)
		var he *HandoverError
		switch {
		case err == nil && !bytes.Equal(c.InitRecord(), rec):
			t.Errorf("accepted record %x kept as %x", rec, c.InitRecord())
		case err != nil && !errors.As(err, &he):
			t.Errorf("replayInit(%x) = %v, want a *HandoverError", rec, err)
		}
	})
}

// TestReadInitRecordRefusesSpecialFiles: --takeover with a FIFO (or a directory, a device) as the record is
// refused at once instead of blocking in open(2) for a writer that never comes.
func TestReadInitRecordRefusesSpecialFiles(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{fifo, t.TempDir(), "/dev/null"} {
		done := make(chan error, 1)
		go func() { _, err := ReadInitRecord(path); done <- err }()
		select {
		case err := <-done:
			var he *HandoverError
			if !errors.As(err, &he) {
				t.Errorf("ReadInitRecord(%s) = %v, want a *HandoverError", path, err)
			}
		case <-time.After(5 * time.Second):
			// Unblock the open so the goroutine ends with the test.
			if w, err := os.OpenFile(fifo, os.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
				w.Close()
			}
			t.Fatalf("ReadInitRecord(%s) still blocked after 5s", path)
		}
	}
}
