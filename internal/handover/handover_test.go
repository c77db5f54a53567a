package handover

import (
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fdpass"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseconn"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// pair returns two connected session ends.
func pair(t *testing.T) (*Conn, *Conn) {
	t.Helper()
	a, bf, err := Pair()
	if err != nil {
		t.Fatal(err)
	}
	b, err := FromFile(bf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// fuseDev opens /dev/fuse (not attached to any connection: enough for passing around).
func fuseDev(t *testing.T) *os.File {
	t.Helper()
	testenv.RequireFUSE(t)
	f, err := fuseconn.Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestSession: every kind of message arrives as sent, the descriptor with the message it was sent with.
func TestSession(t *testing.T) {
	a, b := pair(t)
	dev := fuseDev(t)
	init := []byte{1, 2, 3, 0, 255}
	msgs := []struct {
		m Msg
		f *os.File
	}{
		{Msg{Kind: Hello, Role: "keeper", Version: "v1", PID: 42, Holds: 1}, nil},
		{Msg{Kind: Hold, Volume: "vol-1", Init: init}, dev},
		{Msg{Kind: Serve, Volume: "vol-2"}, dev},
		{Msg{Kind: Served, Volume: "vol-2", Init: init, PID: 7, Version: "v2"}, nil},
		{Msg{Kind: Stop, Volume: "vol-1"}, nil},
		{Msg{Kind: Drop, Volume: "vol-3", Reason: "unknown"}, nil},
		{Msg{Kind: Ended, Volume: "vol-2", Reason: "unmounted"}, nil},
	}
	for _, m := range msgs {
		if err := a.Send(m.m, m.f); err != nil {
			t.Fatalf("Send %+v: %v", m.m, err)
		}
	}
	for _, want := range msgs {
		got, f, err := b.Recv()
		if err != nil {
			t.Fatalf("Recv (want %s): %v", want.m.Kind, err)
		}
		if got.Kind != want.m.Kind || got.Volume != want.m.Volume || string(got.Init) != string(want.m.Init) ||
			got.PID != want.m.PID || got.Holds != want.m.Holds || got.Reason != want.m.Reason || got.Role != want.m.Role || got.Version != want.m.Version {
			t.Errorf("received %+v, sent %+v", got, want.m)
		}
		if (f != nil) != (want.f != nil) {
			t.Errorf("%s: descriptor received %v, sent %v", got.Kind, f != nil, want.f != nil)
		}
		if f != nil {
			if err := fuseconn.Check(int(f.Fd())); err != nil {
				t.Errorf("%s: received descriptor: %v", got.Kind, err)
			}
			f.Close()
		}
	}
	a.Close()
	if _, _, err := b.Recv(); !errors.Is(err, io.EOF) {
		t.Errorf("Recv after the peer closed: %v, want EOF", err)
	}
}

// TestSendRefusesBadMessages: the sender checks its own messages as the receiver would.
func TestSendRefusesBadMessages(t *testing.T) {
	a, _ := pair(t)
	dev := fuseDev(t)
	for name, tc := range map[string]struct {
		m Msg
		f *os.File
	}{
		"serve without descriptor": {Msg{Kind: Serve, Volume: "v"}, nil},
		"stop with descriptor":     {Msg{Kind: Stop, Volume: "v"}, dev},
		"no volume":                {Msg{Kind: Stop}, nil},
		"volume with slash":        {Msg{Kind: Stop, Volume: "a/b"}, nil},
		"unknown kind":             {Msg{Kind: "reboot", Volume: "v"}, nil},
		"huge init":                {Msg{Kind: Served, Volume: "v", Init: make([]byte, MaxInit+1)}, nil},
		"negative holds":           {Msg{Kind: Hello, Holds: -1}, nil},
	} {
		if err := a.Send(tc.m, tc.f); err == nil {
			t.Errorf("%s: Send accepted %+v", name, tc.m)
		}
	}
}

// TestRecvRefusesGarbage: whatever a peer writes, Recv either returns a valid message or a protocol error,
// never leaves a descriptor open, and a descriptor that is not /dev/fuse never gets through.
func TestRecvRefusesGarbage(t *testing.T) {
	dev := fuseDev(t)
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	for name, tc := range map[string]struct {
		data string
		f    *os.File
		want string
	}{
		"not json":            {"\x00\xffgarbage", nil, "not JSON"},
		"unknown kind":        {`{"kind":"format-disk","volume":"v"}`, nil, "unknown message kind"},
		"hold without fd":     {`{"kind":"hold","volume":"v"}`, nil, "without a descriptor"},
		"hello with fd":       {`{"kind":"hello"}`, dev, "with a descriptor"},
		"serve of /dev/null":  {`{"kind":"serve","volume":"v"}`, null, "not /dev/fuse"},
		"volume traversal":    {`{"kind":"stop","volume":"../../etc"}`, nil, "must not contain"},
		"empty volume":        {`{"kind":"ended","volume":""}`, nil, "must not be empty"},
		"oversized volume":    {`{"kind":"stop","volume":"` + strings.Repeat("v", MaxVolume+1) + `"}`, nil, "longer than"},
		"absurd hello":        {`{"kind":"hello","holds":1000000000}`, nil, "announces"},
		"init is not base64":  {`{"kind":"served","volume":"v","init":"%%%"}`, nil, "not JSON"},
		"wrong type of field": {`{"kind":"served","volume":"v","pid":"one"}`, nil, "not JSON"},
	} {
		t.Run(name, func(t *testing.T) {
			a, b := pair(t)
			// Count only what refers to the sent file: the runtime may close an unrelated descriptor meanwhile.
			sent := func() int {
				if tc.f == nil {
					return 0
				}
				return testenv.DescriptorsOf(t, tc.f)
			}
			before := sent()
			if err := fdpass.WriteMsg(a.c, []byte(tc.data), tc.f, time.Time{}); err != nil {
				t.Fatal(err)
			}
			m, f, err := b.Recv()
			if err == nil {
				if f != nil {
					f.Close()
				}
				t.Fatalf("Recv accepted %q: %+v", tc.data, m)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "protocol error") {
				t.Errorf("error %q, want a protocol error containing %q", err, tc.want)
			}
			if after := sent(); after != before {
				t.Errorf("%d descriptors of the sent file open after the refused message, %d before", after, before)
			}
		})
	}
}

// TestFromFileWantsSequencedPackets: a stream socket would merge messages; it is refused.
func TestFromFileWantsSequencedPackets(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[1])
	if _, err := FromFile(os.NewFile(uintptr(fds[0]), "stream")); err == nil || !strings.Contains(err.Error(), "sequenced-packet") {
		t.Errorf("FromFile(stream socket) = %v", err)
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := FromFile(null); err == nil {
		t.Error("FromFile(/dev/null) succeeded")
	}
}

func TestPeerUID(t *testing.T) {
	a, _ := pair(t)
	if uid, err := a.PeerUID(); err != nil || uid != os.Getuid() {
		t.Errorf("PeerUID = %d, %v; want %d", uid, err, os.Getuid())
	}
}

// TestListenDial: a session over a socket path, as the plugin and the keeper use it.
func TestListenDial(t *testing.T) {
	dir, err := os.MkdirTemp("", "handover")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := dir + "/keeper.sock"
	l, err := Listen(path, 0o660)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan *Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, path, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := <-accepted
	defer s.Close()
	if err := c.Send(Msg{Kind: Hello, Role: "keeper"}, nil); err != nil {
		t.Fatal(err)
	}
	if m, _, err := s.Recv(); err != nil || m.Kind != Hello || m.Role != "keeper" {
		t.Fatalf("Recv = %+v, %v", m, err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o660 {
		t.Errorf("socket mode %v, %v", st.Mode(), err)
	}
}

// TestBackendCarriesADirectory: a backend message arrives with its directory descriptor; one carrying anything
// else (here /dev/fuse), and a connection's message carrying a directory, break the protocol.
func TestBackendCarriesADirectory(t *testing.T) {
	a, b := pair(t)
	dir, err := os.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	if err := a.Send(Msg{Kind: Backend, Volume: "vol-1"}, dir); err != nil {
		t.Fatal(err)
	}
	m, f, err := b.Recv()
	if err != nil || m.Kind != Backend || m.Volume != "vol-1" || f == nil || !fdpass.IsDirectory(f) {
		t.Fatalf("Recv = %+v, %v, %v; want the backend message with a directory", m, f, err)
	}
	f.Close()
	if err := a.Send(Msg{Kind: Backend, Volume: "vol-1"}, nil); err == nil {
		t.Error("Send accepted a backend message without a descriptor")
	}
	for _, c := range []struct {
		kind Kind
		f    *os.File
	}{{Backend, fuseDev(t)}, {Serve, dir}} {
		if err := a.Send(Msg{Kind: c.kind, Volume: "vol-1"}, c.f); err != nil {
			t.Fatal(err)
		}
		if _, f, err := b.Recv(); err == nil || f != nil {
			t.Errorf("Recv of a %s message with the wrong descriptor: %v, descriptor %v; want a protocol error", c.kind, err, f)
		}
	}
}
