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

// relayEveryServer is why CI runs the relay rows with each real server on the real kubelet: the relay exists
// for servers that cannot take a connection over.
const relayEveryServer = "the relay is for real servers, which cannot take a connection over: what it keeps is measured with them"

// relayScenarios are the rows of the plugin's relay mode: the staging connection is served by a relay that can
// be taken over, in front of the real server's mount, which the plugin keeps private and mounts again when the
// server dies. They hold for every server (the relay never needs the server to take over anything), and every
// reader opens the file with O_DIRECT so that every read reaches the relay and, through it, the real server.
func relayScenarios() []scenarios.Scenario {
	mode := scenarios.Plugin{Mode: topology.Relay}
	readers := relayReaders()
	neverFail := func(cs ...string) []scenarios.Expectation {
		var out []scenarios.Expectation
		for _, c := range cs {
			out = append(out, scenarios.Expectation{Check: scenarios.NeverFails{C: c, After: scenarios.AfterKill, Reads: 10}})
		}
		return append(out, scenarios.Expectation{Check: scenarios.VolumeDirAlive{}})
	}
	row := func(s scenarios.Scenario) scenarios.Scenario {
		s.Servers, s.EveryServer = scenarios.AllServers, relayEveryServer
		return s
	}
	localRow := func(s scenarios.Scenario) scenarios.Scenario {
		s = row(s)
		s.Backends, s.BackendsWhy, s.EveryServer = []string{scenarios.BackendLocal}, relayLocalOnly, ""
		return s
	}
	return []scenarios.Scenario{
		row(scenarios.Scenario{
			Name:  "relay-server-crash",
			Title: "Relay mode: the real FUSE server behind the relay is killed",
			Shows: "The server is stopped with a read inside it, then killed. The relay finds its backend dead and waits; " +
				"the plugin detaches the dead backend mount, mounts a new one in its own directory and starts the server " +
				"on it; the relay opens the new root and runs the failed requests again. The descriptor opened before " +
				"the crash keeps reading, new opens and the subPath bind work: a stall, no error.",
			Plugin: mode,
			Pod:    scenarios.Pod{RestartPolicy: scenarios.RestartAlways, Containers: readers},
			Steps: []scenarios.Step{
				warmUp,
				scenarios.Kill(topology.RelayServer),
				scenarios.Start(topology.RelayServer),
				scenarios.Observe(watchReads),
			},
			Expect: neverFail(reader, reopen, sub),
		}),
		localRow(scenarios.Scenario{
			Name:  "relay-server-upgrade",
			Title: "Relay mode: the real FUSE server is replaced by its next build (new flags)",
			Shows: "The executable the plugin runs is replaced by the next one (the server with a new flag), and the running " +
				"server is killed; the plugin starts the new one on a new backend mount and the relay carries on: the " +
				"workloads keep reading, the new server's command line shows the new flag.",
			Plugin: mode,
			Pod:    scenarios.Pod{RestartPolicy: scenarios.RestartAlways, Containers: readers},
			Steps: []scenarios.Step{
				warmUp,
				scenarios.Upgrade(topology.RelayServer),
				scenarios.Observe(watchReads),
			},
			Expect: neverFail(reader, reopen, sub),
		}),
		row(scenarios.Scenario{
			Name:  "relay-crash",
			Title: "Relay mode: the relay itself is killed",
			Shows: "The plugin keeps a copy of the staging connection, so the relay's death only pauses it; a successor " +
				"the plugin forked in advance takes the connection over with the handover record and node table its " +
				"predecessor wrote, and the kernel resends what the dead relay had read: no read fails.",
			Plugin: mode,
			Pod:    scenarios.Pod{RestartPolicy: scenarios.RestartAlways, Containers: readers},
			Steps: []scenarios.Step{
				warmUp,
				scenarios.Kill(topology.RelayProcess),
				scenarios.Start(topology.RelayProcess),
				scenarios.Observe(watchReads),
			},
			Expect: neverFail(reader, reopen, sub),
		}),
		row(scenarios.Scenario{
			Name:  "relay-in-flight",
			Title: "Relay mode: the real server is killed while a read is inside it",
			Shows: "The server is stopped (SIGSTOP; for gcsfuse its fake GCS server, so that the read waits inside gcsfuse " +
				"for its bucket) until the reader's read is inside it, then killed: the relay's request to it fails with ECONNABORTED, and the relay runs it again on the new server, so the reader gets " +
				"\"Hello world!\" late instead of an error.",
			Plugin: mode,
			Pod: scenarios.Pod{RestartPolicy: scenarios.RestartAlways, Containers: []scenarios.Container{
				{Name: reader, ExitOnError: true, KeepOpen: true, DirectIO: true},
			}},
			Steps: []scenarios.Step{
				warmUp,
				scenarios.Kill(topology.RelayServer),
				scenarios.Start(topology.RelayServer),
				scenarios.Observe(scenarios.Dur{Fixed: time.Second, Reads: 3}),
			},
			Expect: []scenarios.Expectation{
				{Check: scenarios.InFlightReadSucceeds{C: reader}},
				{Check: scenarios.NeverFails{C: reader, After: scenarios.AfterKill, Reads: 2}},
			},
		}),
		localRow(scenarios.Scenario{
			Name:  "relay-no-backend",
			Title: "Relay mode: the real server cannot come back; the relay ends the wait",
			Shows: "The server's executable is replaced by one that fails at once and the server is killed. The plugin " +
				"keeps trying to start it (the pause between tries doubling up to a second); the relay lets requests wait at most its " +
				"backend wait (--relay-backend-wait, here 5 s) and then answers with the backend's error (ENOTCONN), so the reader gets an error " +
				"and exits instead of hanging. Once the real executable is back, the plugin's next try serves again.",
			Plugin: scenarios.Plugin{Mode: topology.Relay, RelayBackendWait: relayNoBackendWait},
			Pod: scenarios.Pod{RestartPolicy: scenarios.RestartAlways, Containers: []scenarios.Container{
				{Name: reader, ExitOnError: true, KeepOpen: true, DirectIO: true},
			}},
			Steps: []scenarios.Step{
				warmUp,
				scenarios.Kill(topology.RelayServerGone),
				scenarios.WaitFor(scenarios.Exits{C: reader, Code: 1}, scenarios.Dur{Fixed: relayNoBackendWithin + 10*time.Second}),
				scenarios.Start(topology.RelayServerGone),
				scenarios.Kill(topology.WorkloadPod),
			},
			Expect: []scenarios.Expectation{
				{Check: scenarios.FailsWithin{C: reader, Within: scenarios.Dur{Fixed: relayNoBackendWithin}}},
				{Check: scenarios.Exits{C: reader, Code: 1}},
			},
		}),
		row(scenarios.Scenario{
			Name:  "relay-plugin-restart",
			Title: "Relay mode: the plugin restarts with restoreMounts; the relay and the server died with it",
			Shows: "What this first cut does not keep: the plugin's death ends the staging connection (relay-all-holders), " +
				"the workload gets ENOTCONN and exits, and the restarted plugin stages the volume again (a new backend " +
				"mount, server, relay and node table; nothing of the dead ones is adopted), so the restarted container " +
				"reads again, exactly as in restart.",
			Plugin: scenarios.Plugin{Mode: topology.Relay, RestoreMounts: true, RestoreStrategy: scenarios.StrategyRebind},
			Pod: scenarios.Pod{RestartPolicy: scenarios.RestartAlways, Containers: []scenarios.Container{
				{Name: reader, ExitOnError: true, KeepOpen: true, DirectIO: true},
			}},
			Steps: deadThenBack(
				scenarios.WaitFor(scenarios.StartFails{C: reader, Contains: failedToStatVolume}, scenarios.Dur{Fixed: 10 * time.Second, Backoffs: 4}),
				scenarios.WaitFor(scenarios.Recovers{C: reader}, scenarios.Dur{Fixed: 10 * time.Second, Backoffs: 12}),
				scenarios.Observe(scenarios.Dur{Reads: 3}),
			),
			Expect: []scenarios.Expectation{
				{Check: scenarios.FailsWith{C: reader, Errno: "ENOTCONN", Within: scenarios.Dur{Fixed: 5 * time.Second, Reads: 2}}},
				{Check: scenarios.Exits{C: reader, Code: 1}},
				{Check: scenarios.StartFails{C: reader, Contains: failedToStatVolume, Errno: "ENOTCONN"}},
				{Check: scenarios.VolumeDir{After: scenarios.AfterPluginBack}},
				{Check: scenarios.Recovers{C: reader, Instance: scenarios.NewInstance}},
			},
		}),
		row(scenarios.Scenario{
			Name:  "relay-all-holders",
			Title: "Relay mode: the plugin dies, and the relay and the server with it",
			Shows: "The limit, and where this mode stands short of the keeper's: the relay and the real server are " +
				"children of the plugin, so the plugin's death takes every holder of the staging connection at once and " +
				"the kernel ends it, exactly as in restart-no-restore. The plugin comes back, but no process had the " +
				"connection to hand on.",
			Plugin: mode,
			Pod: scenarios.Pod{RestartPolicy: scenarios.RestartAlways, Containers: []scenarios.Container{
				{Name: reader, KeepOpen: true, DirectIO: true},
			}},
			Steps: []scenarios.Step{
				warmUp,
				scenarios.KillPlugin(),
				untilENOTCONN,
				hostDead,
				scenarios.StartPlugin(),
				scenarios.Observe(watchReads),
			},
			Expect: []scenarios.Expectation{
				{Check: scenarios.FailsWith{C: reader, Errno: "ENOTCONN", Within: scenarios.Dur{Fixed: 5 * time.Second, Reads: 2}}},
				{Check: scenarios.KeepsFailing{C: reader, Errno: "ENOTCONN", After: scenarios.AfterPluginBack}},
				{Check: scenarios.NeverRecovers{C: reader, After: scenarios.AfterPluginBack, For: watchReads}},
				{Check: scenarios.Restarts{C: reader, Min: 0, Max: 0}},
				{Check: scenarios.VolumeDir{Errno: "ENOTCONN", After: scenarios.AfterPluginBack}},
			},
		}),
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
