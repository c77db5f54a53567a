package fuseserver_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseconn"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver/backing"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// nobody is the user a server on a passed descriptor runs as, as the GCS FUSE CSI driver's sidecar does.
const nobody = 65534

// specs returns each server ready to run, with what it reads started or made in dir.
func specs(t *testing.T, lab *testenv.Lab, dir string) map[string]fuseserver.Spec {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	image := filepath.Join(dir, "tree.squashfs")
	testenv.RealServer(t, "mksquashfs")
	if err := backing.SquashfsImage(ctx, image); err != nil {
		t.Fatal(err)
	}
	endpoint := testenv.FakeGCS(ctx, t, t.TempDir()).Endpoint
	// Every server runs from dir, which the user nobody can reach, as a sidecar's image would have it.
	return map[string]fuseserver.Spec{
		fuseserver.DummyFuse:  {Path: copyExecutable(t, testenv.Build(t, "dummy-fuse"), dir)},
		fuseserver.Gcsfuse:    {Name: fuseserver.Gcsfuse, Path: copyExecutable(t, testenv.RealServer(t, "gcsfuse"), dir), Opts: map[string]string{"endpoint": endpoint}},
		fuseserver.Squashfuse: {Name: fuseserver.Squashfuse, Path: testenv.RealServer(t, "squashfuse"), Opts: map[string]string{"image": image}},
	}
}

// TestRealServersLoseTheirMountsAsUsersSee runs each server in both ways the plugin places one (mounting a
// directory itself; serving a connection the plugin mounted, passed as /dev/fd/3, unprivileged) and shows what
// a workload sees when it dies: a read that was in flight ends with ECONNABORTED, every later access with
// ENOTCONN ("transport endpoint is not connected"), for every server alike.
func TestRealServersLoseTheirMountsAsUsersSee(t *testing.T) {
	testenv.RequireFUSE(t)
	lab := testenv.NewLab(t)
	dir := lab.Dir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, spec := range specs(t, lab, dir) {
		server, err := fuseserver.New(spec)
		if err != nil {
			t.Fatal(err)
		}
		for _, onFD := range []bool{false, true} {
			placement := "mounts itself"
			if onFD {
				placement = "on /dev/fd/3 as nobody"
			}
			t.Run(name+" "+placement, func(t *testing.T) {
				mnt, err := os.MkdirTemp(dir, "mnt")
				if err != nil {
					t.Fatal(err)
				}
				os.Chmod(mnt, 0o755)
				var p *testenv.Proc
				started := time.Now()
				if onFD {
					p = startOnFD(t, lab, server, mnt)
				} else {
					p = lab.Start(name, fuseserver.Command(server, server.MountArgs(mnt)))
				}
				path := waitServing(t, name, mnt, p)
				// Figures for the record (go test -v), not asserted: how long until it served, what it holds.
				t.Logf("%s %s: served %q after %v, VmRSS %s", name, placement, fuseserver.Content,
					time.Since(started).Round(time.Millisecond), vmRSS(p.PID()))

				// A read in flight: the file is opened with O_DIRECT (the page cache holds what was read before: gcsfuse
				// and dummy-fuse keep it), the server stopped, and the read waits inside the kernel for it.
				f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_DIRECT, 0)
				if err != nil {
					t.Fatal(err)
				}
				// Closing sends FLUSH: only once the server is dead, or the test would wait for it forever.
				defer func() { p.Kill(); f.Close() }()
				p.Signal(syscall.SIGSTOP)
				// The signal is delivered on the way: a read sent before every thread stopped would be answered.
				testenv.Eventually(t, 5*time.Second, name+" stopped in every thread", func() bool { return testenv.Stopped(p.PID()) })
				result := make(chan error, 1)
				go func() {
					_, err := f.ReadAt(make([]byte, 64), 0)
					result <- err
				}()
				select {
				case err := <-result:
					t.Fatalf("a read through the stopped %s returned at once (%v): it did not reach the server", name, err)
				case <-time.After(300 * time.Millisecond):
				}
				p.Kill()
				select {
				case err := <-result:
					if !errors.Is(err, syscall.ECONNABORTED) {
						t.Errorf("the read in flight when %s was killed: %v, want ECONNABORTED", name, err)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("the read in flight was still blocked 10 s after %s was killed", name)
				}
				if _, err := testenv.ReadFile(t, path, 5*time.Second); !errors.Is(err, syscall.ENOTCONN) {
					t.Errorf("a read after %s died: %v, want ENOTCONN", name, err)
				}
			})
		}
	}
}

