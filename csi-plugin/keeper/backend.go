package keeper

import (
	"context"
	"fmt"
	"os"
	"os/exec"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/contract"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/handover"
)

// The real servers of the plugin's relay-keeper mode: the plugin mounts each volume's backend (it alone may
// mount) and hands its /dev/fuse descriptor over (backend-serve); the keeper runs the real server on it, so that
// the server outlives the plugin as the relay does, and tells the plugin when it exits (backend-ended): the
// plugin then mounts a new backend. The keeper keeps no copy of the descriptor: a dead server must end the
// backend's connection (ENOTCONN, which the relay waits out), not leave its requests queued.

// backendServer is the real server of one volume's backend.
type backendServer struct {
	volume   string
	cmd      *exec.Cmd
	stopping bool // the keeper ends it: its exit is not reported
}

// serveBackend starts the real server on f, the volume's new backend connection, replacing the one that ran.
func (k *Keeper) serveBackend(volume string, f *os.File) {
	defer f.Close()
	if k.realServer == nil {
		k.logf("volume %s: the plugin handed over a backend, but this keeper runs no real server (--relay-server)", volume)
		k.tellPlugin(handover.Msg{Kind: handover.BackendEnded, Volume: volume, Reason: "the keeper runs no real server"})
		return
	}
	k.stopBackend(volume)
	cmd := fuseserver.Command(k.realServer, k.realArgs)
	if h := k.handoff; h != nil {
		if err := h.Make(); err != nil {
			k.logf("volume %s: cannot start the real server: %v", volume, err)
			k.tellPlugin(handover.Msg{Kind: handover.BackendEnded, Volume: volume, Reason: fmt.Sprintf("starting it: %v", err)})
			return
		}
		cmd.Env = append(cmd.Env, h.Env()...)
	}
	cmd.ExtraFiles = []*os.File{f}
	cmd.Stdout, cmd.Stderr = k.log, k.log
	if err := k.spawn.Start(context.Background(), cmd); err != nil {
		k.logf("volume %s: cannot start the real server: %v", volume, err)
		k.tellPlugin(handover.Msg{Kind: handover.BackendEnded, Volume: volume, Reason: fmt.Sprintf("starting it: %v", err)})
		return
	}
	b := &backendServer{volume: volume, cmd: cmd}
	k.backends[volume] = b
	k.logf(contract.KeeperRealServerFormat, volume, cmd.Process.Pid, cmd)
	go func() {
		err := cmd.Wait()
		k.emit(event{kind: backendGone, backend: b, err: exitReason(err)})
	}()
}

// backendGone reports the exit of a real server the keeper did not end itself.
func (k *Keeper) backendGone(b *backendServer, err error) {
	if k.backends[b.volume] == b {
		delete(k.backends, b.volume)
	}
	if b.stopping {
		return
	}
	k.logf(contract.KeeperRealServerExitedFormat, b.volume, b.cmd.Process.Pid, err)
	k.tellPlugin(handover.Msg{Kind: handover.BackendEnded, Volume: b.volume, Reason: fmt.Sprintf("pid %d exited (%v)", b.cmd.Process.Pid, err)})
}

// stopBackend kills the volume's real server (SIGKILL: it serves a descriptor, and a graceful stop would try
// to unmount what it did not mount).
func (k *Keeper) stopBackend(volume string) {
	if b := k.backends[volume]; b != nil {
		b.stopping = true
		_ = b.cmd.Process.Kill()
		delete(k.backends, volume)
	}
}
