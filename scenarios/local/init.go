package local

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// initArg is the hidden first argument that turns this program into a container's init (see MaybeInit).
const initArg = "__dfc-container-init"

// initConfig is what the runtime hands to a container's init.
type initConfig struct {
	Mounts []initMount `json:"mounts"`
	// Argv is the workload command; Argv[0] is an absolute path.
	Argv []string `json:"argv"`
	// User, when set, is whom the command runs as, without any capability and with no_new_privs (a pod's
	// runAsUser, runAsGroup, capabilities drop ALL, allowPrivilegeEscalation: false); nil runs it as root.
	User *initUser `json:"user,omitempty"`
	// Pod is the UID of the pod whose cgroup the container runs in, as kubelet's runtime does (the OCI spec's
	// cgroupsPath): the setns restore strategy tells a pod's processes by it. Read by launch, not by the init.
	Pod string `json:"-"`
}

// initUser is a container's numeric user and group.
type initUser struct {
	UID int `json:"uid"`
	GID int `json:"gid"`
}

// initMount is one volume mount of the container, as runc gets it from containerd's CRI.
type initMount struct {
	Source      string `json:"source"` // host path (volume dir or kubelet's subPath bind)
	Target      string `json:"target"` // path in the container
	Propagation string `json:"propagation"`
	// Over puts Source over a file the host's tree has at Target, as a container image's own file at that path
	// would be: no tmpfs is put over Target's top directory (the container sees the host's tree there).
	Over bool `json:"over,omitempty"`
}

// MaybeInit runs the container init and exits when this process was started as one (by the local backend,
// which re-executes its own binary); otherwise it returns at once. Call it first in main and in TestMain.
func MaybeInit() {
	if len(os.Args) < 3 || os.Args[1] != initArg {
		return
	}
	err := containerInit(os.Args[2])
	// Only reached on failure: report it on the status pipe (fd 3) like runc reports a failed create.
	status := os.NewFile(3, "status")
	fmt.Fprintf(status, "%v", err)
	os.Exit(127)
}

// containerInit runs as PID 1 of a new PID and mount namespace (clone flags set by the runtime). It sets up
// the mounts the way runc does for a CRI container and executes the workload:
//   - "/" becomes rslave (runc's default rootfs propagation): nothing mounted here leaks to the host, and
//     mounts made on the host below shared mounts still arrive;
//   - a tmpfs over the first component of each mount target (e.g. /mnt) stands in for the container's root
//     filesystem, so creating mount targets never touches the host's files;
//   - each volume is bind-mounted (MS_BIND|MS_REC, runc's "rbind"), then given its propagation: rprivate for
//     None, rslave for HostToContainer.
func containerInit(cfgJSON string) error {
	var cfg initConfig
	if err := json.Unmarshal([]byte(cfgJSON), &cfg); err != nil {
		return fmt.Errorf("container init: bad config: %w", err)
	}
	if len(cfg.Argv) == 0 {
		return fmt.Errorf("container init: no command")
	}
	// no_new_privs is a property of the calling thread (prctl(2)), unlike the IDs, which Go sets on every
	// thread: the prctl and the exec must run on one thread, or the command may start without it.
	runtime.LockOSThread()
	// fd 3 must not reach the workload: its closing tells the runtime that exec succeeded.
	unix.CloseOnExec(3)
	if err := unix.Mount("", "/", "", unix.MS_SLAVE|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("make / rslave: %w", err)
	}
	roots := map[string]bool{}
	for _, m := range cfg.Mounts {
		if m.Over {
			continue
		}
		top := "/" + strings.SplitN(strings.TrimPrefix(filepath.Clean(m.Target), "/"), "/", 2)[0]
		if top == "/" {
			return fmt.Errorf("mount target %q: cannot mount over /", m.Target)
		}
		if roots[top] {
			continue
		}
		roots[top] = true
		if err := unix.Mount("tmpfs", top, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=755"); err != nil {
			return fmt.Errorf("mount tmpfs on %s: %w", top, err)
		}
	}
	for _, m := range cfg.Mounts {
		if err := bindIntoContainer(m); err != nil {
			return err
		}
	}
	if err := os.Chdir("/"); err != nil {
		return err
	}
	if u := cfg.User; u != nil {
		if err := dropPrivileges(*u); err != nil {
			return err
		}
	}
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	if err := syscall.Exec(cfg.Argv[0], cfg.Argv, env); err != nil {
		return fmt.Errorf("exec %s: %w", cfg.Argv[0], err)
	}
	return nil
}

func bindIntoContainer(m initMount) error {
	// runc stats the source to create a target of the same type (the stat containerd did a moment ago on
	// the host may have succeeded from the attribute cache).
	st, err := os.Stat(m.Source)
	if err != nil {
		return fmt.Errorf("error mounting %q to rootfs at %q: stat %s: %w", m.Source, m.Target, m.Source, err)
	}
	if err := os.MkdirAll(filepath.Dir(m.Target), 0o755); err != nil {
		return fmt.Errorf("create parent of mount target %s: %w", m.Target, err)
	}
	if st.IsDir() {
		if err := os.MkdirAll(m.Target, 0o755); err != nil {
			return fmt.Errorf("create mount target %s: %w", m.Target, err)
		}
	} else if _, err := os.Lstat(m.Target); err != nil {
		f, err := os.OpenFile(m.Target, os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return fmt.Errorf("create mount target %s: %w", m.Target, err)
		}
		f.Close()
	}
	if err := unix.Mount(m.Source, m.Target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("error mounting %q to rootfs at %q: %w", m.Source, m.Target, err)
	}
	flag := uintptr(unix.MS_PRIVATE | unix.MS_REC)
	if m.Propagation == "rslave" {
		flag = unix.MS_SLAVE | unix.MS_REC
	}
	if err := unix.Mount("", m.Target, "", flag, ""); err != nil {
		return fmt.Errorf("set propagation %s of %s: %w", m.Propagation, m.Target, err)
	}
	return nil
}

// dropPrivileges becomes u with no supplementary groups: leaving uid 0 clears the permitted and effective
// capabilities (capabilities(7), "Effect of user ID changes on capabilities"), and the exec that follows
// starts with none; no_new_privs keeps set-user-ID binaries from giving any back.
func dropPrivileges(u initUser) error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("set no_new_privs: %w", err)
	}
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setresgid(u.GID, u.GID, u.GID); err != nil {
		return fmt.Errorf("setresgid %d: %w", u.GID, err)
	}
	if err := syscall.Setresuid(u.UID, u.UID, u.UID); err != nil {
		return fmt.Errorf("setresuid %d: %w", u.UID, err)
	}
	return nil
}
