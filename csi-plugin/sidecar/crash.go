package sidecar

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/command"
)

// Crash is `csi-plugin server-crash` (also called `sidecar-crash`): run in a container whose PID 1 is
// csi-plugin — the FUSE sidecar, or the plugin in the child mode — (kubectl exec, or client-go's
// remotecommand), it kills that process's FUSE servers with SIGKILL, as a crash of a server would. The sidecar
// (`csi-plugin sidecar`) then exits with the server's status (137) and kubelet restarts the native sidecar; the
// plugin logs the exit and leaves the mount dead. With --stop it sends SIGSTOP instead, so that the next read
// waits inside the server until it is killed (a crash under load). A scenario needs this on a real cluster: the
// image has no shell and no kill, and PID 1 itself cannot be killed from inside its own PID namespace (the
// kernel drops signals to a namespace's init that it has no handler for, SIGKILL included).
//
// The servers are found as the kernel lists PID 1's children (/proc/1/task/*/children), never by their name; and
// only when PID 1 runs this same executable, so that nothing happens when it is run anywhere but in such a
// container (on a host, PID 1's children are every service). Where PID 1 has children of several roles (the
// relay mode's relay, its standby and the real server), --with-arg and --without-arg pick them by an argument
// of their command line.
func Crash(_ context.Context, args []string, streams command.Streams) error {
	fl := flag.NewFlagSet("csi-plugin server-crash", flag.ContinueOnError)
	fl.SetOutput(streams.Err)
	stop := fl.Bool("stop", false, "send SIGSTOP instead of SIGKILL: the servers stop answering, alive (kill them later, as a crash under load)")
	var sel selection
	fl.Var(&sel.with, "with-arg", "only the children one of whose arguments is exactly this (repeatable: all of them)")
	fl.Var(&sel.without, "without-arg", "only the children none of whose arguments is this (repeatable)")
	fl.Usage = func() {
		fmt.Fprintln(fl.Output(), "Usage: csi-plugin server-crash [--stop] [--with-arg ARG]... [--without-arg ARG]...   (also: csi-plugin sidecar-crash)\n\n"+
			"In a container whose PID 1 is csi-plugin (the FUSE sidecar, or the plugin in the child mode): SIGKILL its\n"+
			"FUSE servers (PID 1's children), as a crash does.\n\nFlags:")
		fl.PrintDefaults()
	}
	if err := command.Parse(fl, args); err != nil {
		return err
	}
	if fl.NArg() != 0 {
		return command.Usagef("unexpected arguments: %q", fl.Args())
	}
	sig := syscall.SIGKILL
	if *stop {
		sig = syscall.SIGSTOP
	}
	return crash("/proc", 1, sig, sel, streams.Out)
}

// args is a repeatable string flag.
type args []string

func (a *args) String() string     { return strings.Join(*a, ",") }
func (a *args) Set(v string) error { *a = append(*a, v); return nil }

// selection picks children by their command line: every argument of with among theirs, none of without.
type selection struct{ with, without args }

func (s selection) matches(cmdline []string) bool {
	for _, a := range s.with {
		if !slices.Contains(cmdline, a) {
			return false
		}
	}
	return !slices.ContainsFunc(s.without, func(a string) bool { return slices.Contains(cmdline, a) })
}

func (s selection) String() string {
	if len(s.with) == 0 && len(s.without) == 0 {
		return ""
	}
	return fmt.Sprintf(" with arguments %q and without %q", s.with, s.without)
}

// crash sends sig to every child of process init (a csi-plugin running this same executable) that sel picks and
// says which, in /proc mounted at proc.
func crash(proc string, init int, sig syscall.Signal, sel selection, out io.Writer) error {
	initDir := filepath.Join(proc, strconv.Itoa(init))
	same, err := sameFile(filepath.Join(initDir, "exe"), filepath.Join(proc, "self", "exe"))
	if err != nil {
		return fmt.Errorf("is pid %d csi-plugin? %w", init, err)
	}
	if !same {
		return fmt.Errorf("pid %d does not run this executable: not in a container of csi-plugin, nothing killed", init)
	}
	children, err := childrenOf(initDir)
	if err != nil {
		return err
	}
	if len(children) == 0 {
		return fmt.Errorf("pid %d (csi-plugin) has no child: no FUSE server runs (no volume staged, or no descriptor received yet?)", init)
	}
	var errs []error
	picked := 0
	for _, pid := range children {
		cmdline, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "cmdline"))
		if err != nil || !sel.matches(strings.Split(strings.TrimSuffix(string(cmdline), "\x00"), "\x00")) {
			continue // ended, or not picked
		}
		picked++
		comm, _ := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "comm"))
		// Said before it is done: in a sidecar container, this process dies with the sidecar right after the kill.
		logf(out, "%s to pid %d (%s), the FUSE server of pid %d", unix.SignalName(sig), pid, strings.TrimSpace(string(comm)), init)
		if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("%s pid %d: %w", unix.SignalName(sig), pid, err))
		}
	}
	if picked == 0 {
		return fmt.Errorf("pid %d (csi-plugin) has no child%s: nothing killed", init, sel)
	}
	return errors.Join(errs...)
}

// childrenOf lists the children of the process at dir (/proc/<pid>), of all its threads: a child belongs to the
// thread that forked it.
func childrenOf(dir string) ([]int, error) {
	files, err := filepath.Glob(filepath.Join(dir, "task", "*", "children"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no %s/task/*/children (a kernel without CONFIG_PROC_CHILDREN?): %v", dir, err)
	}
	var pids []int
	for _, f := range files {
		b, err := os.ReadFile(f)
		if errors.Is(err, os.ErrNotExist) {
			continue // the thread ended
		}
		if err != nil {
			return nil, err
		}
		for _, s := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(s)
			if err != nil {
				return nil, fmt.Errorf("%s: %q is no pid", f, s)
			}
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

func sameFile(a, b string) (bool, error) {
	sa, err := os.Stat(a)
	if err != nil {
		return false, err
	}
	sb, err := os.Stat(b)
	if err != nil {
		return false, err
	}
	return os.SameFile(sa, sb), nil
}
