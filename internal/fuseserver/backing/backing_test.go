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

// TestObject: gcsfuse's backing reads its bucket's objects without a mount (what the scenario rows that write
// check the storage with), a missing one is os.ErrNotExist, and a backing that cannot be read says so.
func TestObject(t *testing.T) {
	if _, err := (&backing.Backing{}).Object(context.Background(), "x"); !errors.Is(err, backing.ErrNoStorage) {
		t.Errorf("a backing without a readable storage: %v, want ErrNoStorage", err)
	}
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
	got, err := b.Object(ctx, fuseserver.ServedFile)
	if err != nil || string(got) != fuseserver.Content {
		t.Errorf("the served file from the bucket: %q, %v", got, err)
	}
	if _, err := b.Object(ctx, "no-such-object"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing object: %v, want os.ErrNotExist", err)
	}
}