// waitServing waits until the server p called name serves the tree at mnt and returns the served file's path.
func waitServing(t *testing.T, name, mnt string, p *testenv.Proc) string {
	t.Helper()
	path := filepath.Join(mnt, fuseserver.ServedFile)
	testenv.Eventually(t, 20*time.Second, name+" serving "+path+" (its log: "+p.LogPath+")", func() bool {
		b, err := testenv.ReadFile(t, path, 5*time.Second)
		return err == nil && string(b) == fuseserver.Content
	})
	return path
}

// startOnFD mounts mnt with a new FUSE connection, as the plugin's sidecar mode does, and starts server on it
// as nobody with no copy of the descriptor left in this process.
func startOnFD(t *testing.T, lab *testenv.Lab, server fuseserver.Server, mnt string) *testenv.Proc {
	t.Helper()
	args, err := server.FDArgs()
	if err != nil {
		t.Fatal(err)
	}
	dev, err := fuseconn.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if err := fuseconn.Mount(dev, mnt, fuseconn.MountOptions{Name: server.Name(), Source: server.Name(), ReadOnly: true, AllowOther: true, DefaultPermissions: true}); err != nil {
		t.Fatal(err)
	}
	cmd := fuseserver.Command(server, args)
	cmd.ExtraFiles = []*os.File{dev}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	return lab.Start(server.Name()+" on fd", cmd)
}

// vmRSS is the resident memory of pid as /proc/<pid>/status says it.
func vmRSS(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return err.Error()
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// copyExecutable copies the executable src into dir (mode 0755), for a user who cannot reach src.
func copyExecutable(t *testing.T, src, dir string) string {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, filepath.Base(src))
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return dst
}

// TestSIGTERMOnAPassedDescriptor shows what each server does with SIGTERM when it serves a connection it did
// not mount (the sidecar placement, unprivileged), which is how kubelet stops a sidecar container: it cannot
// unmount, so it exits and leaves the mount dead (ENOTCONN) for the plugin to clean up. Whether it still serves
// meanwhile, how long it takes to exit and its exit code are logged: dummy-fuse and squashfuse stop serving at
// once; gcsfuse (jacobsa/fuse) keeps serving while it waits for an unmount that never comes, then exits 0.
func TestSIGTERMOnAPassedDescriptor(t *testing.T) {
	testenv.RequireFUSE(t)
	setup := testenv.NewLab(t)
	dir := setup.Dir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, spec := range specs(t, setup, dir) {
		server, err := fuseserver.New(spec)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			lab := testenv.NewLab(t)
			mnt := lab.Dir()
			os.Chmod(mnt, 0o755)
			p := startOnFD(t, lab, server, mnt)
			path := waitServing(t, name, mnt, p)
			start := time.Now()
			p.Signal(syscall.SIGTERM)
			time.Sleep(500 * time.Millisecond)
			_, during := testenv.ReadFile(t, path, 5*time.Second)
			t.Logf("%s on /dev/fd/3: a read 0.5 s after SIGTERM: %v", name, during)
			code := p.Wait(45 * time.Second)
			t.Logf("%s on /dev/fd/3: exited with code %d %v after SIGTERM", name, code, time.Since(start).Round(100*time.Millisecond))
			if _, err := testenv.ReadFile(t, path, 5*time.Second); !errors.Is(err, syscall.ENOTCONN) {
				t.Errorf("a read after %s stopped: %v, want ENOTCONN (the mount is left dead)", name, err)
			}
		})
	}
}
