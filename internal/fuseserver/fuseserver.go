// Package fuseserver describes the FUSE server programs the testbed runs: dummy-fuse, its own, and real ones
// users run (gcsfuse against a fake GCS, squashfuse, a libfuse3 server). Each server is one file that registers
// itself; a FUSE mode asks a Server for the command line that mounts a directory itself (child placement) or that
// serves a connection already mounted and passed as descriptor 3 (sidecar placement: /dev/fd/3), and whether it can
// take over a connection another process initialised (keeper placement). Nothing else knows a server's flags.
package fuseserver

import (
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// DummyFuse is the testbed's own server and the default.
const DummyFuse = "dummy-fuse"

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
	// Name is the server (--fuse-server); empty means DummyFuse.
	Name string
	// Path is its executable; empty: the server's name beside the running executable, else in $PATH.
	Path string
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
	// Name is the server's registered name; it is also the name its mounts carry (fuse.<name>).
	Name() string
	// Path is the executable.
	Path() string
	// MountArgs are the arguments (without the executable) that mount dir and serve it in the foreground until
	// the process is killed or the mount goes away.
	MountArgs(dir string) []string
	// FDArgs are the arguments that serve the connection passed as descriptor FD, already mounted by someone
	// else; an error when the server cannot (a libfuse2 server would mount a new filesystem on /dev/fd/3).
	FDArgs() ([]string, error)
	// Env is added to the process's environment.
	Env() []string
}

// Kind is what is known of a server before it is configured.
type Kind struct {
	Name string
	// TakesOver says whether the server can take over a connection another process initialised (INIT replay),
	// which the keeper placement needs; WhyNot says what a server that cannot does with such a connection.
	TakesOver bool
	WhyNot    string
	// Settings describes its --fuse-server-opt keys.
	Settings string
	new      func(Spec) (Server, error)
}

// kinds are the servers by name; each server's file registers its Kind from an init function.
var kinds = map[string]Kind{}

// register makes a server known; it panics when the name is taken (a programming error).
func register(k Kind) {
	if _, dup := kinds[k.Name]; dup || k.Name == "" || k.new == nil {
		panic(fmt.Sprintf("fuseserver: server %q registered twice, without a name or without a constructor", k.Name))
	}
	kinds[k.Name] = k
}

// Lookup returns the Kind of the server called name (empty: DummyFuse).
func Lookup(name string) (Kind, error) {
	if name == "" {
		name = DummyFuse
	}
	k, ok := kinds[name]
	if !ok {
		return Kind{}, fmt.Errorf("unknown FUSE server %q (known: %s)", name, strings.Join(Names(), ", "))
	}
	return k, nil
}

// Names lists the known servers, sorted.
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
	spec.Name = k.Name
	if spec.Path == "" {
		if spec.Path = Find(spec.Name); spec.Path == "" {
			return nil, fmt.Errorf("FUSE server %s: no executable %q beside this executable nor in $PATH (give its path with --fuse-server-path)", spec.Name, spec.Name)
		}
	}
	if err := checkExecutable(spec.Path); err != nil {
		return nil, fmt.Errorf("FUSE server %s: %w", spec.Name, err)
	}
	s, err := k.new(spec)
	if err != nil {
		return nil, fmt.Errorf("FUSE server %s: %w", spec.Name, err)
	}
	if len(spec.Extra) > 0 {
		return withExtra{Server: s, extra: spec.Extra}, nil
	}
	return s, nil
}

// withExtra is a server whose command lines start with the operator's extra arguments (Spec.Extra): in one
// place, so that no server's file needs to know of them. First, not last: every server here takes its options
// before its operands (dummy-fuse's Go flags stop at the first operand).
type withExtra struct {
	Server
	extra []string
}

func (w withExtra) MountArgs(dir string) []string {
	return append(slices.Clone(w.extra), w.Server.MountArgs(dir)...)
}

func (w withExtra) FDArgs() ([]string, error) {
	args, err := w.Server.FDArgs()
	if err != nil {
		return nil, err
	}
	return append(slices.Clone(w.extra), args...), nil
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
var errLibfuse2 = errors.New("it is linked against libfuse2 (libfuse.so.2), which would take /dev/fd/3 for a directory and mount a new filesystem over /dev/fuse; it can only mount a directory itself (child placement)")

// linksLibfuse2 reports whether the ELF executable at path needs libfuse.so.2. A static binary (gcsfuse) needs
// no shared library and is not libfuse2.
func linksLibfuse2(path string) (bool, error) {
	f, err := elf.Open(path)
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
	fl.StringVar(&spec.Name, "fuse-server", DummyFuse, "FUSE server program: "+strings.Join(Names(), ", "))
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

// OptsHelp describes every server's settings.
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

// options checks that opts has only the keys known (a typo is an error, not a silent default) and every one
// of required.
func options(opts map[string]string, known []string, required ...string) error {
	for k := range opts {
		found := false
		for _, kk := range known {
			found = found || k == kk
		}
		if !found {
			return fmt.Errorf("unknown setting %q (known: %s)", k, strings.Join(known, ", "))
		}
	}
	for _, r := range required {
		if opts[r] == "" {
			return fmt.Errorf("needs its setting %s (--fuse-server-opt=%s=<value>)", r, r)
		}
	}
	return nil
}
