package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/command"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/kube"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/local"
)

// machine is what the preflight reads of this machine: a parameter of run, so that a test needs neither root,
// /dev/fuse nor a cluster.
type machine struct {
	// argv0 is how the user called the command, for the sudo line to copy.
	argv0 string
	euid  int
	// openFuse opens /dev/fuse read-write and closes it again, as a FUSE mount does first.
	openFuse func() error
	// kube checks that the kube backend with these options reaches its cluster (kube.Preflight).
	kube func(context.Context, kube.Options) error
}

// thisMachine is the machine this process runs on.
func thisMachine() machine {
	argv0 := "dfc-scenario"
	if len(os.Args) > 0 {
		argv0 = os.Args[0]
	}
	return machine{
		argv0: argv0,
		euid:  os.Geteuid(),
		openFuse: func() error {
			f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
			if err != nil {
				return err
			}
			return f.Close()
		},
		kube: func(ctx context.Context, o kube.Options) error { return kube.Preflight(ctx, o, kube.ThisMachine()) },
	}
}

// preflight checks, before any scenario runs (and with --check), that the backend has what it needs, and
// stops with one line and exit 2 when it has not: a scenario run without it only fails in its setup, after
// the runner printed FAIL verdicts that the missing cluster or privilege, not the scenario, decided. The
// binaries are not checked with --check: hack/scenario.sh checks before it builds them.
func preflight(ctx context.Context, cfg config, m machine, args []string) error {
	var err error
	switch cfg.backend {
	case scenarios.BackendLocal:
		err = localPreflight(cfg, m, args)
	case scenarios.BackendKube:
		err = m.kube(ctx, cfg.kube)
	}
	if err != nil {
		return &command.ExitError{Code: 2, Err: err}
	}
	return nil
}

// localPreflight checks what the local backend needs: root, /dev/fuse and, unless only checking, the binaries.
func localPreflight(cfg config, m machine, args []string) error {
	if m.euid != 0 {
		return fmt.Errorf("the local backend needs root (it mounts FUSE filesystems and makes mount namespaces): sudo %s", quoteArgs(append([]string{m.argv0}, args...)))
	}
	if err := m.openFuse(); err != nil {
		return fmt.Errorf("the local backend needs /dev/fuse (%w): load the fuse module (modprobe fuse), or give a container the device (--device /dev/fuse)", err)
	}
	if cfg.check {
		return nil
	}
	var bins local.Options
	bins.BinariesIn(cfg.binDir)
	for _, p := range []string{bins.PluginPath, bins.FusePath, bins.WorkloadPath} {
		if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("the local backend needs %s, which does not exist: make build, or --bin-dir=<the directory of csi-plugin, dummy-fuse and dummy-fuse-workload>", p)
		}
	}
	return nil
}

// quoteArgs is args as a shell command line, for a message to copy: plain words as they are, others quoted.
func quoteArgs(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a != "" && strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=.,:/@%+") == "" {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}
