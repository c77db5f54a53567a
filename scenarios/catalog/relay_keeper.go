package catalog

import (
	"strings"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// relayKeeperScenarios are the rows of the relay-keeper mode: the relay mode's rows that apply (the real
// server killed, upgraded, killed with a read inside it, unable to come back; the relay killed), and the
// crashes the relay mode could not keep: the plugin's and the keeper's. The keeper holds the staging connection
// with the plugin and runs the relay and the real server; the plugin mounts the private backend the real server
// serves.
func relayKeeperScenarios() []scenarios.Scenario {
	// Every row runs on real kubelets too: the kube backend rolls the keeper (keeper.relayServerArgs) for the
	// real server's next build and for one that cannot start, as a user does.
	onBackends := func(s scenarios.Scenario) scenarios.Scenario {
		s.Backends, s.BackendsWhy, s.EveryServer = nil, "", relayEveryServer
		return s
	}
	mode := scenarios.Plugin{Mode: topology.RelayKeeper, RestoreMounts: true, RestoreStrategy: scenarios.StrategyRebind, Keeper: scenarios.Keeper{DirectIO: true}}
	readers := relayReaders()
	neverFail := func(cs ...string) []scenarios.Expectation {
		var out []scenarios.Expectation
		for _, c := range cs {
			out = append(out, scenarios.Expectation{Check: scenarios.NeverFails{C: c, After: scenarios.AfterKill, Reads: 10}})
		}
		return append(out, scenarios.Expectation{Check: scenarios.VolumeDirAlive{}})
	}
	row := func(s scenarios.Scenario) scenarios.Scenario {
		s.Servers = scenarios.AllServers
		return onBackends(s)
	}
	out := []scenarios.Scenario{
		row(scenarios.Scenario{
			Name:  "relay-keeper-plugin-restart",
			Title: "Relay-keeper mode: the plugin restarts; the keeper's relay and real server serve on",
			Shows: "The keeper holds the staging connection, runs the relay and the real server, and its relay holds the " +
				"backend's root: the plugin's death touches none of them, and the workloads read on while it is down. " +
				"The restarted plugin takes its copy of the connection back from the keeper and mounts nothing.",
			Plugin: mode,
			Pod:    scenarios.Pod{RestartPolicy: scenarios.RestartAlways, Containers: readers},
			Steps: []scenarios.Step{
				warmUp,
				scenarios.KillPlugin(),
				scenarios.Observe(watchReads),
				scenarios.StartPlugin(),
				scenarios.Observe(watchReads),
			},
			Expect: append(neverFail(reader, reopen, sub),
				scenarios.Expectation{Check: scenarios.NeverFails{C: reader, After: scenarios.AfterPluginBack, Reads: 5}}),
		}),
		row(scenarios.Scenario{
			Name:  "relay-keeper-keeper-restart",
			Title: "Relay-keeper mode: the keeper is killed with its relays and real servers, and started again",
			Shows: "The plugin's copy keeps the staging connection; when the new keeper connects, the plugin mounts a new " +
				"backend and hands it over, the keeper's real server serves it, and the keeper's relay takes the " +
				"connection over from the plugin's copy with the backend's new root and the node table its predecessor " +
				"journaled in the keeper's directory: a stall, no failed read.",
			Plugin: mode,
			Pod:    scenarios.Pod{RestartPolicy: scenarios.RestartAlways, Containers: readers},
			Steps: []scenarios.Step{
				warmUp,
				scenarios.Kill(topology.KeeperContainer),
				scenarios.Start(topology.KeeperContainer),
				scenarios.Observe(watchReads),
			},
			Expect: neverFail(reader, reopen, sub),
		}),
		row(scenarios.Scenario{
			Name:  "relay-keeper-plugin-server",
			Title: "Relay-keeper mode: the plugin dies, and the real server while it is down",
			Shows: "A double fault: nobody can mount a new backend while the plugin is down, so the relay lets the reads " +
				"wait; the restarted plugin hears from the keeper that the volume has no real server, mounts a new " +
				"backend and hands it over: a stall of the plugin's restart, no failed read.",
			Plugin: mode,
			Pod:    scenarios.Pod{RestartPolicy: scenarios.RestartAlways, Containers: readers},
			Steps: []scenarios.Step{
				warmUp,
				scenarios.KillPlugin(),
				scenarios.Kill(topology.RelayServer),
				scenarios.StartPlugin(),
				scenarios.Start(topology.RelayServer),
				scenarios.Observe(watchReads),
			},
			Expect: neverFail(reader, reopen, sub),
		}),
		row(scenarios.Scenario{
			Name:  "relay-keeper-plugin-relay",
			Title: "Relay-keeper mode: the plugin dies, and the relay while it is down",
			Shows: "A double fault: the keeper starts another relay with the backend root it kept and hands it the " +
				"connection from its own copy; the restarted plugin re-collects its copy: no failed read.",
			Plugin: mode,
			Pod:    scenarios.Pod{RestartPolicy: scenarios.RestartAlways, Containers: readers},
			Steps: []scenarios.Step{
				warmUp,
				scenarios.KillPlugin(),
				scenarios.Kill(topology.RelayProcess),
				scenarios.Start(topology.RelayProcess),
				scenarios.StartPlugin(),
				scenarios.Observe(watchReads),
			},
			Expect: neverFail(reader, reopen, sub),
		}),
		row(scenarios.Scenario{
			Name:  "relay-keeper-all-holders",
			Title: "Relay-keeper mode: the plugin and the keeper die together",
			Shows: "The limit: the plugin's copy and the keeper's (with its relay) go at once, and the kernel ends the " +
				"staging connection, exactly as in keeper-all-holders.",
			Plugin: scenarios.Plugin{Mode: topology.RelayKeeper, Keeper: scenarios.Keeper{DirectIO: true}},
			Pod: scenarios.Pod{RestartPolicy: scenarios.RestartAlways, Containers: []scenarios.Container{
				{Name: reader, KeepOpen: true, DirectIO: true},
			}},
			Steps: []scenarios.Step{
				warmUp,
				scenarios.KillPlugin(),
				scenarios.Kill(topology.KeeperContainer),
				untilENOTCONN,
				hostDead,
				scenarios.StartPlugin(),
				scenarios.Start(topology.KeeperContainer),
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
	// The relay mode's rows of the real server and of the relay hold as they are; only who restarts what
	// differs (the keeper runs the relay and the real server, the plugin mounts each new backend).
	shows := map[string]string{
		"relay-crash": "The plugin and the keeper keep copies of the staging connection, so the relay's death only pauses " +
			"it; the keeper starts another relay, hands it the connection and the backend's root, and it takes the " +
			"connection over with the node table its predecessor journaled (the kernel resends what the dead relay " +
			"had read): no read fails.",
		"relay-server-upgrade": "The real server is given its next build (a new flag) and the running one ends: on a real " +
			"cluster a rolling update of the keeper alone (keeper.relayServerArgs), whose new pod takes the connection " +
			"over from the plugin's copy with a new relay and starts the new server on a new backend the plugin mounts. " +
			"The workloads keep reading; the new server's command line shows the new flag.",
		"relay-no-backend": "The real server is given a build that fails at once (on a real cluster a keeper rollout with " +
			"an argument the server refuses) and the running one ends. The keeper keeps trying to start it; its relay " +
			"(a new keeper's serves the connection before any backend root comes) lets requests wait at most its " +
			"backend wait (here 5 s) and then answers ENOTCONN, so the reader gets an error and exits instead of " +
			"hanging. Once the good build is back (the rollout undone), the next try serves again.",
	}
	for _, s := range relayScenarios() {
		suffix, ok := strings.CutPrefix(s.Name, "relay-")
		if !ok || suffix == "plugin-restart" || suffix == "all-holders" {
			continue
		}
		s.Name = "relay-keeper-" + suffix
		s.Title = strings.Replace(s.Title, "Relay mode:", "Relay-keeper mode:", 1)
		if text, ok := shows["relay-"+suffix]; ok {
			s.Shows = text
		} else {
			s.Shows = strings.Replace(s.Shows, "the relay", "the keeper's relay", 1)
		}
		wait := s.Plugin.RelayBackendWait
		s.Plugin = mode
		s.Plugin.RelayBackendWait = wait
		out = append(out, onBackends(s))
	}
	return out
}
