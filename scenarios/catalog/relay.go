package catalog

import (
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// relayNoBackendWait is the relay's backend wait in relay-no-backend (csi-plugin --relay-backend-wait; 30 s by
// default, shortened so the row costs seconds, not half a minute), and relayNoBackendWithin bounds the reader's
// error: the wait, with room for a loaded machine and, on a real cluster, for the keeper rollout that makes the
// server fail (a few seconds).
const (
	relayNoBackendWait   = 5 * time.Second
	relayNoBackendWithin = relayNoBackendWait + 10*time.Second
)

// relayLocalOnly is why the rows that give the plugin's real server another build run on the local backend only.
const relayLocalOnly = "in the relay mode the real server runs in the plugin's container: on a real cluster its next build or one " +
	"that cannot start comes with a new plugin pod, whose start ends every connection (relay-plugin-restart); the relay-keeper " +
	"mode runs the real server in the keeper, whose rollout the kube backend runs (relay-keeper-server-upgrade, relay-keeper-no-backend)"

// relayEveryServer is why CI runs the relay rows with each real server on the real kubelet.
const relayEveryServer = "the relay is for real servers, which cannot take a connection over: what it keeps is measured with them"

// relayMode is the plugin's relay mode: the staging connection is served by a relay that can be taken over, in
// front of the real server's mount, which the plugin keeps private and mounts again when the server dies. Its
// rows hold for every server (the relay never needs the server to take over anything), and every reader opens
// the file with O_DIRECT so that every read reaches the relay and, through it, the real server.
var relayMode = mode{name: "relay-", title: "Relay mode: ", directIO: true, base: scenarios.Scenario{
	Plugin: scenarios.Plugin{Mode: topology.Relay},
	Pod:    pod(relayReaders()...),
	// CI runs them with each real server on the real kubelet: the relay exists for servers that cannot take a
	// connection over.
	Servers: scenarios.AllServers, EveryServer: relayEveryServer,
}}

// relayScenarios are the rows of the relay mode (relayMode).
func relayScenarios() []scenarios.Scenario {
	m := relayMode
	return append(relayFaults(m, relayText),
		restartHeals(m.lone(true).row("plugin-restart", "the plugin restarts with restoreMounts; the relay and the server died with it",
			"What this first cut does not keep: the plugin's death ends the staging connection (relay-all-holders), "+
				"the workload gets ENOTCONN and exits, and the restarted plugin stages the volume again (a new backend "+
				"mount, server, relay and node table; nothing of the dead ones is adopted), so the restarted container "+
				"reads again, exactly as in restart.")),
		holdersDie(m.lone(false).row("all-holders", "the plugin dies, and the relay and the server with it",
			"The limit, and where this mode stands short of the keeper's: the relay and the real server are "+
				"children of the plugin, so the plugin's death takes every holder of the staging connection at once and "+
				"the kernel ends it, exactly as in restart-no-restore. The plugin comes back, but no process had the "+
				"connection to hand on.")),
	)
}

// relayText is what the relay mode's rows of the real server and of the relay show: the plugin restarts both.
// The rows that give the real server another build run on the local backend only (relayLocalOnly).
var relayText = relayModeText{
	serverCrash: "The server is stopped with a read inside it, then killed. The relay finds its backend dead and waits; " +
		"the plugin detaches the dead backend mount, mounts a new one in its own directory and starts the server " +
		"on it; the relay opens the new root and runs the failed requests again. The descriptor opened before " +
		"the crash keeps reading, new opens and the subPath bind work: a stall, no error.",
	serverUpgrade: "The executable the plugin runs is replaced by the next one (the server with a new flag), and the running " +
		"server is killed; the plugin starts the new one on a new backend mount and the relay carries on: the " +
		"workloads keep reading, the new server's command line shows the new flag.",
	crash: "The plugin keeps a copy of the staging connection, so the relay's death only pauses it; a successor " +
		"the plugin forked in advance takes the connection over with the handover record and node table its " +
		"predecessor wrote, and the kernel resends what the dead relay had read: no read fails.",
	inFlight: "The server is stopped (SIGSTOP; for gcsfuse its fake GCS server, so that the read waits inside gcsfuse " +
		"for its bucket) until the reader's read is inside it, then killed: the relay's request to it fails with ECONNABORTED, and the relay runs it again on the new server, so the reader gets " +
		"\"Hello world!\" late instead of an error.",
	noBackend: "The server's executable is replaced by one that fails at once and the server is killed. The plugin " +
		"keeps trying to start it (the pause between tries doubling up to a second); the relay lets requests wait at most its " +
		"backend wait (--relay-backend-wait, here 5 s) and then answers with the backend's error (ENOTCONN), so the reader gets an error " +
		"and exits instead of hanging. Once the real executable is back, the plugin's next try serves again.",
	newBuild: func(s scenarios.Scenario) scenarios.Scenario {
		s.Backends, s.BackendsWhy, s.EveryServer = []string{scenarios.BackendLocal}, relayLocalOnly, ""
		return s
	},
}

// relayModeText is what the rows of the real server and of the relay say in each relay mode: they hold in both
// as they are, only who restarts what differs, and where a new build of the real server can be rolled out.
type relayModeText struct {
	serverCrash, serverUpgrade, crash, inFlight, noBackend string
	// newBuild is where the rows that give the real server another build run.
	newBuild func(scenarios.Scenario) scenarios.Scenario
}

// relayFaults are the rows of the real server and of the relay in relay mode m, with its text.
func relayFaults(m mode, text relayModeText) []scenarios.Scenario {
	noBackend := m.lone(true).row("no-backend", "the real server cannot come back; the relay ends the wait", text.noBackend)
	noBackend.Plugin.RelayBackendWait = relayNoBackendWait
	noBackend.Steps = []scenarios.Step{warmUp, scenarios.Kill(topology.RelayServerGone), exitsWithin(relayNoBackendWithin),
		scenarios.Start(topology.RelayServerGone), scenarios.Kill(topology.WorkloadPod)}
	noBackend.Expect = endsWait(relayNoBackendWithin)
	return []scenarios.Scenario{
		survives(m.row("server-crash", "the real FUSE server behind the relay is killed", text.serverCrash),
			scenarios.Kill(topology.RelayServer), scenarios.Start(topology.RelayServer)),
		text.newBuild(survives(m.row("server-upgrade", "the real FUSE server is replaced by its next build (new flags)", text.serverUpgrade),
			scenarios.Upgrade(topology.RelayServer))),
		survives(m.row("crash", "the relay itself is killed", text.crash),
			scenarios.Kill(topology.RelayProcess), scenarios.Start(topology.RelayProcess)),
		readInFlight(m.lone(true).row("in-flight", "the real server is killed while a read is inside it", text.inFlight),
			scenarios.Kill(topology.RelayServer), scenarios.Start(topology.RelayServer),
			scenarios.Observe(scenarios.Dur{Fixed: time.Second, Reads: 3})),
		text.newBuild(noBackend),
	}
}

// relayReaders are the workload containers of the relay rows: a descriptor kept open from before any kill, an
// open for every read, and a subPath bind, all with O_DIRECT and reading every few milliseconds.
func relayReaders() []scenarios.Container {
	out := keeperReaders()
	for i := range out {
		out[i].DirectIO = true
	}
	return out
}
