// Package testenv gates tests that need root, /dev/fuse or a cluster, builds the project's binaries for tests
// that run them as real processes, and runs those processes (Lab) so that no test can hang on them.
//
// For an ordinary user such tests skip with a clear reason. With DFC_REQUIRE_PRIVILEGED=1 (set by CI) a missing
// requirement fails the test instead, so CI can never pass by skipping. Under `go test -short` every test that
// starts a process, builds a binary, mounts or makes a namespace skips (Integration): what is left are the unit
// tests, a contributor's fast loop.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// RequireEnv is the variable that turns privileged skips into failures.
const RequireEnv = "DFC_REQUIRE_PRIVILEGED"

// Module is the project's module path.
const Module = "github.com/dummy-fuse-csi/dummy-fuse-csi"

// Required reports whether privileged tests are mandatory in this run.
func Required() bool { return os.Getenv(RequireEnv) == "1" }

// SkipOrFail skips the test with reason, or fails it when privileged tests are mandatory.
func SkipOrFail(t testing.TB, reason string) {
	t.Helper()
	if Required() {
		t.Fatalf("%s (mandatory because %s=1)", reason, RequireEnv)
	}
	t.Skip(reason)
}

// FUSEProblem says why this process cannot mount FUSE filesystems, or returns "" when it can.
func FUSEProblem() string {
	if runtime.GOOS != "linux" {
		return "needs Linux"
	}
	if os.Geteuid() != 0 {
		return "needs root (mounts FUSE filesystems and bind mounts)"
	}
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		return fmt.Sprintf("needs /dev/fuse: %v", err)
	}
	f.Close()
	return ""
}

// Integration skips t under `go test -short`: it starts processes, builds binaries, mounts or makes namespaces
// (what says how). -short is asked for explicitly, so it skips even where privileged tests are mandatory.
func Integration(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test (" + what + "): skipped with -short")
	}
}

// RequireFUSE skips (or, in CI, fails) t unless it runs as root on Linux with a usable /dev/fuse; under -short
// it skips (Integration).
func RequireFUSE(t testing.TB) {
	t.Helper()
	Integration(t, "mounts FUSE filesystems")
	if p := FUSEProblem(); p != "" {
		SkipOrFail(t, "privileged test: "+p)
	}
}

// Build compiles the project's command at pkgDir (relative to the module root, e.g. "dummy-fuse") into a
// temporary directory of t and returns the binary's path. The Go build cache keeps repeated builds cheap.
func Build(t testing.TB, pkgDir string) string {
	t.Helper()
	Integration(t, "builds and runs "+pkgDir)
	out, err := build(t.TempDir(), pkgDir)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// build compiles the command at pkgDir into dir.
func build(dir, pkgDir string) (string, error) {
	out := filepath.Join(dir, filepath.Base(pkgDir))
	// The flags of hack/build.sh and the Makefile (CGO_ENABLED=0, -trimpath): the packages compiled for make build
	// serve the tests too.
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, Module+"/"+strings.TrimPrefix(pkgDir, "./"))
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", pkgDir, err, b)
	}
	return out, nil
}

// DescriptorsOf counts this process's descriptors that refer to what f refers to (the same
// /proc/self/fd link target, e.g. "pipe:[1234]"), f's own included. Unlike OpenFDs, it does not move when
// the runtime or another test closes an unrelated descriptor meanwhile (a finalizer did, once in a CI run),
// so a test can assert that a received copy of f was closed.
func DescriptorsOf(t testing.TB, f *os.File) int {
	t.Helper()
	want, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && target == want {
			n++
		}
	}
	return n
}

// OpenFDs counts the open descriptors of process pid (0: this one), to catch a leak.
func OpenFDs(t testing.TB, pid int) int {
	t.Helper()
	dir := "/proc/self/fd"
	if pid != 0 {
		dir = fmt.Sprintf("/proc/%d/fd", pid)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}
