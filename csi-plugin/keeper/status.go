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
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return pid, fmt.Errorf("server pid %d of volume %s is gone already (the status is from %s)", pid, volume, st.Time.Format(time.RFC3339Nano))
		}
		return pid, fmt.Errorf("kill -KILL %d: %w", pid, err)
	}
	return pid, nil
}
