package fuseserver_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
)

// fakeExecutable writes an executable script called name into a new directory and returns its path: New needs
// an executable, and a script is never inspected for libfuse2.
func fakeExecutable(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// writeSpec writes a server spec file and returns its path.
func writeSpec(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestBuiltinCommandLines: the built-in specs give each server the command line it had when it was Go code,
// with settings filled in, defaults applied, and an argument whose optional setting is unset left out.
func TestBuiltinCommandLines(t *testing.T) {
	image := writeSpec(t, "img", "not a real image: only a regular file is checked")
	for name, tc := range map[string]struct {
		spec      fuseserver.Spec
		mount, fd []string
		env       []string
	}{
		"dummy-fuse": {spec: fuseserver.Spec{}, mount: []string{"/mnt"}, fd: []string{"/dev/fd/3"}, env: []string{"GOMAXPROCS=1"}},
		"dummy-fuse, direct I/O, extra": {spec: fuseserver.Spec{DirectIO: true, Extra: []string{"--x"}},
			mount: []string{"--x", "--direct-io", "/mnt"}, fd: []string{"--x", "--direct-io", "/dev/fd/3"}, env: []string{"GOMAXPROCS=1"}},
		"gcsfuse, defaults": {spec: fuseserver.Spec{Name: "gcsfuse", Opts: map[string]string{"endpoint": "http://e/"}},
			mount: []string{"--foreground", "--anonymous-access", "--implicit-dirs", "--enable-hns=false", "--enable-atomic-rename-object=false", "-o", "allow_other", "--custom-endpoint", "http://e/", fuseserver.DefaultBucket, "/mnt"}},
		"gcsfuse, every setting": {spec: fuseserver.Spec{Name: "gcsfuse", Opts: map[string]string{"endpoint": "http://e/", "bucket": "b", "metadata-cache-ttl-secs": "0"}},
			mount: []string{"--foreground", "--anonymous-access", "--implicit-dirs", "--enable-hns=false", "--enable-atomic-rename-object=false", "-o", "allow_other", "--custom-endpoint", "http://e/", "--metadata-cache-ttl-secs=0", "b", "/mnt"}},
		"squashfuse": {spec: fuseserver.Spec{Name: "squashfuse", Opts: map[string]string{"image": image}},
			mount: []string{"-f", "-o", "allow_other", image, "/mnt"}},
	} {
		t.Run(name, func(t *testing.T) {
			tc.spec.Path = fakeExecutable(t, "server")
			s, err := fuseserver.New(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			if got := s.MountArgs("/mnt"); !slices.Equal(got, tc.mount) {
				t.Errorf("MountArgs = %q, want %q", got, tc.mount)
			}
			fd, err := s.FDArgs()
			want := tc.fd
			if want == nil {
				want = append(slices.Clone(tc.mount[:len(tc.mount)-1]), fuseserver.FDPath)
			}
			if err != nil || !slices.Equal(fd, want) {
				t.Errorf("FDArgs = %q, %v; want %q", fd, err, want)
			}
			if !slices.Equal(s.Env(), tc.env) {
				t.Errorf("Env = %q, want %q", s.Env(), tc.env)
			}
		})
	}
}

// TestDefaultBucketIsTheSpecs: the fake GCS's bucket (package backing) is the one gcsfuse's spec mounts by default.
func TestDefaultBucketIsTheSpecs(t *testing.T) {
	k, err := fuseserver.Lookup(fuseserver.Gcsfuse)
	if err != nil {
		t.Fatal(err)
	}
	if want := "bucket=<value> (default " + fuseserver.DefaultBucket + ")"; !strings.Contains(k.Settings, want) {
		t.Errorf("gcsfuse's settings %q do not give bucket the default %s", k.Settings, fuseserver.DefaultBucket)
	}
}

// TestSpecFile: a user's server described in a file, no Go code: found by its path, run as it says, and passed
// on by that path to the processes the plugin starts.
func TestSpecFile(t *testing.T) {
	exe := fakeExecutable(t, "myfs")
	file := writeSpec(t, "myfs.yaml", `# a user's server
name: myfs
executable: `+exe+`
args: ["-f", "--remote={remote}", "--cache={cache}", "{mountpoint}"]
servesFD: true
whyNot: it answers a connection it did not initialise with EIO
env: ["MYFS_LOG=debug"]
settings:
  - {name: remote, required: true}
  - {name: cache}
`)
	s, err := fuseserver.New(fuseserver.Spec{Name: file, Opts: map[string]string{"remote": "s3:b"}})
	if err != nil {
		t.Fatal(err)
	}
	if s.Name() != "myfs" || s.Path() != exe || s.Kind().TakesOver {
		t.Errorf("server %q at %q (takes over: %v), want myfs at %s, not taking over", s.Name(), s.Path(), s.Kind().TakesOver, exe)
	}
	if got, want := s.MountArgs("/m"), []string{"-f", "--remote=s3:b", "/m"}; !slices.Equal(got, want) {
		t.Errorf("MountArgs = %q, want %q", got, want)
	}
	if !slices.Equal(s.Env(), []string{"MYFS_LOG=debug"}) {
		t.Errorf("Env = %q", s.Env())
	}
	if args := (fuseserver.Spec{Name: file}).Args(); !slices.Contains(args, "--fuse-server="+file) {
		t.Errorf("Args = %q: the spec file's path is not passed on", args)
	}
	if _, err := fuseserver.New(fuseserver.Spec{Name: file}); err == nil || !strings.Contains(err.Error(), "needs its setting remote") {
		t.Errorf("without its required setting: %v", err)
	}
	if _, err := fuseserver.New(fuseserver.Spec{Name: file, Opts: map[string]string{"remote": "r"}, DirectIO: true}); err == nil || !strings.Contains(err.Error(), "directIOArgs") {
		t.Errorf("direct I/O without directIOArgs: %v", err)
	}
	childOnly := writeSpec(t, "child.yaml", "name: c\nexecutable: "+exe+"\nargs: [\"{mountpoint}\"]\nwhyNot: EIO\n")
	s, err = fuseserver.New(fuseserver.Spec{Name: childOnly})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.FDArgs(); err == nil || !strings.Contains(err.Error(), "servesFD: false") {
		t.Errorf("FDArgs of a server whose spec says it cannot serve a passed connection: %v", err)
	}
	if _, err := s.FusermountArgs("/m"); err == nil || !strings.Contains(err.Error(), "fusermount: true") {
		t.Errorf("FusermountArgs of a server whose spec says it never asks fusermount: %v", err)
	}
	asks := writeSpec(t, "asks.yaml", "name: a\nexecutable: "+exe+"\nargs: [\"-f\", \"{mountpoint}\"]\nwhyNot: EIO\nfusermount: true\nfusermountArgs: [\"-o\", \"auto_unmount\"]\n")
	s, err = fuseserver.New(fuseserver.Spec{Name: asks, Extra: []string{"-d"}})
	if err != nil {
		t.Fatal(err)
	}
	if !s.Kind().Fusermount() || s.Kind().ServesFD() {
		t.Errorf("kind of a server that asks fusermount: %+v", s.Kind())
	}
	if got, err := s.FusermountArgs("/m"); err != nil || !slices.Equal(got, []string{"-d", "-o", "auto_unmount", "-f", "/m"}) {
		t.Errorf("FusermountArgs = %q, %v; want the operator's first, then fusermountArgs, then args", got, err)
	}
	if got := s.MountArgs("/m"); !slices.Equal(got, []string{"-d", "-f", "/m"}) {
		t.Errorf("MountArgs = %q: fusermountArgs are for a passed connection only", got)
	}
}

// TestBadSpecFilesNameTheFileAndTheField: every mistake in a spec is reported with the file and the field, and
// all of them at once.
func TestBadSpecFilesNameTheFileAndTheField(t *testing.T) {
	for name, tc := range map[string]struct{ body, want string }{
		"not YAML":                   {"name: [", "myfs.yaml"},
		"misspelt field":             {"name: x\nexecutable: x\nargz: [\"{mountpoint}\"]\nwhyNot: EIO\n", `unknown field "argz"`},
		"no executable":              {"name: x\nargs: [\"{mountpoint}\"]\nwhyNot: EIO\n", "executable: missing"},
		"relative executable":        {"name: x\nexecutable: bin/x\nargs: [\"{mountpoint}\"]\nwhyNot: EIO\n", "not a relative one"},
		"no mountpoint":              {"name: x\nexecutable: x\nargs: [\"-f\"]\nwhyNot: EIO\n", "{mountpoint} must appear exactly once (found 0)"},
		"two mountpoints":            {"name: x\nexecutable: x\nargs: [\"{mountpoint}\", \"{mountpoint}\"]\nwhyNot: EIO\n", "(found 2)"},
		"unknown placeholder":        {"name: x\nexecutable: x\nargs: [\"--r={remote}\", \"{mountpoint}\"]\nwhyNot: EIO\n", `args[0]: "--r={remote}" names {remote}, which is neither`},
		"bad name":                   {"name: My FS\nexecutable: x\nargs: [\"{mountpoint}\"]\nwhyNot: EIO\n", `name: "My FS"`},
		"no whyNot":                  {"name: x\nexecutable: x\nargs: [\"{mountpoint}\"]\n", "whyNot: missing"},
		"takes over, no fd":          {"name: x\nexecutable: x\nargs: [\"{mountpoint}\"]\ntakesOver: true\n", "takesOver: a server that takes"},
		"bad env":                    {"name: x\nexecutable: x\nargs: [\"{mountpoint}\"]\nwhyNot: EIO\nenv: [\"NOVALUE\"]\n", `env[0]: "NOVALUE"`},
		"duplicate setting":          {"name: x\nexecutable: x\nargs: [\"{mountpoint}\"]\nwhyNot: EIO\nsettings: [{name: a}, {name: a}]\n", `settings[1].name: "a" twice`},
		"fusermountArgs alone":       {"name: x\nexecutable: x\nargs: [\"{mountpoint}\"]\nwhyNot: EIO\nfusermountArgs: [\"-o\", \"auto_unmount\"]\n", "fusermountArgs: given for a server that does not ask"},
		"fusermountArgs placeholder": {"name: x\nexecutable: x\nargs: [\"{mountpoint}\"]\nwhyNot: EIO\nfusermount: true\nfusermountArgs: [\"{mountpoint}\"]\n", "fusermountArgs[0]"},
		"required with default":      {"name: x\nexecutable: x\nargs: [\"{mountpoint}\"]\nwhyNot: EIO\nsettings: [{name: a, required: true, default: b}]\n", "one or the other"},
		"objectURL without object":   {"name: x\nexecutable: x\nargs: [\"{mountpoint}\"]\nwhyNot: EIO\nobjectURL: http://h/b\n", "objectURL: {object} must appear exactly once (found 0)"},
		"objectURL unknown setting":  {"name: x\nexecutable: x\nargs: [\"{mountpoint}\"]\nwhyNot: EIO\nobjectURL: \"{url}/{object}\"\n", `names {url}, which is neither {object} nor a setting`},
		"durableAt unknown":          {"name: x\nexecutable: x\nargs: [\"{mountpoint}\"]\nwhyNot: EIO\ndurableAt: fsync\n", `durableAt: "fsync": want close or later`},
		"setting called object":      {"name: x\nexecutable: x\nargs: [\"{mountpoint}\"]\nwhyNot: EIO\nsettings: [{name: object}]\n", "a placeholder of the spec's own"},
	} {
		t.Run(name, func(t *testing.T) {
			file := writeSpec(t, "myfs.yaml", tc.body)
			_, err := fuseserver.Lookup(file)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), file) {
				t.Fatalf("Lookup(%s) = %v; want an error naming the file and containing %q", name, err, tc.want)
			}
		})
	}
	_, err := fuseserver.Lookup(writeSpec(t, "two.yaml", "name: x\nargs: [\"-f\"]\n"))
	for _, want := range []string{"executable: missing", "{mountpoint} must appear", "whyNot: missing"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("a spec with three mistakes: %v; want every one reported, %q among them", err, want)
		}
	}
	if _, err := fuseserver.Lookup("/nonexistent/spec.yaml"); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("a spec file that does not exist: %v", err)
	}
}

