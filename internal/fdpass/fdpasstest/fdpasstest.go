// Package fdpasstest makes descriptors that a hostile peer would send: ones whose close(2) blocks.
package fdpasstest

import (
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Linger is how long a LingeringSocket's close(2) blocks.
const Linger = 60 * time.Second

// LingeringSocket returns a TCP socket whose close(2) blocks for Linger: SO_LINGER is set and its send queue is
// full towards a peer that never reads. The peer is closed (with a reset, which releases any close still
// waiting) when the test ends; the returned file is the caller's.
func LingeringSocket(t testing.TB) *os.File {
	t.Helper()
	f, _ := LingeringSocketAndRelease(t)
	return f
}

// LingeringSocketAndRelease is LingeringSocket with a function that resets the peer at once (also called when
// the test ends), which ends any close of the socket still waiting.
func LingeringSocketAndRelease(t testing.TB) (*os.File, func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().(*net.TCPAddr)
	sa := &unix.SockaddrInet4{Port: addr.Port}
	copy(sa.Addr[:], addr.IP.To4())
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 4096)
	if err := unix.Connect(fd, sa); err != nil {
		unix.Close(fd)
		t.Fatal(err)
	}
	peer, err := ln.Accept()
	if err != nil {
		unix.Close(fd)
		t.Fatal(err)
	}
	tcp := peer.(*net.TCPConn)
	_ = tcp.SetReadBuffer(4096)
	release := func() {
		_ = tcp.SetLinger(0)
		_ = tcp.Close()
	}
	t.Cleanup(release)
	if err := unix.SetNonblock(fd, true); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64*1024)
	for {
		if _, err := unix.Write(fd, buf); err != nil {
			break // EAGAIN: nothing more fits
		}
	}
	_ = unix.SetNonblock(fd, false)
	if err := unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: int32(Linger / time.Second)}); err != nil {
		t.Fatal(err)
	}
	return os.NewFile(uintptr(fd), "lingering-socket"), release
}

// Threads returns how many threads the process has.
func Threads(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// FDs returns how many descriptors the process has open.
func FDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}
