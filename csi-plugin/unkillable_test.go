package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/fusemode"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// Bounds of a plugin's or keeper's exit, whatever a peer sent and whatever state a FUSE server is in: gone this
// long after SIGTERM (csi-plugin/README.md states it), and after SIGKILL within testenv.ExitWait.
const exitBound = 10 * time.Second

// The test binary runs as a peer of the plugin's when these are set (see TestMain): sendFilesEnv names the
// keeper socket to send to; the files are the descriptors from 3 on, sendFilesCountEnv of them.
const (
	sendFilesEnv      = "DFC_TEST_SEND_FILES_TO"
	sendFilesCountEnv = "DFC_TEST_SEND_FILES_COUNT"
)

// sendFiles is the peer: once a line arrives on stdin, it sends each inherited file to the keeper socket, each
// on a session of its own, by the two doors a peer with the keeper's user ID has: odd ones in the hello, before
// the plugin knows who it is; even ones in a hold, after a hello with the secret (readable by that user). It
// says "sent" and waits to be killed. It never closes the files itself: their server is stopped, so its own
// close would wait as well.
func sendFiles(socket string) int {
	n, err := strconv.Atoi(os.Getenv(sendFilesCountEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "count:", err)
		return 2
	}
	secret, err := os.ReadFile(filepath.Join(filepath.Dir(socket), fusemode.KeeperSecretName))
	if err != nil {
		fmt.Fprintln(os.Stderr, "secret:", err)
		return 2
	}
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		fmt.Fprintln(os.Stderr, "waiting for the go:", err)
		return 2
	}
	var conns []*net.UnixConn
	for i := range n {
		c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: socket, Net: "unixpacket"})
		if err != nil {
			fmt.Fprintln(os.Stderr, "dial:", err)
			return 1
		}
		conns = append(conns, c)
		file := unix.UnixRights(3 + i)
		if i%2 == 0 {
			_, _, err = c.WriteMsgUnix([]byte(`{"kind":"hello","role":"keeper"}`), file, nil)
		} else {
			hello, _ := json.Marshal(map[string]any{"kind": "hello", "role": "keeper", "holds": 1, "secret": secret})
			if _, err = c.Write(hello); err == nil {
				_, _, err = c.WriteMsgUnix([]byte(`{"kind":"hold","volume":"vol-1"}`), file, nil)
			}
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "send:", err)
			return 1
		}
	}
	fmt.Println("sent", len(conns))
	select {}
}

// nobodyCopy copies the executable at path beside the binaries, which user nobody may run (allowNobody): the
// test binary's own directory is the go command's, closed to other users.
func (e *env) nobodyCopy(path string) string {
	e.t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		e.t.Fatal(err)
	}
	out := filepath.Join(filepath.Dir(e.dummyFuse), "peer-"+filepath.Base(path))
	if err := os.WriteFile(out, b, 0o755); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// attack stages and publishes a volume in keeper mode, opens files on it, stops its FUSE server and has a peer
