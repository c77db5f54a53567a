package cli

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/command"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/kube"
)

// okMachine is a machine with everything the backends need: root, /dev/fuse, a cluster that answers.
func okMachine() machine {
	return machine{argv0: "bin/dfc-scenario", euid: 0, openFuse: func() error { return nil },
		kube: func(context.Context, kube.Options) error { return nil }}
}

// runOn runs the command on m and returns its exit code, stdout and stderr.
func runOn(t *testing.T, m machine, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(context.Background(), args, command.Streams{Out: &out, Err: &errOut}, m)
	code = command.Code("dfc-scenario", err, &errOut)
	return code, out.String(), errOut.String()
}

// TestPreflight: a backend that lacks what it needs stops the command before any scenario runs, with one line
// and exit 2, also with --check; no verdict (FAIL) is printed for a scenario that never ran.
func TestPreflight(t *testing.T) {
	notRoot := okMachine()
	notRoot.euid = 1000
	noFuse := okMachine()
	noFuse.openFuse = func() error { return &fs.PathError{Op: "open", Path: "/dev/fuse", Err: fs.ErrNotExist} }
	down := okMachine()
	down.kube = func(context.Context, kube.Options) error {
		return errors.New("the cluster at https://127.0.0.1:6443 does not answer (no answer within 5s): is it up? (make cluster-up)")
	}
	emptyBin := t.TempDir()
	cases := []struct {
		m      machine
		args   []string
		stderr string // the whole of it; "" with code 0
		code   int
	}{
		{m: notRoot, args: []string{"restart"}, code: 2,
			stderr: "dfc-scenario: the local backend needs root (it mounts FUSE filesystems and makes mount namespaces): sudo bin/dfc-scenario restart\n"},
		{m: notRoot, args: []string{"--check", "--read-interval=1s", "restart", "subpath"}, code: 2,
			stderr: "dfc-scenario: the local backend needs root (it mounts FUSE filesystems and makes mount namespaces): sudo bin/dfc-scenario --check --read-interval=1s restart subpath\n"},
		{m: notRoot, args: []string{"--backend=kube", "--check", "restart"}, code: 0}, // the kube backend needs no root
		{m: noFuse, args: []string{"restart"}, code: 2,
			stderr: "dfc-scenario: the local backend needs /dev/fuse (open /dev/fuse: file does not exist): load the fuse module (modprobe fuse), or give a container the device (--device /dev/fuse)\n"},
		{m: okMachine(), args: []string{"--bin-dir=" + emptyBin, "restart"}, code: 2,
			stderr: "dfc-scenario: the local backend needs " + filepath.Join(emptyBin, "csi-plugin") + ", which does not exist: make build, or --bin-dir=<the directory of csi-plugin, dummy-fuse and dummy-fuse-workload>\n"},
		{m: okMachine(), args: []string{"--check", "--bin-dir=" + emptyBin, "restart"}, code: 0}, // hack/scenario.sh checks before it builds them
		{m: down, args: []string{"--backend=kube", "restart"}, code: 2,
			stderr: "dfc-scenario: the cluster at https://127.0.0.1:6443 does not answer (no answer within 5s): is it up? (make cluster-up)\n"},
		{m: down, args: []string{"--backend=kube", "--check", "restart"}, code: 2,
			stderr: "dfc-scenario: the cluster at https://127.0.0.1:6443 does not answer (no answer within 5s): is it up? (make cluster-up)\n"},
		{m: down, args: []string{"--backend=kube", "--driver=x", "--storage-class=a", "driver-rollout"}, code: 2,
			stderr: "dfc-scenario: the cluster at https://127.0.0.1:6443 does not answer (no answer within 5s): is it up? (make cluster-up)\n"},
		{m: down, args: []string{"--check", "restart"}, code: 0}, // the local backend needs no cluster
		{m: down, args: []string{"--backend=kube", "restrat"}, code: 2, // a usage error first: it needs no cluster to be told
			stderr: "dfc-scenario: no scenario \"restrat\"; did you mean restart?\nRun 'dfc-scenario --help' for usage.\n"},
		{m: notRoot, args: []string{"--list"}, code: 0},
	}
	for _, tc := range cases {
		code, stdout, stderr := runOn(t, tc.m, tc.args...)
		if code != tc.code || stderr != tc.stderr {
			t.Errorf("%q: exit %d, stderr %q; want exit %d, stderr %q", tc.args, code, stderr, tc.code, tc.stderr)
		}
		if code == 2 && stdout != "" {
			t.Errorf("%q: stopped before any scenario, yet printed %q", tc.args, stdout)
		}
	}
}

// TestPreflightKubeOptions: the kube check gets the options the runs would use (--kubeconfig, --context,
// --image), so it checks the cluster they would reach.
func TestPreflightKubeOptions(t *testing.T) {
	m := okMachine()
	var got kube.Options
	m.kube = func(_ context.Context, o kube.Options) error { got = o; return nil }
	if code, _, stderr := runOn(t, m, "--backend=kube", "--check", "--kubeconfig=/k", "--context=c", "--image=i:t", "restart"); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if got.Kubeconfig != "/k" || got.Context != "c" || got.Image != "i:t" {
		t.Errorf("the kube check got %+v, want the kubeconfig /k, context c and image i:t", got)
	}
}

// TestPreflightMissingKubeconfig: the command with the kube backend's real check and a KUBECONFIG naming a
// missing file stops with that one line, before any call to a cluster (client-go would fall back to
// localhost:8080 and each scenario FAIL in its setup).
func TestPreflightMissingKubeconfig(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "gone", "kubeconfig")
	t.Setenv("KUBECONFIG", missing)
	t.Setenv("DFC_CLUSTER_DIR", filepath.Join(dir, "cluster"))
	m := okMachine()
	m.kube = thisMachine().kube
	code, stdout, stderr := runOn(t, m, "--backend=kube", "restart")
	want := "dfc-scenario: KUBECONFIG names " + missing + ", which does not exist: point it at your cluster's kubeconfig (make cluster-up writes " +
		filepath.Join(dir, "cluster", "kubeconfig") + ")\n"
	if code != 2 || stderr != want || stdout != "" {
		t.Errorf("exit %d, stdout %q, stderr %q; want exit 2, nothing on stdout and stderr %q", code, stdout, stderr, want)
	}
}

// TestLocalPreflightBinaries: with the three binaries in --bin-dir the local backend has what it needs.
func TestLocalPreflightBinaries(t *testing.T) {
	dir := t.TempDir()
	for _, b := range []string{"csi-plugin", "dummy-fuse", "dummy-fuse-workload"} {
		if err := os.WriteFile(filepath.Join(dir, b), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := parse([]string{"--bin-dir=" + dir, "restart"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := localPreflight(cfg, okMachine(), nil); err != nil {
		t.Errorf("binaries present: %v", err)
	}
	if err := os.Remove(filepath.Join(dir, "dummy-fuse-workload")); err != nil {
		t.Fatal(err)
	}
	if err := localPreflight(cfg, okMachine(), nil); err == nil || !strings.Contains(err.Error(), "dummy-fuse-workload, which does not exist") {
		t.Errorf("dummy-fuse-workload missing: %v", err)
	}
}

func TestQuoteArgs(t *testing.T) {
	got := quoteArgs([]string{"bin/dfc-scenario", "--kube-set=a=1,b=2", "--sidecar-delay=0s 1s", "it's", ""})
	want := `bin/dfc-scenario --kube-set=a=1,b=2 '--sidecar-delay=0s 1s' 'it'\''s' ''`
	if got != want {
		t.Errorf("quoteArgs = %s, want %s", got, want)
	}
}
