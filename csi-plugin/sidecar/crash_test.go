package sidecar

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// fakeSidecarEnv makes the test binary play `csi-plugin sidecar`: it starts a "FUSE server" (sleep), prints its
// pid and exits with 37 when the server was killed by SIGKILL, as the real sidecar exits with the server's status.
const fakeSidecarEnv = "DFC_TEST_FAKE_SIDECAR"

func TestMain(m *testing.M) {
	if os.Getenv(fakeSidecarEnv) == "1" {
		os.Exit(fakeSidecar())
	}
	os.Exit(m.Run())
}

func fakeSidecar() int {
	server := exec.Command("sleep", "60")
	if err := server.Start(); err != nil {
		fmt.Println(err)
		return 1
	}
	fmt.Println(server.Process.Pid)
	err := server.Wait()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			return 37
		}
	}
	return 1
}

// startFakeSidecar starts the test binary as a fake sidecar and returns it and its server's pid.
func startFakeSidecar(t *testing.T) (*exec.Cmd, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fakeSidecarEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	var server int
	if _, serr := fmt.Sscan(line, &server); err != nil || serr != nil {
		t.Fatalf("fake sidecar said %q: %v %v", line, err, serr)
	}
	return cmd, server
}

// TestCrashKillsTheServer: the server (the child of a process running this executable) dies by SIGKILL, and the
// sidecar learns it from its server's exit status, as `csi-plugin sidecar` does.
func TestCrashKillsTheServer(t *testing.T) {
	testenv.Integration(t, "runs a fake sidecar and its server")
	sidecar, server := startFakeSidecar(t)
	var out strings.Builder
	if err := crash("/proc", sidecar.Process.Pid, syscall.SIGKILL, selection{}, &out); err != nil {
		t.Fatalf("crash: %v", err)
	}
	if want := fmt.Sprintf("SIGKILL to pid %d (sleep)", server); !strings.Contains(out.String(), want) {
		t.Errorf("output %q, want %q", out.String(), want)
	}
	done := make(chan error, 1)
	go func() { done <- sidecar.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the fake sidecar did not notice its server's death")
	}
	if code := sidecar.ProcessState.ExitCode(); code != 37 {
		t.Errorf("fake sidecar exited with %d, want 37 (its server killed by SIGKILL)", code)
	}
}

// TestCrashStop: --stop stops the server (state T) without killing it, so that a read can wait inside it; a
// later crash kills it.
func TestCrashStop(t *testing.T) {
	testenv.Integration(t, "runs a fake sidecar and its server")
	sidecar, server := startFakeSidecar(t)
	var out strings.Builder
	if err := crash("/proc", sidecar.Process.Pid, syscall.SIGSTOP, selection{}, &out); err != nil {
		t.Fatalf("crash --stop: %v", err)
	}
	if want := fmt.Sprintf("SIGSTOP to pid %d (sleep)", server); !strings.Contains(out.String(), want) {
		t.Errorf("output %q, want %q", out.String(), want)
	}
	testenv.Eventually(t, 10*time.Second, "the server to be stopped (state T)", func() bool { return testenv.StateLetter(server) == "T" })
	if err := crash("/proc", sidecar.Process.Pid, syscall.SIGKILL, selection{}, &out); err != nil {
		t.Fatalf("crash after --stop: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- sidecar.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the fake sidecar did not notice its stopped server's death")
	}
	if code := sidecar.ProcessState.ExitCode(); code != 37 {
		t.Errorf("fake sidecar exited with %d, want 37 (its stopped server killed by SIGKILL)", code)
	}
}

// TestCrashRefusesAnotherInit: when the process playing PID 1 does not run this executable (a host's init, say),
// nothing is killed.
func TestCrashRefusesAnotherInit(t *testing.T) {
	testenv.Integration(t, "runs processes")
	other := exec.Command("sh", "-c", "sleep 60 & echo $!; wait")
	out, err := other.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	var child int
	line, err := bufio.NewReader(out).ReadString('\n')
	if _, serr := fmt.Sscan(line, &child); err != nil || serr != nil {
		_ = other.Process.Kill()
		t.Fatalf("sh said %q: %v %v", line, err, serr)
	}
	defer func() {
		_ = syscall.Kill(child, syscall.SIGKILL) // started by this test: stopped by its pid
		_ = other.Process.Kill()
		_ = other.Wait()
	}()
	err = crash("/proc", other.Process.Pid, syscall.SIGKILL, selection{}, &strings.Builder{})
	if err == nil || !strings.Contains(err.Error(), "does not run this executable") {
		t.Fatalf("crash with another init: %v", err)
	}
	if err := syscall.Kill(child, 0); err != nil {
		t.Errorf("the other init's child %d: %v", child, err)
	}
}

// TestCrashWithoutServer: a sidecar that has no server yet is an error, not a silent success.
func TestCrashWithoutServer(t *testing.T) {
	err := crash("/proc", os.Getpid(), syscall.SIGKILL, selection{}, &strings.Builder{})
	if err == nil || !strings.Contains(err.Error(), "has no child") {
		t.Fatalf("crash of a process without children: %v", err)
	}
}

// TestCrashSelects: --with-arg and --without-arg pick children by their command line (the relay mode's relay,
// standby and real server are all the plugin's): a child that the selection leaves out lives on, and a
// selection that picks none is an error; one that picks it kills it.
func TestCrashSelects(t *testing.T) {
	testenv.Integration(t, "runs a fake sidecar and its server")
	sidecar, server := startFakeSidecar(t)
	for _, sel := range []selection{{with: args{"61"}}, {without: args{"60"}}, {with: args{"sleep"}, without: args{"60"}}} {
		err := crash("/proc", sidecar.Process.Pid, syscall.SIGKILL, sel, &strings.Builder{})
		if err == nil || !strings.Contains(err.Error(), "has no child with arguments") {
			t.Errorf("selection %+v of `sleep 60`: %v, want an error that no child matches", sel, err)
		}
	}
	if err := syscall.Kill(server, 0); err != nil {
		t.Fatalf("the server no selection picked: %v", err)
	}
	var out strings.Builder
	if err := crash("/proc", sidecar.Process.Pid, syscall.SIGKILL, selection{with: args{"sleep", "60"}, without: args{"--standby"}}, &out); err != nil {
		t.Fatalf("crash --with-arg sleep --with-arg 60 --without-arg --standby: %v", err)
	}
	if want := fmt.Sprintf("SIGKILL to pid %d (sleep)", server); !strings.Contains(out.String(), want) {
		t.Errorf("output %q, want %q", out.String(), want)
	}
	done := make(chan error, 1)
	go func() { done <- sidecar.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the fake sidecar did not notice its server's death")
	}
}