// TestObjectURL: a spec's objectURL takes the settings' values and the stored file's name escaped as one path
// segment; a setting it names without a value, and a spec without objectURL, are errors that say so.
func TestObjectURL(t *testing.T) {
	k, err := fuseserver.Lookup(writeSpec(t, "s3.yaml", "name: s3\nexecutable: x\nargs: [\"{mountpoint}\"]\nwhyNot: EIO\n"+
		"objectURL: \"{url}/{bucket}/{object}\"\nsettings: [{name: url}, {name: bucket, default: dfc}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !k.StoresObjects() {
		t.Error("StoresObjects() = false for a spec with objectURL")
	}
	if got, err := k.ObjectURL(map[string]string{"url": "http://10.0.0.1:9000"}, "a b?.log"); err != nil || got != "http://10.0.0.1:9000/dfc/a%20b%3F.log" {
		t.Errorf("ObjectURL = %q, %v; want the settings filled in and the name escaped", got, err)
	}
	if _, err := k.ObjectURL(nil, "x"); err == nil || !strings.Contains(err.Error(), "url") {
		t.Errorf("ObjectURL without its url setting: %v; want an error naming it", err)
	}
	g, err := fuseserver.Lookup(fuseserver.Gcsfuse)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := g.ObjectURL(map[string]string{"endpoint": "http://127.0.0.1:4443/storage/v1/"}, "w.log"); err != nil ||
		got != "http://127.0.0.1:4443/storage/v1/b/"+fuseserver.DefaultBucket+"/o/w.log?alt=media" {
		t.Errorf("gcsfuse's ObjectURL = %q, %v; want its bucket's JSON API download URL", got, err)
	}
	d, err := fuseserver.Lookup(fuseserver.DummyFuse)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.ObjectURL(nil, "x"); d.StoresObjects() || err == nil || !strings.Contains(err.Error(), "objectURL") {
		t.Errorf("dummy-fuse, which stores nothing: StoresObjects %t, ObjectURL error %v", d.StoresObjects(), err)
	}
	// Where writes are durable: gcsfuse at the close; a spec that says later is told apart.
	later, err := fuseserver.Lookup(writeSpec(t, "later.yaml", "name: later\nexecutable: x\nargs: [\"{mountpoint}\"]\nwhyNot: EIO\ndurableAt: later\n"))
	if err != nil {
		t.Fatal(err)
	}
	if g.DurableLater() || k.DurableLater() || !later.DurableLater() {
		t.Errorf("DurableLater: gcsfuse %t, a spec without durableAt %t, one with durableAt later %t", g.DurableLater(), k.DurableLater(), later.DurableLater())
	}
}
