package fuseserver

import (
	"cmp"
	"embed"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// Definition is a FUSE server described in a file (a server spec, YAML or JSON): all the testbed needs to run
// it, as data. The servers this project runs itself are built-in definitions of the same form (specs/*.yaml);
// docs/server-spec.md explains each field with an example per placement.
type Definition struct {
	// Name names the server in flags, logs and reports.
	Name string `json:"name"`
	// Executable is the server's binary: a name, looked up beside the running executable and then in $PATH, or an
	// absolute path. --fuse-server-path overrides it.
	Executable string `json:"executable"`
	// Args mount {mountpoint} and serve it in the foreground until the process is killed or the mount goes. Every
	// other {name} is a setting's value; an argument that names an optional setting which is not set is left out.
	Args []string `json:"args"`
	// ServesFD says the server can serve a connection someone else mounted, given as {mountpoint} = /dev/fd/N
	// (libfuse ≥ 3.3, go-fuse, jacobsa/fuse): the sidecar, keeper and relay placements need it. A libfuse2 binary
	// never gets such a path, whatever this says: it would mount a new filesystem over /dev/fuse.
	ServesFD bool `json:"servesFD"`
	// Fusermount says the server, when it may not mount, asks libfuse's helper fusermount (libfuse2's
	// fusermount, libfuse3's and bazil.org/fuse's fusermount3) for its connection, which it then serves: where
	// the plugin mounted the connection and the server runs unprivileged (the relay-keeper placement), a
	// stand-in fusermount answers with that connection (fusermount.go). FusermountArgs come before Args then:
	// what makes the server ask even where it could open /dev/fuse itself (libfuse: -o auto_unmount).
	Fusermount     bool     `json:"fusermount"`
	FusermountArgs []string `json:"fusermountArgs"`
	// TakesOver says the server takes over a live connection another process initialised (it replays the INIT),
	// which the keeper placement needs; WhyNot says what a server that cannot does with such a connection.
	TakesOver bool   `json:"takesOver"`
	WhyNot    string `json:"whyNot"`
	// DirectIOArgs come before Args when reads must bypass the page cache; a server without them is refused that.
	DirectIOArgs []string `json:"directIOArgs"`
	// Env is added to the server's environment (NAME=value).
	Env []string `json:"env"`
	// UpgradeArg is an argument the server accepts that changes nothing a workload sees: the upgrade rows give it
	// to the server's "next build" to tell the new process from the old one. Without it they do not run.
	UpgradeArg string `json:"upgradeArg"`
	// Settings are the values Args and Env name, set with --fuse-server-opt name=value.
	Settings []Setting `json:"settings"`
	// ObjectURL is where a plain HTTP GET, without credentials, reads what the server stored for a file at the
	// top of the volume, without any mount: {object} is the file's name (escaped as a URL path segment), every
	// other {name} a setting; a 404 is a file the storage does not have. The rows that write hold the storage
	// to what their writer was told was written through it; a server without it does not run them.
	ObjectURL string `json:"objectURL"`
	// DurableAt is where a file written through the server is in its storage: "close" (or empty), once a
	// close(2) or fsync(2) of it returned 0 (gcsfuse, s3fs upload at FLUSH and FSYNC); "later", some time after
	// the close, in the background (rclone's write cache with --vfs-write-back). The relay's promise for a close
	// or an fsync needs "close": the rows that write do not run a server whose spec says "later".
	DurableAt string `json:"durableAt"`
}

// Where a file written through a server is durable (Definition.DurableAt).
const (
	DurableAtClose = "close"
	DurableLater   = "later"
)

// Setting is one value a server's arguments name.
type Setting struct {
	Name     string `json:"name"`
	Help     string `json:"help"`
	Required bool   `json:"required"`
	Default  string `json:"default"`
	// File says the value is a path that must be a regular file (checked before the server starts).
	File bool `json:"file"`
}

//go:embed specs/*.yaml
var builtinSpecs embed.FS

// builtins returns the built-in definitions by name. They are part of this binary: an error is a defect.
func builtins() (map[string]*Definition, error) {
	ents, err := builtinSpecs.ReadDir("specs")
	if err != nil {
		return nil, err
	}
	defs := map[string]*Definition{}
	for _, e := range ents {
		b, err := builtinSpecs.ReadFile(path.Join("specs", e.Name()))
		if err != nil {
			return nil, err
		}
		d, err := ParseDefinition(b, "built-in "+e.Name())
		if err != nil {
			return nil, err
		}
		if defs[d.Name] != nil {
			return nil, fmt.Errorf("built-in %s: a second server called %q", e.Name(), d.Name)
		}
		defs[d.Name] = d
	}
	return defs, nil
}

// LoadDefinition reads and checks the server spec at file.
func LoadDefinition(file string) (*Definition, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("FUSE server spec: %w", err)
	}
	return ParseDefinition(b, file)
}

