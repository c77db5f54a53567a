package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/command"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/catalog"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

func TestParse(t *testing.T) {
	cases := []struct {
		args  []string
		code  int // exit code of a command that stops after parsing; -1: it runs the scenarios
		names string
		out   string // in stdout or stderr
	}{
		{args: []string{"restart"}, code: -1, names: "restart"},
		{args: []string{"all"}, code: -1, names: strings.Join(dummyFuseNames(), ",")},
		{args: []string{"relay-write-server-crash"}, code: 2, out: "runs with gcsfuse only, not dummy-fuse"},
		{args: []string{"--keep", "subpath", "restart"}, code: -1, names: "subpath,restart"},
		{args: []string{"nope"}, code: 2, out: `no scenario "nope" (dfc-scenario --list shows them)`},
		{args: []string{"restrat"}, code: 2, out: `no scenario "restrat"; did you mean restart?`},
		{args: []string{"sidecar-kill"}, code: 2, out: `did you mean sidecar-killed?`},
		{args: []string{"--check", "restart", "subpath"}, code: 0},
		{args: []string{"--check", "--backend=kube", "restrat"}, code: 2, out: "did you mean restart?"},
		{args: nil, code: 2, out: "name at least one scenario"},
		{args: []string{"--backend=kube", "--kube-set=a=1", "--kube-set=b=2", "restart"}, code: -1, names: "restart"},
		{args: []string{"--backend=mars", "restart"}, code: 2, out: "unknown backend"},
		{args: []string{"--list"}, code: 0, out: "restart-no-restore"},
		{args: []string{"--bogus"}, code: 2, out: "flag provided but not defined"},
		{args: []string{"--help"}, code: 0, out: "Usage: dfc-scenario"},
		{args: []string{"--list"}, code: 0, out: "depends on the kubelet version: kubelet < v1.37, kubelet ≥ v1.37"},
		{args: []string{"--kubelet-version=v1.36", "subpath"}, code: -1, names: "subpath"},
		{args: []string{"--kubelet-version=v1.35.4", "subpath"}, code: 2, out: "does not model kubelet v1.35.4"},
		{args: []string{"--version-dependent", "subpath"}, code: 2, out: "go with --list"},
		{args: []string{"--every-release", "subpath"}, code: 2, out: "go with --list"},
		{args: []string{"--every-server", "restart"}, code: 2, out: "go with --list"},
		{args: []string{"sidecar-killed"}, code: -1, names: "sidecar-killed"},
		{args: []string{"--backend=kube", "sidecar-killed"}, code: -1, names: "sidecar-killed"},
		{args: []string{"--backend=kube", "all"}, code: -1, names: strings.Join(kubeNames(), ",")},
		{args: []string{"--sidecar-delay=0s,3s", "restart", "sidecar-late"}, code: -1, names: "restart,sidecar-late-0s,sidecar-late-3s"},
		{args: []string{"--sidecar-delay=3s", "restart"}, code: 2, out: "--sidecar-delay: no scenario selected holds its sidecar back"},
		{args: []string{"--sidecar-delay=-1s", "sidecar-late"}, code: 2, out: "--sidecar-delay: negative delay"},
		{args: []string{"--sidecar-delay=soon", "sidecar-late"}, code: 2, out: "--sidecar-delay: time: invalid duration"},
	}
	for _, tc := range cases {
		var stdout, stderr bytes.Buffer
		if tc.code >= 0 {
			err := run(context.Background(), tc.args, command.Streams{Out: &stdout, Err: &stderr}, okMachine())
			if code := command.Code("dfc-scenario", err, &stderr); code != tc.code {
				t.Errorf("%q: exit code %d, want %d (stderr %s)", tc.args, code, tc.code, stderr.String())
			}
		} else {
			cfg, err := parse(tc.args, &stdout)
			if err != nil {
				t.Errorf("%q: %v", tc.args, err)
				continue
			}
			var names []string
			for _, sc := range cfg.scenarios {
				names = append(names, sc.Name)
			}
			if strings.Join(names, ",") != tc.names {
				t.Errorf("%q: scenarios %v, want %s", tc.args, names, tc.names)
			}
			if cfg.binDir == "" {
				t.Errorf("%q: the binaries default to the executable's directory", tc.args)
			}
		}
		if !strings.Contains(stdout.String()+stderr.String(), tc.out) {
			t.Errorf("%q: output lacks %q:\n%s%s", tc.args, tc.out, stdout.String(), stderr.String())
		}
	}
}

// dummyFuseNames are the catalog's scenarios that run with dummy-fuse, dfc-scenario's default server: all but
// those that say why they need another (the rows that write).
func dummyFuseNames() []string {
	var out []string
	for _, s := range catalog.All() {
		if s.RunsWithDummyFuse() {
			out = append(out, s.Name)
		}
	}
	if len(out) == len(catalog.All()) {
		panic("every row runs with dummy-fuse: the test of those that do not tests nothing")
	}
	return out
}