// with the keeper's user ID send the plugin those files: what a hostile keeper could do. It returns the plugin
// once the plugin has read every one of them.
func attack(t *testing.T) (*env, *plugin) {
	t.Helper()
	e := newEnv(t, syscall.MS_PRIVATE)
	e.allowNobody()
	p := e.start("--fuse-mode=keeper", "--keeper-uid=65534")
	k := e.startKeeper()
	e.stagePublish(p, "vol-1", "pod-a")
	server := k.servedBy("vol-1", 0)

	const files = 4
	file := filepath.Join(e.stagingPath("vol-1"), "dummy-file.txt")
	cmd := exec.Command(e.nobodyCopy(os.Args[0]), "-test.run=^$")
	cmd.Env = append(os.Environ(), sendFilesEnv+"="+filepath.Join(e.sockDir, "keeper.sock"), sendFilesCountEnv+"="+strconv.Itoa(files))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	for range files {
		f, err := os.Open(file)
		if err != nil {
			t.Fatal(err)
		}
		cmd.ExtraFiles = append(cmd.ExtraFiles, f)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	peer := e.lab.Start("peer with the keeper's uid", cmd)
	for _, f := range cmd.ExtraFiles {
		f.Close() // the server still answers: the peer's copies are the ones left
	}
	if err := syscall.Kill(server, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, waitTimeout, "the peer to send its files", func() bool { return strings.Contains(peer.Log(), "sent") })
	testenv.Eventually(t, waitTimeout, "the plugin to refuse every session that sent a file", func() bool {
		log := p.Log()
		return strings.Count(log, `"Session without hello"`) >= files/2 &&
			strings.Count(log, `"Session broke off while handing back its connections"`) >= files/2
	})
	return e, p
}

// TestPeerFilesCannotKeepThePluginFromExiting: a peer with the keeper's user ID sends the plugin files of a
// volume whose FUSE server is stopped; the plugin, which holds that volume's connection, is gone within
// exitBound of SIGTERM. Closing such a file sends a FLUSH that nobody answers and that SIGKILL does not
// interrupt, and the connection could never end while the plugin holds it: the plugin must end the connection
// before closing the file (fdpass.Closer), which costs the volume (the peer could have stopped serving it
// anyway), never the process.
func TestPeerFilesCannotKeepThePluginFromExiting(t *testing.T) {
	e, p := attack(t)
	start := time.Now()
	p.Signal(syscall.SIGTERM)
	if code := p.Wait(exitBound); code != 0 {
		t.Errorf("the plugin exited with %d after SIGTERM, want 0", code)
	}
	t.Logf("the plugin was gone %s after SIGTERM", time.Since(start).Round(time.Millisecond))
	// An open always reaches the server (a stat may be answered from the attribute cache).
	f, err := os.Open(filepath.Join(e.stagingPath("vol-1"), "dummy-file.txt"))
	if err == nil {
		f.Close()
	}
	if !errors.Is(err, syscall.ENOTCONN) && !errors.Is(err, syscall.ECONNABORTED) {
		t.Errorf("opening the volume's file after the plugin ended its connection: %v, want ENOTCONN", err)
	}
}

// TestPeerFilesCannotMakeThePluginUnkillable: the same attack, then SIGKILL: no thread of the plugin is left
// waiting, the process is gone.
func TestPeerFilesCannotMakeThePluginUnkillable(t *testing.T) {
	_, p := attack(t)
	start := time.Now()
	p.Signal(syscall.SIGKILL)
	p.Wait(testenv.ExitWait)
	t.Logf("the plugin was gone %s after SIGKILL", time.Since(start).Round(time.Millisecond))
}

// The test binary runs as a hostile FUSE server of the keeper's when hostileServerEnv names the real dummy-fuse
// (see TestMain and hostileServer).
const (
	hostileServerEnv = "DFC_TEST_HOSTILE_SERVER"
	hostileFileEnv   = "DFC_TEST_HOSTILE_FILE" // the file it sends, once it exists and can be opened
)

// hostileServer runs the real dummy-fuse with its own arguments (the keeper's session on descriptor 3 included),
// so that the volume is served, keeps a copy of the session, and, once the file of hostileFileEnv can be opened,
// sends the keeper that file in a message on the session: a server's file of the very volume the keeper holds.
// It says on stdout (the keeper's log) whether the kernel refused it, and waits to be stopped.
func hostileServer(real string) int {
	cmd := exec.Command(real, os.Args[1:]...)
	cmd.ExtraFiles = []*os.File{os.NewFile(3, "session")}
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // gone with this process
	if err := cmd.Start(); err != nil {
		fmt.Println("hostile server:", err)
		return 1
	}
	var f *os.File
	for deadline := time.Now().Add(waitTimeout); f == nil; time.Sleep(50 * time.Millisecond) {
		var err error
		if f, err = os.Open(os.Getenv(hostileFileEnv)); err != nil && time.Now().After(deadline) {
			fmt.Println("hostile server: opening the file:", err)
			return 1
		}
	}
	fmt.Println("hostile server: holding the file")
	// The test stops the real server now; then the file goes to the keeper.
	for deadline := time.Now().Add(waitTimeout); testenv.StateLetter(cmd.Process.Pid) != "T"; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			fmt.Println("hostile server: the real server was never stopped")
			return 1
		}
	}
	err := unix.Sendmsg(3, []byte(`{"kind":"served","volume":"vol-1"}`), unix.UnixRights(int(f.Fd())), nil, 0)
	fmt.Printf("hostile server: sent the keeper a file of the volume: %v\n", err)
	select {}
}

// TestServerFilesCannotKeepTheKeeperFromExiting: a FUSE server of the keeper's sends it a file of the volume it
// serves, whose server is stopped; the keeper, which holds that volume's connection, is gone within exitBound
// of SIGTERM. A server's session refuses descriptors (SO_PASSRIGHTS): the kernel fails the send, nothing lands
// in the keeper. Before, the keeper closed the file: a FLUSH that nobody answers, on a connection it held
// itself.
func TestServerFilesCannotKeepTheKeeperFromExiting(t *testing.T) {
	e := newEnv(t, syscall.MS_PRIVATE)
	e.allowNobody()
	p := e.start("--fuse-mode=keeper", "--keeper-uid=65534")
	staging := e.stagingPath("vol-1")
	t.Setenv(hostileServerEnv, e.dummyFuse)
	t.Setenv(hostileFileEnv, filepath.Join(staging, "dummy-file.txt"))
	k := e.startKeeper("--dummy-fuse-path=" + e.nobodyCopy(os.Args[0]))
	e.stagePublish(p, "vol-1", "pod-a")
	var server int // the real dummy-fuse: the child of the hostile server the keeper started
	testenv.Eventually(t, waitTimeout, "the real dummy-fuse under the hostile server", func() bool {
		kids := testenv.Children(k.servedBy("vol-1", 0))
		if len(kids) == 1 {
			server = kids[0]
		}
		return server != 0
	})
	// The file is the keeper's user's to open, as a server's own volume is.
	for d := filepath.Dir(staging); d != e.root; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, waitTimeout, "the hostile server to open the volume's file", func() bool { return strings.Contains(k.Log(), "holding the file") })
	if err := syscall.Kill(server, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// Resumed at the end, whatever happened: the hostile server's own exit closes the file.
	t.Cleanup(func() { _ = syscall.Kill(server, syscall.SIGCONT) })
	testenv.Eventually(t, waitTimeout, "the hostile server to send the file", func() bool { return strings.Contains(k.Log(), "sent the keeper a file") })
	start := time.Now()
	k.Signal(syscall.SIGTERM)
	if code := k.Wait(exitBound); code != 0 {
		t.Errorf("the keeper exited with %d after SIGTERM, want 0", code)
	}
	t.Logf("the keeper was gone %s after SIGTERM (%s)", time.Since(start).Round(time.Millisecond), lastLine(k.Log(), "sent the keeper a file"))
	// The hostile server's own exit closes its file, a FLUSH to the real server it had stopped, which left with
	// the keeper: end the connection, as the plugin does with one that stays unserved (--unserved-abort-after).
	if _, err := testenv.AbortFUSEUnder([]string{staging}, nil); err != nil {
		t.Error(err)
	}
}

// lastLine is the last line of log that contains s.
func lastLine(log, s string) string {
	lines := strings.Split(log, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], s) {
			return strings.TrimSpace(lines[i])
		}
	}
	return ""
}