// ParseDefinition parses a server spec (YAML or JSON) and checks it; errors name source and the field.
func ParseDefinition(b []byte, source string) (*Definition, error) {
	var d Definition
	// Strict: a misspelt field is an error, never a silently ignored line.
	if err := yaml.UnmarshalStrict(b, &d); err != nil {
		// The YAML library decodes through JSON and says so in every message: the field is what a user needs.
		msg := strings.TrimPrefix(err.Error(), "error unmarshaling JSON: while decoding JSON: ")
		return nil, fmt.Errorf("FUSE server spec %s: %s", source, msg)
	}
	if err := d.check(); err != nil {
		return nil, fmt.Errorf("FUSE server spec %s: %w", source, err)
	}
	return &d, nil
}

var (
	settingName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)
	placeholder = regexp.MustCompile(`\{([^{}]*)\}`)
)

// mountpointName is the placeholder of the directory (or /dev/fd/N) the server serves, objectName that of a
// stored file's name in ObjectURL.
const (
	mountpointName = "mountpoint"
	objectName     = "object"
)

func (d *Definition) check() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if !settingName.MatchString(d.Name) {
		bad("name", "%q: want lower-case letters, digits, '.', '_' or '-'", d.Name)
	}
	if d.Executable == "" {
		bad("executable", "missing: the server's binary, a name or an absolute path")
	} else if strings.Contains(d.Executable, "/") && !path.IsAbs(d.Executable) {
		bad("executable", "%q: a name or an absolute path, not a relative one", d.Executable)
	}
	settings := map[string]bool{}
	for i, s := range d.Settings {
		field := fmt.Sprintf("settings[%d].name", i)
		switch {
		case !settingName.MatchString(s.Name):
			bad(field, "%q: want lower-case letters, digits, '.', '_' or '-'", s.Name)
		case s.Name == mountpointName || s.Name == objectName:
			bad(field, "%q is a placeholder of the spec's own, not a setting", s.Name)
		case settings[s.Name]:
			bad(field, "%q twice", s.Name)
		}
		if s.Required && s.Default != "" {
			bad(fmt.Sprintf("settings[%d]", i), "%q is required and has a default: one or the other", s.Name)
		}
		settings[s.Name] = true
	}
	mountpoints := 0
	for i, a := range d.Args {
		for _, m := range placeholder.FindAllStringSubmatch(a, -1) {
			switch {
			case m[1] == mountpointName:
				mountpoints++
			case !settings[m[1]]:
				bad(fmt.Sprintf("args[%d]", i), "%q names {%s}, which is neither {%s} nor a setting", a, m[1], mountpointName)
			}
		}
	}
	if mountpoints != 1 {
		bad("args", "{%s} must appear exactly once (found %d): it is what the server serves", mountpointName, mountpoints)
	}
	if d.ObjectURL != "" {
		objects := 0
		for _, m := range placeholder.FindAllStringSubmatch(d.ObjectURL, -1) {
			switch {
			case m[1] == objectName:
				objects++
			case !settings[m[1]]:
				bad("objectURL", "%q names {%s}, which is neither {%s} nor a setting", d.ObjectURL, m[1], objectName)
			}
		}
		if objects != 1 {
			bad("objectURL", "{%s} must appear exactly once (found %d): it is the stored file's name", objectName, objects)
		}
	}
	if d.DurableAt != "" && d.DurableAt != DurableAtClose && d.DurableAt != DurableLater {
		bad("durableAt", "%q: want %s or %s", d.DurableAt, DurableAtClose, DurableLater)
	}
	for i, e := range d.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			bad(fmt.Sprintf("env[%d]", i), "%q: want NAME=value", e)
		}
	}
	if len(d.FusermountArgs) > 0 && !d.Fusermount {
		bad("fusermountArgs", "given for a server that does not ask fusermount for its connection (fusermount: false)")
	}
	for i, a := range d.FusermountArgs {
		if placeholder.MatchString(a) {
			bad(fmt.Sprintf("fusermountArgs[%d]", i), "%q: these arguments take no {placeholder}", a)
		}
	}
	if d.TakesOver && !d.ServesFD {
		bad("takesOver", "a server that takes a connection over must serve one it did not mount (servesFD: true)")
	}
	if !d.TakesOver && d.WhyNot == "" {
		bad("whyNot", "missing: what the server does with a live connection it did not initialise (e.g. EIO on every request), which users read when the keeper placement refuses it")
	}
	return errors.Join(errs...)
}

