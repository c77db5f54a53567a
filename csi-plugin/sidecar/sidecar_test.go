package sidecar

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/fusemode"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/command"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fdpass"
)

func TestParseArgs(t *testing.T) {
	c, err := ParseArgs([]string{"--socket=/dfc-sidecar/pv/socket", "--delay=2s"}, io.Discard)
	if err != nil || c.Socket != "/dfc-sidecar/pv/socket" || c.Delay != 2*time.Second || c.Wait != 5*time.Minute {
		t.Errorf("ParseArgs = %+v, %v", c, err)
	}
	for _, bad := range [][]string{nil, {"--socket=/s", "extra"}, {"--socket=/s", "--delay=-1s"}, {"--socket=/s", "--wait=0"}, {"--nope"}} {
		var usage *command.UsageError
		if _, err := ParseArgs(bad, io.Discard); !errors.As(err, &usage) {
			t.Errorf("ParseArgs(%q) = %v, want a usage error", bad, err)
		}
	}
}

// fakeServer is a "dummy-fuse" that reports what its fd 3 is and exits.
func fakeServer(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "dummy-fuse")
	script := "#!/bin/sh\n[ \"$1\" = /dev/fd/3 ] || exit 9\nreadlink /proc/self/fd/3\n"
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func listen(t *testing.T) (string, *net.UnixListener) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "socket")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return sock, ln
}

// TestRunHandsTheDescriptorOn plays the plugin: the descriptor it sends (a pipe here) reaches the server as fd 3.
func TestRunHandsTheDescriptorOn(t *testing.T) {
	sock, ln := listen(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sent := make(chan error, 1)
	go func() { sent <- fdpass.SendOnce(ctx, ln, w, fusemode.Handover{VolumeID: "v"}, 5*time.Second, nil) }()

	var out, errOut strings.Builder
	err = Run(ctx, []string{"--socket", sock, "--dummy-fuse-path", fakeServer(t)}, command.Streams{Out: &out, Err: &errOut})
	if err != nil {
		t.Fatalf("Run: %v; stderr %q", err, errOut.String())
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	wantTarget, _ := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(w.Fd())))
	if got := strings.TrimSpace(out.String()); got != wantTarget {
		t.Errorf("the server's fd 3 is %q, want the sent pipe %q", got, wantTarget)
	}
	if !strings.Contains(errOut.String(), "volume v") {
		t.Errorf("stderr %q does not say which volume it serves", errOut.String())
	}
}

// TestRunRefusesGarbage: a peer that sends no descriptor gets a clear error, nothing is started, nothing hangs.
func TestRunRefusesGarbage(t *testing.T) {
	sock, ln := listen(t)
	go func() {
		c, err := ln.AcceptUnix()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = c.Write([]byte("garbage"))
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := Run(ctx, []string{"--socket", sock, "--dummy-fuse-path", fakeServer(t), "--receive-timeout=2s"}, command.Streams{Out: io.Discard, Err: io.Discard})
	if err == nil || !strings.Contains(err.Error(), "carries no descriptor") {
		t.Fatalf("Run with a garbage peer: %v", err)
	}
}

func TestRunGivesUpWithoutSocket(t *testing.T) {
	start := time.Now()
	err := Run(context.Background(), []string{"--socket", filepath.Join(t.TempDir(), "absent"), "--dummy-fuse-path", fakeServer(t), "--wait=200ms"},
		command.Streams{Out: io.Discard, Err: io.Discard})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run without a socket: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("gave up after %v", d)
	}
}

// TestRunStopsCleanlyWhileWaiting: SIGTERM (the pod is deleted) before the plugin offers a connection is a clean
// stop, exit code 0, not a failed container; giving up after --wait stays an error (above).
func TestRunStopsCleanlyWhileWaiting(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	var errOut strings.Builder
	err := Run(ctx, []string{"--socket", filepath.Join(t.TempDir(), "absent"), "--dummy-fuse-path", fakeServer(t)},
		command.Streams{Out: io.Discard, Err: &errOut})
	if err != nil {
		t.Fatalf("Run stopped while waiting for the plugin: %v, want nil", err)
	}
	if !strings.Contains(errOut.String(), "stopped before the plugin handed over") {
		t.Errorf("stderr %q does not say why it stopped", errOut.String())
	}
}
