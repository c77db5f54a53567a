package testenv

import (
	"os"
	"sync"
	"testing"
)

// Binaries builds the project's commands for the tests of one package, each at most once: the first test that
// needs a command builds it, the others reuse the binary (or its build error). The zero value is ready; the
// package's TestMain calls Remove after m.Run.
type Binaries struct {
	mu    sync.Mutex
	dir   string
	built map[string]built
}

type built struct {
	path string
	err  error
}

// Path returns the binary of the command at pkgDir (as for Build), building it on first use.
func (b *Binaries) Path(t testing.TB, pkgDir string) string {
	t.Helper()
	Integration(t, "builds and runs "+pkgDir)
	b.mu.Lock()
	defer b.mu.Unlock()
	r, ok := b.built[pkgDir]
	if !ok {
		if b.dir == "" {
			if b.dir, r.err = os.MkdirTemp("", "dfc-bin"); r.err != nil {
				t.Fatal(r.err)
			}
		}
		r.path, r.err = build(b.dir, pkgDir)
		if b.built == nil {
			b.built = map[string]built{}
		}
		b.built[pkgDir] = r
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.path
}

// Remove deletes the binaries built so far.
func (b *Binaries) Remove() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dir != "" {
		_ = os.RemoveAll(b.dir)
	}
	b.dir, b.built = "", nil
}
