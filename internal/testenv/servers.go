package testenv

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver/backing"
)

// ServersDirEnv names a directory holding the real FUSE servers; by default the module's bin/servers, where
// `make servers` puts them.
const ServersDirEnv = "DFC_SERVERS_DIR"

// RealServer returns the executable called name (gcsfuse, fake-gcs-server, squashfuse, mksquashfs…) from
// $DFC_SERVERS_DIR, the module's bin/servers or $PATH; it skips t (fails it where privileged tests are
// mandatory) when there is none, saying how to get it.
func RealServer(t testing.TB, name string) string {
	t.Helper()
	Integration(t, "runs the real FUSE server "+name)
	if p := FindRealServer(name); p != "" {
		return p
	}
	SkipOrFail(t, "needs "+name+": run `make servers` (gcsfuse and fake-gcs-server from the Go module proxy, squashfuse and squashfs-tools from Debian)")
	return ""
}

// FindRealServer is RealServer without a test: the path, or "".
func FindRealServer(name string) string {
	var modBin string
	if root := moduleRoot(); root != "" {
		modBin = filepath.Join(root, "bin", "servers")
	}
	return fuseserver.Find(name, os.Getenv(ServersDirEnv), modBin)
}

// moduleRoot is the directory holding the module's go.mod, found upwards from the working directory (a test
// runs in its package's directory), or "".
func moduleRoot() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// FakeGCS starts the fake GCS server (fake-gcs-server of `make servers`) with its log in dir, stopped when t
// ends (its Endpoint is gcsfuse's); a start that fails fails t with the server's log.
func FakeGCS(ctx context.Context, t testing.TB, dir string) *backing.FakeGCS {
	t.Helper()
	log, err := os.Create(filepath.Join(dir, "fake-gcs-server.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	gcs, err := backing.StartFakeGCS(ctx, RealServer(t, "fake-gcs-server"), log)
	if err != nil {
		out, _ := os.ReadFile(log.Name())
		t.Fatalf("%v; its log:\n%s", err, out)
	}
	t.Cleanup(gcs.Stop)
	return gcs
}
