package fdpass

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

type config struct {
	VolumeID string `json:"volumeID"`
}

// pair returns the two ends of a connected unix stream socket.
func pair(t *testing.T) (*net.UnixConn, *net.UnixConn) { return socketPair(t, unix.SOCK_STREAM) }

// socketPair returns the two ends of a connected unix socket of type typ.
func socketPair(t *testing.T, typ int) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, typ|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "socketpair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c.(*net.UnixConn)
	}
	return conn(fds[0]), conn(fds[1])
}

func pipe(t *testing.T) (*os.File, *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	return r, w
}

func TestRoundTrip(t *testing.T) {
	a, b := pair(t)
	r, w := pipe(t)
	if err := Send(a, w, config{VolumeID: "vol-1"}, time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	var got config
	f, err := Receive(b, &got, time.Now().Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got.VolumeID != "vol-1" {
		t.Errorf("config %+v, want volumeID vol-1", got)
	}
	flags, err := unix.FcntlInt(f.Fd(), unix.F_GETFD, 0)
	if err != nil {
		t.Fatal(err)
	}
	if flags&unix.FD_CLOEXEC == 0 {
		t.Error("received descriptor is not close-on-exec")
	}
	// The received descriptor is the pipe's write end: what is written through it comes out of r.
	if _, err := f.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1)
	if _, err := r.Read(buf); err != nil || buf[0] != 'x' {
		t.Fatalf("read %q, %v through the passed descriptor", buf, err)
	}
}

// TestBadMessages sends what a confused or hostile peer could: every one is refused with a clear error, and
// no descriptor it carried stays open in the receiver.
func TestBadMessages(t *testing.T) {
	for _, tc := range []struct {
		name    string
		data    string
		fds     int
		wantErr string
	}{
		{"no descriptor", `{"volumeID":"v"}`, 0, "carries no descriptor, want exactly 1"},
		{"two descriptors", `{"volumeID":"v"}`, 2, "carries 2 descriptors, want at most 1"},
		{"too many descriptors", `{"volumeID":"v"}`, maxFDs + 1, "more than 8 descriptors"},
		{"garbage", "\x00\xffnot json", 1, "decoding the config"},
		{"no config", "", 1, "decoding the config"}, // a stream socket sends one NUL byte for empty data
		{"oversized", strings.Repeat("a", MaxConfig+10), 1, "larger than 4096 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := pair(t)
			_, w := pipe(t)
			var fds []int
			for i := 0; i < tc.fds; i++ {
				fds = append(fds, int(w.Fd()))
			}
			var oob []byte
			if len(fds) > 0 {
				oob = unix.UnixRights(fds...)
			}
			before := testenv.DescriptorsOf(t, w)
			if _, _, err := a.WriteMsgUnix([]byte(tc.data), oob, nil); err != nil {
				t.Fatal(err)
			}
			var got config
			f, err := Receive(b, &got, time.Now().Add(time.Second))
			if err == nil {
				f.Close()
				t.Fatalf("Receive accepted the message")
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error %q, want it to contain %q", err, tc.wantErr)
			}
			if after := testenv.DescriptorsOf(t, w); after != before {
				t.Errorf("%d descriptors of the sent pipe open after the refused message, %d before: received ones leaked", after, before)
			}
		})
	}
}

func TestPeerClosesWithoutSending(t *testing.T) {
	a, b := pair(t)
	a.Close()
	var got config
	if _, err := Receive(b, &got, time.Now().Add(time.Second)); err == nil || !errors.Is(err, io.EOF) {
		t.Fatalf("Receive from a closed peer: %v", err)
	}
}

func TestReceiveDeadline(t *testing.T) {
	_, b := pair(t)
	start := time.Now()
	var got config
	_, err := Receive(b, &got, start.Add(100*time.Millisecond))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Receive from a silent peer: %v, want a deadline error", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Receive returned after %v", d)
	}
}

// TestSendOnce hands a descriptor to one receiver that connects before the listener exists (Dial retries), and
// checks that the listener takes no second connection.
func TestSendOnce(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "socket")
	_, w := pipe(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	type result struct {
		f   *os.File
		cfg config
		err error
	}
	got := make(chan result, 1)
	go func() {
		var r result
		c, err := Dial(ctx, "unix", sock, 10*time.Millisecond)
		if err != nil {
			got <- result{err: err}
			return
		}
		defer c.Close()
		r.f, r.err = Receive(c, &r.cfg, time.Now().Add(5*time.Second))
		got <- r
	}()
	time.Sleep(50 * time.Millisecond) // let Dial find nothing at first
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	if err := SendOnce(ctx, ln, w, config{VolumeID: "v"}, time.Second, nil); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	r.f.Close()
	if r.cfg.VolumeID != "v" {
		t.Errorf("config %+v", r.cfg)
	}
	if c, err := net.Dial("unix", sock); err == nil {
		c.Close()
		t.Error("the listener still accepts after sending once")
	}
}