// settingsHelp describes the settings for --help and errors.
func (d *Definition) settingsHelp() string {
	var parts []string
	for _, s := range d.Settings {
		p := s.Name + "=<" + cmp.Or(s.Help, "value") + ">"
		switch {
		case s.Required:
			p += " (required)"
		case s.Default != "":
			p += " (default " + s.Default + ")"
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, ", ")
}

// settingNames lists the settings' names in the spec's order.
func (d *Definition) settingNames() []string {
	var names []string
	for _, s := range d.Settings {
		names = append(names, s.Name)
	}
	return names
}

// values checks opts against the settings (no unknown key, every required one, files that exist) and returns
// every setting's value, defaults filled in.
func (d *Definition) values(opts map[string]string) (map[string]string, error) {
	known := d.settingNames()
	for k := range opts {
		if !slices.Contains(known, k) {
			if len(known) == 0 {
				return nil, fmt.Errorf("unknown setting %q (it has none)", k)
			}
			return nil, fmt.Errorf("unknown setting %q (known: %s)", k, strings.Join(known, ", "))
		}
	}
	vals := map[string]string{}
	for _, s := range d.Settings {
		v := opts[s.Name]
		if v == "" {
			v = s.Default
		}
		if v == "" && s.Required {
			return nil, fmt.Errorf("needs its setting %s (--fuse-server-opt=%s=<value>)", s.Name, s.Name)
		}
		if v != "" && s.File {
			if st, err := os.Stat(v); err != nil || !st.Mode().IsRegular() {
				return nil, fmt.Errorf("setting %s: %s is not a regular file (%v)", s.Name, v, err)
			}
		}
		if v != "" {
			vals[s.Name] = v
		}
	}
	return vals, nil
}

// objectURL renders ObjectURL for the stored file name with vals; an error names a setting it needs that has
// no value.
func (d *Definition) objectURL(vals map[string]string, name string) (string, error) {
	if d.ObjectURL == "" {
		return "", fmt.Errorf("FUSE server %s: its spec does not say where what it stores can be read without its mount (objectURL)", d.Name)
	}
	var missing []string
	u := placeholder.ReplaceAllStringFunc(d.ObjectURL, func(m string) string {
		n := m[1 : len(m)-1]
		if n == objectName {
			return url.PathEscape(name)
		}
		v, ok := vals[n]
		if !ok {
			missing = append(missing, n)
		}
		return v
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("FUSE server %s: its objectURL needs the settings %s, which have no value", d.Name, strings.Join(missing, ", "))
	}
	return u, nil
}

// expand renders args for mountpoint with vals; an argument naming a setting without a value is left out.
func expand(args []string, mountpoint string, vals map[string]string) []string {
	out := make([]string, 0, len(args))
	for _, a := range args {
		missing := false
		r := placeholder.ReplaceAllStringFunc(a, func(m string) string {
			name := m[1 : len(m)-1]
			if name == mountpointName {
				return mountpoint
			}
			v, ok := vals[name]
			missing = missing || !ok
			return v
		})
		if !missing {
			out = append(out, r)
		}
	}
	return out
}
