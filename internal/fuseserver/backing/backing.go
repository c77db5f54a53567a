// Package backing makes what the real FUSE servers read: the one-file tree every server serves
// (fuseserver.ServedFile holding fuseserver.Content), as a squashfs image for squashfuse, as a bucket of a
// fake GCS server for gcsfuse and as one of a fake S3 (rclone serve s3) for s3fs. The local scenario backend and the tests use it; the kube backend bakes the same
// into its image.
package backing

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
)

// WriteTree writes the served tree into dir (created when missing).
func WriteTree(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, fuseserver.ServedFile), []byte(fuseserver.Content), 0o644)
}

// SquashfsImage writes a squashfs image of the served tree to image, with Debian's mksquashfs.
func SquashfsImage(ctx context.Context, image string) error {
	tree, err := os.MkdirTemp("", "dfc-tree")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tree)
	if err := WriteTree(tree); err != nil {
		return err
	}
	// -noappend: a stale image at that path is replaced, not extended; -all-root: files owned by root, not by
	// whoever ran the test.
	out, err := exec.CommandContext(ctx, "mksquashfs", tree, image, "-noappend", "-all-root", "-quiet").CombinedOutput()
	if err != nil {
		return fmt.Errorf("mksquashfs (Debian's squashfs-tools) %s: %w: %s", image, err, out)
	}
	return nil
}

// FakeGCS is a running fake-gcs-server whose in-memory bucket fuseserver.DefaultBucket holds the served tree.
type FakeGCS struct {
	// Endpoint is the JSON API URL to give gcsfuse (its endpoint setting).
	Endpoint string
	*fake
}

// StartFakeGCS starts the fake-gcs-server executable bin on 127.0.0.1 (a free port), logging to log, and waits
// (bounded by ctx) until it lists the bucket.
func StartFakeGCS(ctx context.Context, bin string, log *os.File) (*FakeGCS, error) {
	data, err := os.MkdirTemp("", "dfc-gcs")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(data) // the memory backend loads it at start
	if err := WriteTree(filepath.Join(data, fuseserver.DefaultBucket)); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	host := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	// -public-host: gcsfuse downloads objects with path-style URLs (/<bucket>/<object>) from the endpoint's host;
	// the fake serves those only for requests to its public host.
	cmd := exec.Command(bin, "-backend", "memory", "-scheme", "http", "-host", "127.0.0.1", "-port", strconv.Itoa(port),
		"-public-host", host, "-data", data, "-log-level", "warn")
	cmd.Stdout, cmd.Stderr = log, log
	endpoint := "http://" + host + "/storage/v1/"
	fk, err := startFake(ctx, "fake-gcs-server", cmd, endpoint+"b/"+fuseserver.DefaultBucket+"/o", true)
	if err != nil {
		return nil, err
	}
	return &FakeGCS{Endpoint: endpoint, fake: fk}, nil
}

// Object reads object name of the fake's bucket through the JSON API, not through any mount: what a
// writer's data became once the server uploaded it. A missing object is os.ErrNotExist.
func (g *FakeGCS) Object(ctx context.Context, name string) ([]byte, error) {
	return GCSObject(ctx, g.Endpoint, name)
}

// GCSObject reads object name of the bucket behind gcsfuse at the JSON API endpoint (gcsfuse's endpoint
// setting), at the objectURL of gcsfuse's spec.
func GCSObject(ctx context.Context, endpoint, name string) ([]byte, error) {
	k, err := fuseserver.Lookup(fuseserver.Gcsfuse)
	if err != nil {
		return nil, err
	}
	u, err := k.ObjectURL(map[string]string{"endpoint": endpoint}, name)
	if err != nil {
		return nil, err
	}
	return Read(ctx, u)
}

// Read GETs a stored object at u, a server spec's objectURL (fuseserver.Kind.ObjectURL), without credentials:
// its data, os.ErrNotExist for a 404, else an error with the status.
func Read(ctx context.Context, u string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("storage: %w", err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return io.ReadAll(resp.Body)
	case http.StatusNotFound:
		return nil, fmt.Errorf("GET %s: %w", u, os.ErrNotExist)
	}
	return nil, fmt.Errorf("storage: GET %s: %s", u, resp.Status)
}

// fake is a fake service's process: started, waited for until it answers, stopped by its PID.
type fake struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

