package fuseserver_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// TestBadSpecsAreRefusedWithTheReason: a user's typo gets an error that says what is wrong and what would be
// right, never a server started with a silent default.
func TestBadSpecsAreRefusedWithTheReason(t *testing.T) {
	for name, tc := range map[string]struct {
		spec fuseserver.Spec
		want string
	}{
		"unknown server":         {fuseserver.Spec{Name: "sshfs", Path: "/bin/true"}, "known: dummy-fuse, gcsfuse, squashfuse"},
		"gcsfuse, no endpoint":   {fuseserver.Spec{Name: "gcsfuse", Path: "/bin/true"}, "needs its setting endpoint"},
		"gcsfuse, typo":          {fuseserver.Spec{Name: "gcsfuse", Path: "/bin/true", Opts: map[string]string{"endpont": "x"}}, `unknown setting "endpont" (known: endpoint, bucket, metadata-cache-ttl-secs)`},
		"gcsfuse, direct I/O":    {fuseserver.Spec{Name: "gcsfuse", Path: "/bin/true", Opts: map[string]string{"endpoint": "x"}, DirectIO: true}, "no direct-I/O"},
		"squashfuse, no image":   {fuseserver.Spec{Name: "squashfuse", Path: "/bin/true"}, "needs its setting image"},
		"squashfuse, bad image":  {fuseserver.Spec{Name: "squashfuse", Path: "/bin/true", Opts: map[string]string{"image": "/nonexistent"}}, "is not a regular file"},
		"dummy-fuse, a setting":  {fuseserver.Spec{Path: "/bin/true", Opts: map[string]string{"bucket": "b"}}, `unknown setting "bucket"`},
		"missing executable":     {fuseserver.Spec{Name: "gcsfuse", Path: "/nonexistent/gcsfuse"}, "no such file"},
		"not an executable file": {fuseserver.Spec{Path: "/etc/passwd"}, "is not an executable file"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := fuseserver.New(tc.spec)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New(%+v) = %v, want an error containing %q", tc.spec, err, tc.want)
			}
		})
	}
}

// TestKinds: only dummy-fuse takes a live connection over, and the others say why not.
func TestKinds(t *testing.T) {
	for _, n := range fuseserver.Names() {
		k, err := fuseserver.Lookup(n)
		if err != nil {
			t.Fatal(err)
		}
		if k.TakesOver != (n == fuseserver.DummyFuse) {
			t.Errorf("%s: TakesOver = %v", n, k.TakesOver)
		}
		if !k.TakesOver && k.WhyNot == "" {
			t.Errorf("%s cannot take over but does not say why", n)
		}
	}
	if k, err := fuseserver.Lookup(""); err != nil || k.Name != fuseserver.DummyFuse {
		t.Errorf("Lookup(\"\") = %v, %v; want dummy-fuse, the default", k.Name, err)
	}
}

// TestSpecArgsRoundTrip: what Args renders, Flags parses back (the plugin passes a spec to the processes it
// starts that way).
func TestSpecArgsRoundTrip(t *testing.T) {
	want := fuseserver.Spec{Name: "gcsfuse", Path: "/x/gcsfuse", Opts: map[string]string{"endpoint": "http://h:1/storage/v1/", "bucket": "b=c"},
		Extra: []string{"--log-severity=warning", "-o", "ro"}}
	var got fuseserver.Spec
	fl := newFlagSet()
	got.Flags(fl)
	if err := fl.Parse(want.Args()); err != nil {
		t.Fatal(err)
	}
	if got.Name != want.Name || got.Path != want.Path || len(got.Opts) != 2 || got.Opts["endpoint"] != want.Opts["endpoint"] || got.Opts["bucket"] != "b=c" ||
		!slices.Equal(got.Extra, want.Extra) {
		t.Fatalf("parsed %+v from %q, want %+v", got, want.Args(), want)
	}
	if err := fl.Parse([]string{"--fuse-server-opt=novalue"}); err == nil || !strings.Contains(err.Error(), "want key=value") {
		t.Errorf("a setting without '=': %v", err)
	}
	if err := fl.Parse([]string{"--fuse-server-arg="}); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("an empty extra argument: %v", err)
	}
}

// TestExtraArgsComeFirst: the operator's extra arguments start every command line of a server, before its own
// options and operands (where every server takes options), and only a server given some has any.
func TestExtraArgsComeFirst(t *testing.T) {
	exe := filepath.Join(t.TempDir(), "dummy-fuse")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	plain, err := fuseserver.New(fuseserver.Spec{Path: exe})
	if err != nil {
		t.Fatal(err)
	}
	extra, err := fuseserver.New(fuseserver.Spec{Path: exe, Extra: []string{"--workers=2"}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := extra.MountArgs("/mnt"), append([]string{"--workers=2"}, plain.MountArgs("/mnt")...); !slices.Equal(got, want) {
		t.Errorf("MountArgs = %q, want %q", got, want)
	}
	got, err := extra.FDArgs()
	plainFD, _ := plain.FDArgs()
	if want := append([]string{"--workers=2"}, plainFD...); err != nil || !slices.Equal(got, want) {
		t.Errorf("FDArgs = %q, %v; want %q", got, err, want)
	}
	if slices.Contains(plain.MountArgs("/mnt"), "--workers=2") || extra.Name() != plain.Name() || extra.Path() != exe {
		t.Errorf("the extra arguments leaked into a server without them, or changed its name or path")
	}
}

// TestLibfuse2ServerNeverGetsADescriptorPath: a libfuse2 program takes /dev/fd/3 for a directory and mounts a
// new filesystem over /dev/fuse, so the sidecar placement refuses it; a libfuse3 program gets the path.
// Debian 12's bindfs is libfuse2 (it is only inspected here, never run).
func TestLibfuse2ServerNeverGetsADescriptorPath(t *testing.T) {
	testenv.Integration(t, "inspects Debian's bindfs and squashfuse")
	image := t.TempDir() + "/img"
	if err := writeFile(image); err != nil {
		t.Fatal(err)
	}
	bindfs := testenv.RealServer(t, "bindfs")
	s, err := fuseserver.New(fuseserver.Spec{Name: fuseserver.Squashfuse, Path: bindfs, Opts: map[string]string{"image": image}})
	if err != nil {
		t.Fatal(err)
	}
	if args, err := s.FDArgs(); err == nil || !strings.Contains(err.Error(), "libfuse2") {
		t.Fatalf("FDArgs of libfuse2 %s = %q, %v; want a refusal naming libfuse2", bindfs, args, err)
	}
	if args := s.MountArgs("/mnt"); args[len(args)-1] != "/mnt" {
		t.Errorf("MountArgs = %q: a libfuse2 server may still mount a directory itself", args)
	}
	s, err = fuseserver.New(fuseserver.Spec{Name: fuseserver.Squashfuse, Path: testenv.RealServer(t, "squashfuse"), Opts: map[string]string{"image": image}})
	if err != nil {
		t.Fatal(err)
	}
	if args, err := s.FDArgs(); err != nil || args[len(args)-1] != fuseserver.FDPath {
		t.Fatalf("FDArgs of libfuse3 squashfuse = %q, %v; want it to end with %s", args, err, fuseserver.FDPath)
	}
}