func TestSendOnceEndsWithContext(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "socket")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	_, w := pipe(t)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := SendOnce(ctx, ln, w, config{}, time.Second, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("SendOnce without a receiver: %v, want the context's deadline", err)
	}
}

func TestDialGivesUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := Dial(ctx, "unix", filepath.Join(t.TempDir(), "absent"), 10*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Dial of an absent socket: %v", err)
	}
}

// TestLongSocketPath reaches a socket whose path does not fit in a socket address (kubelet's pod directories
// are long: the plugin listens through its directory's descriptor, the receiver dials through it).
func TestLongSocketPath(t *testing.T) {
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 100))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "socket")
	if len(sock) <= maxSunPath {
		t.Fatalf("test path %q is short enough to dial directly", sock)
	}
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: fmt.Sprintf("/proc/self/fd/%d/socket", d.Fd()), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, "unix", sock, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

// TestMessages: on a sequenced-packet socket every message keeps its bounds, with or without a descriptor, and
// the descriptor arrives with the message it was sent with.
func TestMessages(t *testing.T) {
	a, b := socketPair(t, unix.SOCK_SEQPACKET)
	r, w := pipe(t)
	deadline := time.Now().Add(time.Second)
	for i, m := range []struct {
		data string
		f    *os.File
	}{{"one", nil}, {"two", w}, {"three", nil}} {
		if err := WriteMsg(a, []byte(m.data), m.f, deadline); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	for i, want := range []struct {
		data string
		fd   bool
	}{{"one", false}, {"two", true}, {"three", false}} {
		data, f, err := ReadMsg(b, deadline)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if string(data) != want.data || (f != nil) != want.fd {
			t.Fatalf("message %d: %q with descriptor %v, want %q with %v", i, data, f != nil, want.data, want.fd)
		}
		if f != nil {
			// The received descriptor is the pipe's write end: what goes in comes out of r.
			if _, err := f.Write([]byte("x")); err != nil {
				t.Fatal(err)
			}
			f.Close()
			buf := make([]byte, 1)
			if _, err := r.Read(buf); err != nil || buf[0] != 'x' {
				t.Fatalf("read through the passed descriptor: %q, %v", buf, err)
			}
		}
	}
	for _, bad := range [][]byte{nil, make([]byte, MaxConfig+1)} {
		if err := WriteMsg(a, bad, nil, deadline); err == nil {
			t.Errorf("WriteMsg of %d bytes succeeded", len(bad))
		}
	}
	a.Close()
	if _, _, err := ReadMsg(b, deadline); !errors.Is(err, io.EOF) {
		t.Errorf("ReadMsg after the peer closed: %v, want EOF", err)
	}
}

// TestListenReplacesOnlyStaleSockets: a socket left by a crash is replaced, anything else is left alone, and
// the socket gets the mode asked for.
func TestListenReplacesOnlyStaleSockets(t *testing.T) {
	dir, err := os.MkdirTemp("", "fdpass") // t.TempDir's paths can be too long for a socket address
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	for _, network := range []string{"unix", "unixpacket"} {
		sock := filepath.Join(dir, network+".sock")
		stale, err := net.ListenUnix(network, &net.UnixAddr{Name: sock, Net: network})
		if err != nil {
			t.Fatal(err)
		}
		stale.SetUnlinkOnClose(false)
		stale.Close() // the socket file stays, like after a crash
		l, err := Listen(network, sock, 0o666)
		if err != nil {
			t.Fatalf("%s: stale socket not replaced: %v", network, err)
		}
		if st, err := os.Stat(sock); err != nil || st.Mode().Perm() != 0o666 {
			t.Errorf("%s: socket mode %v, %v; want 0666", network, st.Mode(), err)
		}
		l.Close()
	}
	file := filepath.Join(dir, "not-a-socket")
	if err := os.WriteFile(file, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen("unix", file, 0); err == nil {
		t.Fatal("Listen replaced a regular file")
	}
	if b, _ := os.ReadFile(file); string(b) != "keep me" {
		t.Fatal("regular file was touched")
	}
}
