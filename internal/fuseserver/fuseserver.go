// Package fuseserver runs the FUSE server programs the testbed uses: dummy-fuse, its own, real ones users run
// (gcsfuse against a fake GCS, squashfuse) and any other a user describes in a server spec file (Definition).
// Every server is such a spec, the built-in ones too (specs/*.yaml): a FUSE mode asks a Server for the command
// line that mounts a directory itself (child placement) or that serves a connection already mounted and passed
// as descriptor 3 (/dev/fd/3), and whether it can take over a connection another process initialised (keeper
// placement). Nothing else knows a server's flags.
package fuseserver

import (
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// The built-in servers' names (specs/*.yaml). DummyFuse, the testbed's own, is the default.
const (
	DummyFuse  = "dummy-fuse"
	Gcsfuse    = "gcsfuse"
	Squashfuse = "squashfuse"
)

// DefaultBucket is the bucket gcsfuse mounts unless its bucket setting names another (specs/gcsfuse.yaml).
const DefaultBucket = "dummy-fuse-csi"

// Every server serves the same tree: ServedFile holding Content (what dummy-fuse serves, and what the bucket
// and image of the real servers hold, package backing), so that a workload reads the same from each.
const (
	ServedFile = "dummy-file.txt"
	Content    = "Hello world!\n"
)

// FD is the descriptor number at which a server run on a pre-mounted connection finds it (ExtraFiles[0]).
const FD = 3

// FDPath is the mountpoint argument that makes a server serve descriptor FD instead of mounting: libfuse ≥ 3.3
// (fuse_session_mount), jacobsa/fuse (gcsfuse) and go-fuse ≥ 2.2 understand it.
var FDPath = fmt.Sprintf("/dev/fd/%d", FD)

// Spec names a server and its settings, as the command line gives them.
type Spec struct {
	// Name is the server (--fuse-server): a built-in server's name or the path of a server spec file (see
	// Definition); empty means DummyFuse. A path is passed on as it is to the processes the plugin starts.
	Name string
	// Path is its executable; empty: the spec's executable (a name looked up in Dirs, beside the running
	// executable, else in $PATH).
	Path string
	// Dirs are searched first for an executable the spec names without a path (e.g. make servers' bin/servers).
	Dirs []string
	// Opts are the server's own settings (--fuse-server-opt key=value), e.g. gcsfuse's endpoint.
	Opts map[string]string
	// DirectIO asks for reads that bypass the page cache (dummy-fuse --direct-io); a server that cannot is refused.
	DirectIO bool
	// Extra are arguments given before the server's own (--fuse-server-arg), e.g. a flag of its next build. They
	// are the operator's, passed as they are: a server that refuses one fails to start, and says why.
	Extra []string
}

// Server is one configured FUSE server program.
type Server interface {
	// Name is the server's name (its spec's).
	Name() string
	// Kind is what its spec says it can do.
	Kind() Kind
	// Path is the executable.
	Path() string
	// MountArgs are the arguments (without the executable) that mount dir and serve it in the foreground until
	// the process is killed or the mount goes away.
	MountArgs(dir string) []string
	// FDArgs are the arguments that serve the connection passed as descriptor FD, already mounted by someone
	// else; an error when the server cannot (a libfuse2 server would mount a new filesystem on /dev/fd/3).
	FDArgs() ([]string, error)
	// FusermountArgs are the arguments that make the server ask fusermount for a connection to serve on dir, a
	// directory nothing is mounted on: run with a Handoff's environment, it gets descriptor FD, already mounted
	// by someone else, from the stand-in (fusermount.go); an error when its spec says it never asks.
	FusermountArgs(dir string) ([]string, error)
	// Env is added to the process's environment.
	Env() []string
}

// Kind is what is known of a server before it is configured: its spec.
type Kind struct {
	Name string
	// TakesOver says whether the server can take over a connection another process initialised (INIT replay),
	// which the keeper placement needs; WhyNot says what a server that cannot does with such a connection.
	TakesOver bool
	WhyNot    string
	// Settings describes its --fuse-server-opt keys.
	Settings string
	def      *Definition
}

// ServesFD reports whether the spec says the server serves a connection someone else mounted (/dev/fd/N).
func (k Kind) ServesFD() bool { return k.def.ServesFD }

// Fusermount reports whether the spec says the server asks fusermount for its connection when it may not
// mount, so that it can serve one someone else mounted through the stand-in (FusermountArgs).
func (k Kind) Fusermount() bool { return k.def.Fusermount }

// StoresObjects reports whether the spec says where what the server stores can be read without its mount
// (objectURL): the rows that write need it.
func (k Kind) StoresObjects() bool { return k.def.ObjectURL != "" }

// DurableLater reports whether the spec says a file written through the server reaches its storage only some
// time after its close (durableAt: later), so that a close(2) or fsync(2) that returned 0 does not mean it is
// there.
func (k Kind) DurableLater() bool { return k.def.DurableAt == DurableLater }

// ObjectURL is the URL at which a plain HTTP GET reads the stored file name (at the top of the volume) of the
// server run with settings opts, without any mount (the spec's objectURL); an error when the spec has none or
// a setting it names has no value.
func (k Kind) ObjectURL(opts map[string]string, name string) (string, error) {
	vals, err := k.def.values(opts)
	if err != nil {
		return "", fmt.Errorf("FUSE server %s: %w", k.Name, err)
	}
	return k.def.objectURL(vals, name)
}

// UpgradeArg is the argument that tells the server's next build from the running one in the upgrade rows ("":
// its spec gives none).
func (k Kind) UpgradeArg() string { return k.def.UpgradeArg }

func kindOf(d *Definition) Kind {
	return Kind{Name: d.Name, TakesOver: d.TakesOver, WhyNot: d.WhyNot, Settings: d.settingsHelp(), def: d}
}

// kinds are the built-in servers by name (specs/*.yaml, part of this binary).
var kinds = func() map[string]Kind {
	defs, err := builtins()
	if err != nil {
		panic(fmt.Sprintf("fuseserver: %v", err)) // a defect of this binary, caught by every test
	}
	ks := map[string]Kind{}
	for n, d := range defs {
		ks[n] = kindOf(d)
	}
	return ks
}()

// IsSpecFile reports whether a --fuse-server value names a spec file rather than a built-in server: a path
// (with a '/') or a name ending in .yaml, .yml or .json.
func IsSpecFile(name string) bool {
	return strings.Contains(name, "/") || strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml") || strings.HasSuffix(name, ".json")
}

// Lookup returns the Kind of the server called name (empty: DummyFuse), or read from the spec file name.
func Lookup(name string) (Kind, error) {
	if name == "" {
		name = DummyFuse
	}
	if IsSpecFile(name) {
		d, err := LoadDefinition(name)
		if err != nil {
			return Kind{}, err
		}
		return kindOf(d), nil
	}
	k, ok := kinds[name]
	if !ok {
		return Kind{}, fmt.Errorf("unknown FUSE server %q (known: %s; or the path of a server spec file)", name, strings.Join(Names(), ", "))
	}
	return k, nil
}

// Names lists the built-in servers, sorted.
func Names() []string {
	var names []string
	for n := range kinds {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// New checks spec (the server is known, its executable exists, its options are complete) and returns the server.
func New(spec Spec) (Server, error) {
	k, err := Lookup(spec.Name)
	if err != nil {
		return nil, err
	}
	d := k.def
	if spec.Path == "" {
		if spec.Path = d.Executable; !filepath.IsAbs(spec.Path) {
			if spec.Path = Find(d.Executable, spec.Dirs...); spec.Path == "" {
				return nil, fmt.Errorf("FUSE server %s: no executable %q beside this executable nor in $PATH (give its path with --fuse-server-path)", d.Name, d.Executable)
			}
		}
	}
	if err := checkExecutable(spec.Path); err != nil {
		return nil, fmt.Errorf("FUSE server %s: %w", d.Name, err)
	}
	vals, err := d.values(spec.Opts)
	if err != nil {
		return nil, fmt.Errorf("FUSE server %s: %w", d.Name, err)
	}
	if spec.DirectIO && len(d.DirectIOArgs) == 0 {
		return nil, fmt.Errorf("FUSE server %s: it has no direct-I/O mode (its spec gives no directIOArgs)", d.Name)
	}
	s := &specServer{kind: k, spec: spec, vals: vals}
	if d.ServesFD {
		// A libfuse2 binary takes /dev/fd/N for a directory; a binary that is not ELF (a script) is not inspected.
		if s.libfuse2, err = linksLibfuse2(spec.Path); err != nil && !errors.Is(err, errNotELF) {
			return nil, fmt.Errorf("FUSE server %s: %w", d.Name, err)
		}
	}
	return s, nil
}

// specServer is a server run as its spec says.
type specServer struct {
	kind     Kind
	spec     Spec
	vals     map[string]string
	libfuse2 bool
}

func (s *specServer) Name() string  { return s.kind.Name }
func (s *specServer) Kind() Kind    { return s.kind }
func (s *specServer) Path() string  { return s.spec.Path }
func (s *specServer) Env() []string { return s.kind.def.Env }

// args renders the command line for mountpoint: the operator's extra arguments first, not last (every server
// here takes its options before its operands; dummy-fuse's Go flags stop at the first operand), then the
// direct-I/O ones, then those of how it gets its connection (pre), then the spec's.
func (s *specServer) args(mountpoint string, pre ...string) []string {
	args := slices.Clone(s.spec.Extra)
	if s.spec.DirectIO {
		args = append(args, s.kind.def.DirectIOArgs...)
	}
	args = append(args, pre...)
	return append(args, expand(s.kind.def.Args, mountpoint, s.vals)...)
}

func (s *specServer) MountArgs(dir string) []string { return s.args(dir) }

func (s *specServer) FusermountArgs(dir string) ([]string, error) {
	if !s.kind.def.Fusermount {
		return nil, errors.New("its spec does not say it asks fusermount for its connection (fusermount: true)")
	}
	return s.args(dir, s.kind.def.FusermountArgs...), nil
}

func (s *specServer) FDArgs() ([]string, error) {
	switch {
	case !s.kind.def.ServesFD:
		return nil, errors.New("its spec says it cannot serve a connection it did not mount (servesFD: false); it can only mount a directory itself (child placement; behind the relay, its backend directory)")
	case s.libfuse2:
		return nil, errLibfuse2
	}
	return s.args(FDPath), nil
}

// Find returns the executable called name to use when none is configured: the first in dirs (empty ones are
// skipped), else the one beside the running executable (how the plugin image ships them), else the first in
// $PATH, else "".
func Find(name string, dirs ...string) string {
	if exe, err := os.Executable(); err == nil {
		dirs = append(dirs, filepath.Dir(exe))
	}
	for _, d := range dirs {
		if d == "" {
			continue
		}
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0 {
			return p
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	return ""
}

func checkExecutable(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", path)
	}
	return nil
}

// Command returns the process that runs s with args, its environment completed.
func Command(s Server, args []string) *exec.Cmd {
	cmd := exec.Command(s.Path(), args...)
	cmd.Env = append(os.Environ(), s.Env()...)
	return cmd
}

// errLibfuse2 is why a libfuse2 server never gets a /dev/fd/N mountpoint: libfuse2 treats it as an ordinary
// path and mounts a new FUSE filesystem on top of /dev/fuse (seen with Debian 12's bindfs).
var errLibfuse2 = errors.New("it is linked against libfuse2 (libfuse.so.2), which would take /dev/fd/3 for a directory and mount a new filesystem over /dev/fuse; it can only mount a directory itself (child placement; behind the relay, its backend directory)")

// errNotELF is a server executable that is not an ELF binary (a script): which library it runs is not known.
var errNotELF = errors.New("not an ELF executable")

// linksLibfuse2 reports whether the ELF executable at path needs libfuse.so.2. A static binary (gcsfuse) needs
// no shared library and is not libfuse2.
func linksLibfuse2(path string) (bool, error) {
	f, err := elf.Open(path)
	var fe *elf.FormatError
	if errors.As(err, &fe) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return false, fmt.Errorf("%s: %w", path, errNotELF)
	}
	if err != nil {
		return false, fmt.Errorf("reading %s as an ELF executable: %w", path, err)
	}
	defer f.Close()
	libs, err := f.ImportedLibraries()
	if err != nil {
		return false, fmt.Errorf("reading the shared libraries %s needs: %w", path, err)
	}
	for _, l := range libs {
		if strings.HasPrefix(l, "libfuse.so.2") {
			return true, nil
		}
	}
	return false, nil
}

// Flags registers the server flags on fl, filling spec: --fuse-server, --fuse-server-path (alias
// --dummy-fuse-path, its name before there was more than one server) and --fuse-server-opt (repeatable).
func (spec *Spec) Flags(fl *flag.FlagSet) {
	fl.StringVar(&spec.Name, "fuse-server", DummyFuse, "FUSE server program: "+strings.Join(Names(), ", ")+", or the path of a server spec file (docs/server-spec.md)")
	fl.StringVar(&spec.Path, "fuse-server-path", "", "the FUSE server's executable (default: its name beside this executable, else in $PATH)")
	fl.StringVar(&spec.Path, "dummy-fuse-path", "", "the same as --fuse-server-path (kept for earlier command lines)")
	fl.Func("fuse-server-opt", "a setting of the FUSE server as key=value, repeatable: "+OptsHelp(), spec.SetOpt)
	fl.Func("fuse-server-arg", "an argument given to the FUSE server before its own, repeatable (e.g. a flag of its next build; one it refuses makes it fail to start)", spec.AddExtra)
}

// SetOpt sets one server setting from its key=value form (--fuse-server-opt).
func (spec *Spec) SetOpt(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want key=value, got %q", s)
	}
	if spec.Opts == nil {
		spec.Opts = map[string]string{}
	}
	spec.Opts[k] = v
	return nil
}

// AddExtra adds one extra argument (--fuse-server-arg); an empty one is refused, as a slip of a template.
func (spec *Spec) AddExtra(s string) error {
	if s == "" {
		return errors.New("an empty argument")
	}
	spec.Extra = append(spec.Extra, s)
	return nil
}

// Args renders spec back as the flags Flags parses (for a process the caller starts, e.g. a sidecar).
func (spec Spec) Args() []string {
	var args []string
	if spec.Name != "" {
		args = append(args, "--fuse-server="+spec.Name)
	}
	if spec.Path != "" {
		args = append(args, "--fuse-server-path="+spec.Path)
	}
	keys := make([]string, 0, len(spec.Opts))
	for k := range spec.Opts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		args = append(args, "--fuse-server-opt="+k+"="+spec.Opts[k])
	}
	for _, a := range spec.Extra {
		args = append(args, "--fuse-server-arg="+a)
	}
	return args
}

// OptsHelp describes every built-in server's settings.
func OptsHelp() string {
	var parts []string
	for _, n := range Names() {
		if h := kinds[n].Settings; h != "" {
			parts = append(parts, n+": "+h)
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}
