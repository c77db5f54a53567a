package catalog

import (
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// relayKeeperMode is the plugin's relay-keeper mode: the keeper holds the staging connection with the plugin
// and runs the relay and the real server; the plugin mounts the private backend the real server serves. Every
// row runs on real kubelets too: the kube backend rolls the keeper (keeper.relayServerArgs) for the real
// server's next build and for one that cannot start, as a user does.
var relayKeeperMode = mode{name: "relay-keeper-", title: "Relay-keeper mode: ", directIO: true, base: scenarios.Scenario{
	Plugin:  scenarios.Plugin{Mode: topology.RelayKeeper, RestoreMounts: true, RestoreStrategy: scenarios.StrategyRebind, Keeper: scenarios.Keeper{DirectIO: true}},
	Pod:     pod(relayReaders()...),
	Servers: scenarios.AllServers, EveryServer: relayEveryServer,
}}

// relayKeeperScenarios are the rows of the relay-keeper mode (relayKeeperMode): the crashes the relay mode could
// not keep, the plugin's and the keeper's, then the relay mode's rows that apply (the real server killed,
// upgraded, killed with a read inside it, unable to come back; the relay killed).
func relayKeeperScenarios() []scenarios.Scenario {
	m := relayKeeperMode
	return append([]scenarios.Scenario{
		pluginRestartSurvives(m.row("plugin-restart", "the plugin restarts; the keeper's relay and real server serve on",
			"The keeper holds the staging connection, runs the relay and the real server, and its relay holds the "+
				"backend's root: the plugin's death touches none of them, and the workloads read on while it is down. "+
				"The restarted plugin takes its copy of the connection back from the keeper and mounts nothing.")),
		survives(m.row("keeper-restart", "the keeper is killed with its relays and real servers, and started again",
			"The plugin's copy keeps the staging connection; when the new keeper connects, the plugin mounts a new "+
				"backend and hands it over, the keeper's real server serves it, and the keeper's relay takes the "+
				"connection over from the plugin's copy with the backend's new root and the node table its predecessor "+
				"journaled in the keeper's directory: a stall, no failed read."),
			scenarios.Kill(topology.KeeperContainer), scenarios.Start(topology.KeeperContainer)),
		survives(m.row("plugin-server", "the plugin dies, and the real server while it is down",
			"A double fault: nobody can mount a new backend while the plugin is down, so the relay lets the reads "+
				"wait; the restarted plugin hears from the keeper that the volume has no real server, mounts a new "+
				"backend and hands it over: a stall of the plugin's restart, no failed read."),
			scenarios.KillPlugin(), scenarios.Kill(topology.RelayServer), scenarios.StartPlugin(), scenarios.Start(topology.RelayServer)),
		survives(m.row("plugin-relay", "the plugin dies, and the relay while it is down",
			"A double fault: the keeper starts another relay with the backend root it kept and hands it the "+
				"connection from its own copy; the restarted plugin re-collects its copy: no failed read."),
			scenarios.KillPlugin(), scenarios.Kill(topology.RelayProcess), scenarios.Start(topology.RelayProcess), scenarios.StartPlugin()),
		holdersDie(m.lone(false).row("all-holders", "the plugin and the keeper die together",
			"The limit: the plugin's copy and the keeper's (with its relay) go at once, and the kernel ends the "+
				"staging connection, exactly as in keeper-all-holders.")),
	}, relayFaults(m, relayKeeperText)...)
}

// relayKeeperText is what the relay-keeper mode's rows of the real server and of the relay show: the keeper
// runs the relay and the real server, the plugin mounts each new backend. They run on every backend.
var relayKeeperText = relayModeText{
	serverCrash: "The server is stopped with a read inside it, then killed. The relay finds its backend dead and waits; " +
		"the plugin detaches the dead backend mount, mounts a new one in its own directory and starts the server " +
		"on it; the keeper's relay opens the new root and runs the failed requests again. The descriptor opened before " +
		"the crash keeps reading, new opens and the subPath bind work: a stall, no error.",
	serverUpgrade: "The real server is given its next build (a new flag) and the running one ends: on a real " +
		"cluster a rolling update of the keeper alone (keeper.relayServerArgs), whose new pod takes the connection " +
		"over from the plugin's copy with a new relay and starts the new server on a new backend the plugin mounts. " +
		"The workloads keep reading; the new server's command line shows the new flag.",
	crash: "The plugin and the keeper keep copies of the staging connection, so the relay's death only pauses " +
		"it; the keeper starts another relay, hands it the connection and the backend's root, and it takes the " +
		"connection over with the node table its predecessor journaled (the kernel resends what the dead relay " +
		"had read): no read fails.",
	inFlight: "The server is stopped (SIGSTOP; for gcsfuse its fake GCS server, so that the read waits inside gcsfuse " +
		"for its bucket) until the reader's read is inside it, then killed: the keeper's relay's request to it fails with " +
		"ECONNABORTED, and the relay runs it again on the new server, so the reader gets \"Hello world!\" late instead of an error.",
	noBackend: "The real server is given a build that fails at once (on a real cluster a keeper rollout with " +
		"an argument the server refuses) and the running one ends. The keeper keeps trying to start it; its relay " +
		"(a new keeper's serves the connection before any backend root comes) lets requests wait at most its " +
		"backend wait (here 5 s) and then answers ENOTCONN, so the reader gets an error and exits instead of " +
		"hanging. Once the good build is back (the rollout undone), the next try serves again.",
	newBuild: func(s scenarios.Scenario) scenarios.Scenario { return s },
}
