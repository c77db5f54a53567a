package keeper

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"syscall"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/atomicfile"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/version"
)

// Status is what the keeper writes to its status file after every change: which server process serves which
// connection. `csi-plugin keeper status` prints it; `csi-plugin keeper crash` uses it to find the server to
// kill. PIDs are those of the keeper's PID namespace.
type Status struct {
	PID     int       `json:"pid"`
	Version string    `json:"version"`
	Time    time.Time `json:"time"`
	// Plugin says whether the session with the plugin is up.
	Plugin      bool           `json:"plugin"`
	Servers     []ServerStatus `json:"servers"`
	Connections []ConnStatus   `json:"connections"`
}

// ServerStatus is one FUSE server process.
type ServerStatus struct {
	PID     int      `json:"pid"`
	Version string   `json:"version,omitempty"`
	Volumes []string `json:"volumes"`
}

// ConnStatus is one connection the keeper holds.
type ConnStatus struct {
	Volume string `json:"volume"`
	// ServerPID is the server it was handed to, 0 while none.
	ServerPID int `json:"serverPID,omitempty"`
	// Initialised says that its INIT was answered (the keeper has its handover record).
	Initialised bool `json:"initialised"`
}

func (k *Keeper) status() Status {
	st := Status{PID: os.Getpid(), Version: version.Version, Time: time.Now().UTC(), Plugin: k.plugin != nil,
		Servers: []ServerStatus{}, Connections: []ConnStatus{}}
	for _, s := range k.servers {
		ss := ServerStatus{PID: s.pid, Version: s.version, Volumes: []string{}}
		for v := range s.volumes {
			ss.Volumes = append(ss.Volumes, v)
		}
		sort.Strings(ss.Volumes)
		st.Servers = append(st.Servers, ss)
	}
	for _, cn := range k.sortedConns() {
		cs := ConnStatus{Volume: cn.volume, Initialised: cn.init != nil}
		if cn.server != nil {
			cs.ServerPID = cn.server.pid
		}
		st.Connections = append(st.Connections, cs)
	}
	return st
}

// writeStatus replaces the status file, if there is one. A failure is logged once per kind of error: the
// status serves people and tests, the keeper's work goes on without it.
func (k *Keeper) writeStatus() {
	if k.cfg.StatusFile == "" {
		return
	}
	b, err := json.MarshalIndent(k.status(), "", "  ")
	if err == nil {
		err = atomicfile.Write(k.cfg.StatusFile, append(b, '\n'), 0o644)
	}
	if err != nil && (k.statusErr == nil || k.statusErr.Error() != err.Error()) {
		k.logf("writing the status file: %v", err)
	}
	k.statusErr = err
}

// ReadStatus reads a status file.
func ReadStatus(path string) (Status, error) {
	var st Status
	f, err := os.Open(path)
	if err != nil {
		return st, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 16<<20))
	if err != nil {
		return st, fmt.Errorf("reading %s: %w", path, err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("%s: %w", path, err)
	}
	return st, nil
}

// ServerOf returns the PID of the server that serves volume, per the status.
func (st Status) ServerOf(volume string) (int, error) {
	for _, c := range st.Connections {
		if c.Volume != volume {
			continue
		}
		if c.ServerPID == 0 {
			return 0, fmt.Errorf("volume %s has no FUSE server right now", volume)
		}
		return c.ServerPID, nil
	}
	return 0, fmt.Errorf("the keeper holds no connection of volume %s", volume)
}

// Crash sends SIGKILL to the FUSE server that serves volume according to the status file, as a crash of that
// server would end it. It must run in the keeper's PID namespace (e.g. kubectl exec into the keeper
// container): the status names PIDs as the keeper sees them.
func Crash(statusFile, volume string) (int, error) {
	st, err := ReadStatus(statusFile)
	if err != nil {
		return 0, err
	}
	pid, err := st.ServerOf(volume)
	if err != nil {
		return 0, err
	}
	return pid, killServer(pid, volume, st)
}

// killServer sends SIGKILL to server pid of volume, as status st names it.
func killServer(pid int, volume string, st Status) error {
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("server pid %d of volume %s is gone already (the status is from %s)", pid, volume, st.Time.Format(time.RFC3339Nano))
		}
		return fmt.Errorf("kill -KILL %d: %w", pid, err)
	}
	return nil
}

// statusPoll is how often CrashSuccessor and CrashLoop read the status while they wait for the next server: the
// keeper names a server right after starting it, and a Go process takes a few milliseconds to take a
// connection over.
const statusPoll = time.Millisecond

// CrashSuccessor kills the FUSE server of volume as Crash does, then its successor the moment the keeper names
// it in the status (before or while it takes the connection over): a death in the middle of the recovery. It
// gives up after timeout without a successor.
func CrashSuccessor(statusFile, volume string, timeout time.Duration) (first, next int, err error) {
	if first, err = Crash(statusFile, volume); err != nil {
		return first, 0, err
	}
	deadline := time.Now().Add(timeout)
	for {
		st, err := ReadStatus(statusFile)
		if err != nil {
			return first, 0, err
		}
		if pid, _ := st.ServerOf(volume); pid != 0 && pid != first {
			return first, pid, killServer(pid, volume, st)
		}
		if time.Now().After(deadline) {
			return first, 0, fmt.Errorf("the keeper named no successor of server pid %d of volume %s within %s", first, volume, timeout)
		}
		time.Sleep(statusPoll)
	}
}

// CrashLoop kills the FUSE server of volume and then every server the keeper starts for it, the moment the
// status names it, as if no server could start: until the keeper holds the volume's connection no more (the
// plugin aborted it, or it was unstaged), or for at most d. It returns the PIDs it killed.
func CrashLoop(statusFile, volume string, d time.Duration) ([]int, error) {
	first, err := Crash(statusFile, volume)
	if err != nil {
		return nil, err
	}
	killed := []int{first}
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(statusPoll) {
		st, err := ReadStatus(statusFile)
		if err != nil {
			return killed, err
		}
		pid, err := st.ServerOf(volume)
		switch {
		case err != nil && !st.holds(volume):
			return killed, nil // the connection is over: nothing to crash any more
		case pid == 0 || pid == killed[len(killed)-1]:
			continue
		}
		// A server gone by itself meanwhile (ESRCH) is no failure of the loop.
		if err := killServer(pid, volume, st); err == nil {
			killed = append(killed, pid)
		}
	}
	return killed, nil
}

// holds reports whether the status lists a connection of volume.
func (st Status) holds(volume string) bool {
	for _, c := range st.Connections {
		if c.Volume == volume {
			return true
		}
	}
	return false
}