// startFake starts cmd and waits (bounded by ctx) until url answers (with 200 OK when ok200), or fails, killing
// it, when it exits first or ctx ends.
func startFake(ctx context.Context, name string, cmd *exec.Cmd, url string, ok200 bool) (*fake, error) {
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s (%s): %w", name, cmd.Path, err)
	}
	f := &fake{name: name, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(f.done) }()
	client := &http.Client{Timeout: time.Second}
	for {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if !ok200 || resp.StatusCode == http.StatusOK {
				return f, nil
			}
		}
		select {
		case <-f.done:
			return nil, fmt.Errorf("%s (pid %d) exited before it served %s", name, f.PID(), url)
		case <-ctx.Done():
			f.Stop()
			return nil, fmt.Errorf("%s (pid %d) did not serve %s: %w (last: %v)", name, f.PID(), url, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// PID is the fake's process.
func (f *fake) PID() int { return f.cmd.Process.Pid }

// Pause stops the fake (SIGSTOP): a read that needs it is in flight inside gcsfuse until Resume.
func (f *FakeGCS) Pause() error { return f.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume continues a paused fake.
func (f *FakeGCS) Resume() error { return f.cmd.Process.Signal(syscall.SIGCONT) }

// Stop kills the fake by its PID and waits for it (bounded: it serves no FUSE mount, nothing can hold it).
func (f *fake) Stop() {
	_ = f.cmd.Process.Kill()
	select {
	case <-f.done:
	case <-time.After(10 * time.Second):
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	addr, ok := l.Addr().(*net.TCPAddr)
	if !ok {
		return 0, errors.New("no TCP address")
	}
	return addr.Port, nil
}

// Backing is what one real server of a run reads, ready: the settings that point the server at it.
type Backing struct {
	// Opts are the server's --fuse-server-opt settings.
	Opts map[string]string
	stop func()
}

// Stop ends what Prepare started (nothing for a file).
func (b *Backing) Stop() {
	if b.stop != nil {
		b.stop()
	}
}

// Env is where Prepare puts what it makes and how it finds executables.
type Env struct {
	// Dir holds what it makes (the image); it must be readable by the server's user.
	Dir string
	// Find returns the executable called name ("" when there is none).
	Find func(name string) string
	// Log receives the output of what it starts.
	Log *os.File
}

// preparers make the backing of a server by its name; a server that reads nothing (dummy-fuse) has none.
var preparers = map[string]func(ctx context.Context, env Env) (*Backing, error){
	fuseserver.Gcsfuse: func(ctx context.Context, env Env) (*Backing, error) {
		bin := env.Find("fake-gcs-server")
		if bin == "" {
			return nil, errors.New("gcsfuse reads a fake GCS server: fake-gcs-server not found (make servers puts it in bin/servers)")
		}
		f, err := StartFakeGCS(ctx, bin, env.Log)
		if err != nil {
			return nil, err
		}
		// A 1 s metadata TTL (gcsfuse's default is 60 s) lets a dead gcsfuse show within the bounds the catalog's
		// rows wait; with the default, the kernel answers stat and cached reads for up to a minute after it died.
		return &Backing{Opts: map[string]string{"endpoint": f.Endpoint, "metadata-cache-ttl-secs": "1"}, stop: f.Stop}, nil
	},
	fuseserver.Squashfuse: func(ctx context.Context, env Env) (*Backing, error) {
		image := filepath.Join(env.Dir, "tree.squashfs")
		if err := SquashfsImage(ctx, image); err != nil {
			return nil, err
		}
		return &Backing{Opts: map[string]string{"image": image}}, nil
	},
}

// Prepare makes (or starts) what the server called name reads; nil for a server that reads nothing.
func Prepare(ctx context.Context, name string, env Env) (*Backing, error) {
	p, ok := preparers[name]
	if !ok {
		return &Backing{}, nil
	}
	return p(ctx, env)
}

// FakeS3 is a running fake S3 (rclone's `serve s3` over a directory) whose bucket S3Bucket holds the served
// tree, and the credentials file s3fs reads for it (docs/servers/s3fs.yaml).
type FakeS3 struct {
	// URL is the endpoint to give s3fs (its url setting); Passwd is its passwd-file setting.
	URL, Passwd string
	// Bucket is the directory that is the bucket: what s3fs uploaded is there, read without any mount.
	Bucket string
	*fake
}

// Object reads object name of the bucket (a missing one is os.ErrNotExist).
func (f *FakeS3) Object(name string) ([]byte, error) {
	return os.ReadFile(filepath.Join(f.Bucket, name))
}

// S3Bucket is the bucket of a FakeS3 (the s3fs spec's default), and s3Key its access key and secret.
const (
	S3Bucket = "dfc"
	s3Key    = "dfcaccesskey:dfcsecretkey"
)

// StartFakeS3 starts the rclone executable bin serving dir/s3 on 127.0.0.1 (a free port), logging to log, writes
// the credentials file dir/s3.passwd owned by uid (s3fs refuses one that others may read, and must read it as
// the user it runs as), and waits (bounded by ctx) until the fake answers.
func StartFakeS3(ctx context.Context, bin, dir string, uid int, log *os.File) (*FakeS3, error) {
	root := filepath.Join(dir, "s3")
	if err := WriteTree(filepath.Join(root, S3Bucket)); err != nil {
		return nil, err
	}
	passwd := filepath.Join(dir, "s3.passwd")
	if err := os.WriteFile(passwd, []byte(s3Key+"\n"), 0o600); err != nil {
		return nil, err
	}
	if err := os.Chown(passwd, uid, uid); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	key, secret, _ := strings.Cut(s3Key, ":")
	cmd := exec.Command(bin, "serve", "s3", root, "--addr="+addr, "--auth-key="+key+","+secret)
	cmd.Env = append(os.Environ(), "RCLONE_CONFIG=/dev/null") // a local directory needs no config file
	cmd.Stdout, cmd.Stderr = log, log
	url := "http://" + addr
	fk, err := startFake(ctx, "rclone serve s3", cmd, url+"/", false)
	if err != nil {
		return nil, err
	}
	return &FakeS3{URL: url, Passwd: passwd, Bucket: filepath.Join(root, S3Bucket), fake: fk}, nil
}
