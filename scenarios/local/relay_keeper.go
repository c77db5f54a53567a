package local

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// The relay-keeper mode's parts (topology.RelayKeeper): the keeper container (keeper.go) runs the
// relays as its FUSE servers, with a node table directory that outlives it (keeperRelayDir), and the real
// servers, through the relay server part's executable (relay.go), on the backends the plugin mounts.

// keeperRelayDir is where the keeper's node table directory appears in its container.
const keeperRelayDir = "/mnt/keeper-relay"

// relayNodeDir returns the keeper's relay flags and the mount of its node table directory, one per run, owned
// by the keeper's user: every keeper instance of the run finds its predecessors' tables there, as the chart's
// hostPath would give them.
func (k *keeperPart) relayNodeDir() ([]string, initMount, error) {
	dir := filepath.Join(k.b.dir, "keeper-relay")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, initMount{}, err
	}
	if err := os.Chown(dir, keeperUser, keeperUser); err != nil {
		return nil, initMount{}, err
	}
	args := []string{"--relay-node-dir=" + keeperRelayDir}
	// The keeper runs the real server on each backend the plugin mounts: the server part's settings, through
	// the relay server part's executable (which steps replace for an upgrade or a server that cannot start).
	spec := k.b.peers.server.spec(k.b.peers.relayServer.exe)
	args = append(args, "--relay-server="+spec.Name, "--relay-server-path="+spec.Path)
	for k, v := range spec.Opts {
		args = append(args, "--relay-server-opt="+k+"="+v)
	}
	if w := k.b.sc.Plugin.RelayBackendWait; w > 0 {
		args = append(args, "--relay-backend-wait="+w.String())
	}
	if k.b.sc.Plugin.Writable {
		// Its relays forward the writes: the plugin's --relay-writable mounts the volume read-write, the
		// keeper's makes the relays it runs writable, with their journals under the node directory.
		args = append(args, "--relay-writable")
	}
	return args, initMount{Source: dir, Target: keeperRelayDir, Propagation: "rprivate"}, nil
}

// keptRelayPart is the relay of the relay-keeper mode: the keeper's FUSE server that serves the volume.
type keptRelayPart struct {
	noPart
	k          *keeperPart
	lastKilled int // in the keeper's PID namespace
}

func newKeptRelayPart(b *Backend, _ *scenarios.Env) (part, error) {
	return &keptRelayPart{k: b.peers.keeper}, nil
}

// kill sends SIGKILL to the relay that serves the volume, as the keeper's status file names it.
func (r *keptRelayPart) kill(ctx context.Context) error {
	k := r.k
	_, err := k.killServing(ctx, "relay", func(pid, nsPID int) {
		r.lastKilled = nsPID
		k.b.rec.Add(scenarios.Event{Source: scenarios.SrcComponent, Component: topology.RelayProcess, Kind: scenarios.KKilled,
			Message: fmt.Sprintf("SIGKILL relay pid %d (%d in keeper#%d's namespace)", pid, nsPID, k.cur.n)})
	})
	return err
}

// start waits until the keeper says another relay serves the volume.
func (r *keptRelayPart) start(ctx context.Context) error {
	return scenarios.Await(ctx, relayWait, 10*time.Millisecond, "the keeper to start a relay that serves the volume", func() (bool, error) {
		pid := int(r.k.servedBy.Load())
		if pid == 0 || pid == r.lastKilled {
			return false, nil
		}
		r.k.b.rec.Add(scenarios.Event{Source: scenarios.SrcComponent, Component: topology.RelayProcess, Kind: scenarios.KReady,
			Message: fmt.Sprintf("keeper's relay pid %d serves (in its namespace)", pid)})
		return true, nil
	})
}
