package backing_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver/backing"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// TestObject: the objectURL of gcsfuse's spec, with the settings of its backing, reads the bucket's objects
// without a mount (what the scenario rows that write check the storage with), and a missing one is
// os.ErrNotExist.
func TestObject(t *testing.T) {
	testenv.RealServer(t, "fake-gcs-server")
	log, err := os.Create(filepath.Join(t.TempDir(), "fake.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := backing.Prepare(ctx, fuseserver.Gcsfuse, backing.Env{Dir: t.TempDir(), Find: testenv.FindRealServer, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Stop()
	k, err := fuseserver.Lookup(fuseserver.Gcsfuse)
	if err != nil {
		t.Fatal(err)
	}
	read := func(name string) ([]byte, error) {
		u, err := k.ObjectURL(b.Opts, name)
		if err != nil {
			t.Fatal(err)
		}
		return backing.Read(ctx, u)
	}
	got, err := read(fuseserver.ServedFile)
	if err != nil || string(got) != fuseserver.Content {
		t.Errorf("the served file from the bucket: %q, %v", got, err)
	}
	if _, err := read("no-such-object"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing object: %v, want os.ErrNotExist", err)
	}
}