// kubeNames are the catalog's scenarios that the kube backend can run with dummy-fuse, dfc-scenario's default.
func kubeNames() []string {
	var out []string
	for _, s := range catalog.All() {
		if s.RunsOn(scenarios.BackendKube) == nil && s.RunsWithDummyFuse() {
			out = append(out, s.Name)
		}
	}
	return out
}

// TestAllLeavesOut: "all" runs what the backend can run and leaves out, saying why, what it cannot; a
// scenario it cannot run named explicitly is an error.
func TestAllLeavesOut(t *testing.T) {
	cfg, err := parse([]string{"--backend=kube", "all"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.scenarios) != len(kubeNames()) || len(cfg.leftOut)+len(cfg.scenarios) != len(catalog.All()) {
		t.Fatalf("left out %q, running %d of %d", cfg.leftOut, len(cfg.scenarios), len(catalog.All()))
	}
	localOnly := scenarios.Scenario{Name: "local-only", Backends: []string{scenarios.BackendLocal}, BackendsWhy: "no reason"}
	both := scenarios.Scenario{Name: "both"}
	run, leftOut, err := runnable(scenarios.BackendKube, "", []scenarios.Scenario{localOnly, both}, true)
	if err != nil || len(run) != 1 || run[0].Name != "both" || len(leftOut) != 1 ||
		!strings.Contains(leftOut[0], "cannot run on the kube backend") || !strings.Contains(leftOut[0], "no reason") {
		t.Errorf("all on kube: run %v, left out %q, %v", run, leftOut, err)
	}
	if _, _, err := runnable(scenarios.BackendKube, "", []scenarios.Scenario{localOnly}, false); err == nil {
		t.Error("a scenario named explicitly that the backend cannot run is no error")
	}
	// A scenario that holds for dummy-fuse only is left out of "all" with another server, and refused when named.
	anyServer := scenarios.Scenario{Name: "any-server", Servers: scenarios.AllServers}
	run, leftOut, err = runnable(scenarios.BackendLocal, "gcsfuse", []scenarios.Scenario{both, anyServer}, true)
	if err != nil || len(run) != 1 || run[0].Name != "any-server" || run[0].Plugin.FuseServer != "gcsfuse" ||
		len(leftOut) != 1 || !strings.Contains(leftOut[0], "runs with dummy-fuse only, not gcsfuse") {
		t.Errorf("all with gcsfuse: run %+v, left out %q, %v", run, leftOut, err)
	}
	if _, _, err := runnable(scenarios.BackendLocal, "gcsfuse", []scenarios.Scenario{both}, false); err == nil {
		t.Error("a scenario named explicitly that does not hold for the server is no error")
	}
	if run, leftOut, err := runnable(scenarios.BackendLocal, "", []scenarios.Scenario{localOnly, both}, true); err != nil || len(run) != 2 || len(leftOut) != 0 {
		t.Errorf("all on local: run %v, left out %q, %v", run, leftOut, err)
	}
}

// TestListVersionDependent: CI reads the names of the scenarios to run on a second kubelet version from
// --list --every-release, one per line and nothing else; --version-dependent names those whose outcome differs;
// --every-server those of its passes with a real FUSE server; --writes the rows that write that the backend
// runs (--backend=kube: those of make kube-writes).
func TestListVersionDependent(t *testing.T) {
	writes := func(backend string) func(*scenarios.Scenario) bool {
		return func(s *scenarios.Scenario) bool { return len(s.Writers()) > 0 && s.RunsOn(backend) == nil }
	}
	for flag, want := range map[string]func(*scenarios.Scenario) bool{
		"--version-dependent":     (*scenarios.Scenario).VersionDependent,
		"--every-release":         (*scenarios.Scenario).OnEveryRelease,
		"--every-server":          (*scenarios.Scenario).OnEveryServer,
		"--writes":                writes(scenarios.BackendLocal),
		"--writes --backend=kube": writes(scenarios.BackendKube),
	} {
		var stdout, stderr bytes.Buffer
		if err := Run(context.Background(), append([]string{"--list"}, strings.Fields(flag)...), command.Streams{Out: &stdout, Err: &stderr}); err != nil {
			t.Fatalf("%s: %v: %s", flag, err, stderr.String())
		}
		var names []string
		for _, sc := range catalog.All() {
			if want(&sc) {
				names = append(names, sc.Name+"\n")
			}
		}
		if len(names) == 0 || stdout.String() != strings.Join(names, "") {
			t.Errorf("%s: output %q, want %q", flag, stdout.String(), strings.Join(names, ""))
		}
	}
	// The rows that write on one backend only: listed for it alone.
	var local, kube bytes.Buffer
	_ = Run(context.Background(), []string{"--list", "--writes"}, command.Streams{Out: &local, Err: io.Discard})
	_ = Run(context.Background(), []string{"--list", "--writes", "--backend=kube"}, command.Streams{Out: &kube, Err: io.Discard})
	if !strings.Contains(local.String(), "relay-write-no-backend\n") || strings.Contains(kube.String(), "relay-write-no-backend") {
		t.Errorf("relay-write-no-backend (local backend only): --writes lists %q, with --backend=kube %q", local.String(), kube.String())
	}
}

// TestUsageOutput: --help goes to stdout (for | less) with exit 0; a bad flag gets its one line and a pointer to
// --help on stderr, not the whole usage.
func TestUsageOutput(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := Run(context.Background(), []string{"--help"}, command.Streams{Out: &stdout, Err: &stderr})
	if code := command.Code("dfc-scenario", err, &stderr); code != 0 || stderr.Len() != 0 ||
		!strings.HasPrefix(stdout.String(), "Usage: dfc-scenario") || !strings.Contains(stdout.String(), "-backend") {
		t.Errorf("--help: exit %d, stdout %q, stderr %q; want 0, the usage with the flags on stdout, nothing on stderr", code, stdout.String(), stderr.String())
	}
	stdout.Reset()
	err = Run(context.Background(), []string{"--bogus", "restart"}, command.Streams{Out: &stdout, Err: &stderr})
	want := "dfc-scenario: flag provided but not defined: -bogus\nRun 'dfc-scenario --help' for usage.\n"
	if code := command.Code("dfc-scenario", err, &stderr); code != 2 || stderr.String() != want || stdout.Len() != 0 {
		t.Errorf("--bogus: exit %d, stderr %q, stdout %q; want 2 and stderr %q", code, stderr.String(), stdout.String(), want)
	}
}

// TestJudge: a scenario that is not runnable on the cluster is neither a pass nor silently counted as one:
// exit 3 alone, exit 1 beside a failure or under DFC_REQUIRE_PRIVILEGED=1, unless the row's needs foretell it
// (an older kubelet release than the first with what it needs).
func TestJudge(t *testing.T) {
	notRunnable := &scenarios.Outcome{Err: &scenarios.NotRunnableError{Why: "no gate", Fix: "make cluster-up"}}
	failed := &scenarios.Outcome{Err: errors.New("setup failed")}
	code := func(results ...*scenarios.Outcome) int {
		return command.Code("dfc-scenario", judge(results), io.Discard)
	}
	t.Setenv(requireEnv, "")
	if c := code(notRunnable); c != 3 {
		t.Errorf("not runnable alone: exit %d, want 3", c)
	}
	if c := code(notRunnable, failed); c != 1 {
		t.Errorf("not runnable and failed: exit %d, want 1", c)
	}
	t.Setenv(requireEnv, "1")
	if c := code(notRunnable); c != 1 {
		t.Errorf("not runnable under %s=1: exit %d, want 1", requireEnv, c)
	}
	// A row that needs RestartAllContainers (v1.36+), refused on v1.34: foretold, not a failure of the pass.
	restartAll, err := catalog.Lookup("restart-all-containers")
	if err != nil {
		t.Fatal(err)
	}
	foretold := &scenarios.Outcome{Scenario: restartAll, Kubelet: scenarios.MustKubeletVersion("v1.34.4"), Err: notRunnable.Err}
	if c := code(foretold); c != 3 {
		t.Errorf("a row refused on a release older than what it needs, under %s=1: exit %d, want 3", requireEnv, c)
	}
	gateOff := &scenarios.Outcome{Scenario: restartAll, Kubelet: scenarios.MustKubeletVersion("v1.37.2"), Err: notRunnable.Err}
	if c := code(gateOff); c != 1 {
		t.Errorf("a row refused on a release that has what it needs, under %s=1: exit %d, want 1", requireEnv, c)
	}
}

// TestRelativeBinDir: the containers start in directories of their own, so --bin-dir is made absolute (a
// relative one made every container's start fail with "no such file or directory").
func TestRelativeBinDir(t *testing.T) {
	cfg, err := parse([]string{"--bin-dir=bin", "restart"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !filepath.IsAbs(cfg.binDir) || filepath.Base(cfg.binDir) != "bin" {
		t.Errorf("--bin-dir=bin gave %q, want an absolute path ending in bin", cfg.binDir)
	}
}

// TestServerSpecFlags: a server described in a spec file runs the rows that hold for every server, with the
// settings the user gives; every misuse is a usage error that says what to do.
func TestServerSpecFlags(t *testing.T) {
	spec := filepath.Join(t.TempDir(), "myfs.yaml")
	body := "name: myfs\nexecutable: /bin/true\nargs: [\"--remote={remote}\", \"{mountpoint}\"]\nservesFD: true\nwhyNot: EIO\nsettings: [{name: remote, required: true}]\n"
	if err := os.WriteFile(spec, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	file, opt := "--fuse-server="+spec, "--fuse-server-opt=remote=r"
	childOnly := filepath.Join(t.TempDir(), "child.yaml")
	if err := os.WriteFile(childOnly, []byte("name: c\nexecutable: /bin/true\nargs: [\"{mountpoint}\"]\nwhyNot: EIO\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// One that asks fusermount for its connection runs where the keeper's stand-in answers (relay-keeper) only.
	asksFusermount := filepath.Join(t.TempDir(), "asks.yaml")
	if err := os.WriteFile(asksFusermount, []byte("name: a\nexecutable: /bin/true\nargs: [\"{mountpoint}\"]\nwhyNot: EIO\nfusermount: true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if cfg, err := parse([]string{"--fuse-server=" + asksFusermount, "relay-keeper-server-crash"}, io.Discard); err != nil || len(cfg.scenarios) != 1 {
		t.Errorf("relay-keeper-server-crash with a server that asks fusermount: %v", err)
	}
	cfg, err := parse([]string{file, opt, "all"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, sc := range catalog.All() {
		if len(sc.Servers) > 0 && sc.ServersWhy == "" && sc.RunsOn(scenarios.BackendLocal) == nil && !upgradesServer(sc) {
			want = append(want, sc.Name)
		}
	}
	var got []string
	for _, sc := range cfg.scenarios {
		got = append(got, sc.Name)
		if sc.Plugin.FuseServer != spec {
			t.Errorf("%s runs with server %q, want the spec file", sc.Name, sc.Plugin.FuseServer)
		}
	}
	if len(want) == 0 || !slices.Equal(got, want) {
		t.Errorf("all with a spec file runs %v, want the rows that hold for every server %v", got, want)
	}
	if cfg.serverOpts["remote"] != "r" {
		t.Errorf("settings %v, want remote=r", cfg.serverOpts)
	}
	// On a cluster the executable is in the operator's image, which the chart values name: nothing local to check.
	kubeCfg, err := parse([]string{"--fuse-server=" + filepath.Join(filepath.Dir(spec), "..", filepath.Base(filepath.Dir(spec)), "myfs.yaml"), opt, "--backend=kube",
		"--kube-set=fuseServer.image=example.invalid/myfs:1", "relay-keeper-server-crash"}, io.Discard)
	if err != nil || len(kubeCfg.scenarios) != 1 || kubeCfg.scenarios[0].Plugin.FuseServer != spec || kubeCfg.kube.ServerOpts != nil {
		t.Errorf("kube with the image named: %v, %+v", err, kubeCfg.scenarios)
	}
	for _, tc := range []struct {
		args []string
		out  string
	}{
		{[]string{file, opt, "keeper-restart"}, "runs with dummy-fuse only"},
		{[]string{file, opt, "relay-write-server-crash"}, "the spec of " + spec + " gives none"},
		{[]string{file, opt, "relay-server-upgrade"}, "needs the upgradeArg of its spec"},
		{[]string{"--fuse-server=" + childOnly, "relay-keeper-server-crash"}, "says it cannot (servesFD: false, fusermount: false)"},
		{[]string{"--fuse-server=" + childOnly, "sidecar-killed"}, "says it cannot (servesFD: false)"},
		{[]string{"--fuse-server=" + asksFusermount, "sidecar-killed"}, "says it cannot (servesFD: false)"},
		{[]string{file, "restart"}, "needs its setting remote (--fuse-server-opt=remote=<value>)"},
		{[]string{file, opt, "--backend=kube", "restart"}, "--kube-set fuseServer.image=IMAGE"},
		{[]string{opt, "restart"}, "goes with a server spec file"},
		{[]string{file, "--fuse-server-opt=remote", "restart"}, "want key=value"},
		{[]string{"--fuse-server=" + spec + ".missing", "restart"}, "no such file"},
	} {
		var stderr bytes.Buffer
		err := run(context.Background(), tc.args, command.Streams{Out: io.Discard, Err: &stderr}, okMachine())
		if code := command.Code("dfc-scenario", err, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.out) {
			t.Errorf("%q: exit code %d, stderr %q; want 2 and %q", tc.args, code, stderr.String(), tc.out)
		}
	}
}

// upgradesServer: the row gives the real server a next build, which needs its spec's upgradeArg (the test's spec
// has none).
func upgradesServer(sc scenarios.Scenario) bool {
	return slices.ContainsFunc(sc.Steps, func(st scenarios.Step) bool {
		return st.Action == scenarios.ActUpgrade && st.Component == topology.RelayServer
	})
}
