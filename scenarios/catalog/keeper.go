package catalog

import (
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// Containers of the keeper rows besides reader and reopen: one that reads the volume through a subPath.
const sub = "subpath"

// keeperReleases is why the keeper scenarios run on every kubelet release: their promise, no failed read
// whichever single holder dies, is to hold on every kubelet the project covers, and the subPath reader's bind
// goes through kubelet's subPath code, which v1.37 changed (prepareSubpathTarget in
// pkg/volume/util/subpath/subpath_linux.go).
const keeperReleases = "the keeper's promise (no failed read) is to hold on every kubelet covered, and the subPath bind goes " +
	"through kubelet's subPath code, which v1.37 changed (prepareSubpathTarget, pkg/volume/util/subpath/subpath_linux.go)"

// keeperReadInterval is how often the keeper rows' workloads read: often enough that a pause between FUSE
// servers falls on a read, which then measures it.
const keeperReadInterval = 5 * time.Millisecond

// keeperInFlightLatency is how long every read takes inside a FUSE server in keeper-in-flight: long enough for
// the kill to land inside one, on every backend.
const keeperInFlightLatency = time.Second

// Waits of the keeper rows with a slow read: until a read is inside a server, and reads watched after the kill
// for a few reads' latency.
var (
	untilReadInFlight = scenarios.WaitFor(scenarios.ReadInFlight{C: reader}, scenarios.Dur{Fixed: 10 * time.Second})
	watchSlowReads    = scenarios.Observe(scenarios.Dur{Fixed: 3 * keeperInFlightLatency, Reads: 3})
)

// keeperMode is the plugin's keeper mode: FUSE servers outside the plugin, run by an unprivileged keeper; the
// plugin and the keeper each hold a copy of every connection, so that any one of the plugin, the keeper and a
// server can die while the workloads only wait. Every row reads with direct I/O, so that every read reaches a
// server and a gap between servers shows as the read's latency, and runs on every kubelet release.
var keeperMode = mode{name: "keeper-", title: "Keeper mode: ", base: scenarios.Scenario{
	Plugin:       scenarios.Plugin{Mode: topology.Keeper, RestoreMounts: true, RestoreStrategy: scenarios.StrategyRebind, Keeper: scenarios.Keeper{DirectIO: true}},
	Pod:          pod(keeperReaders()...),
	EveryRelease: keeperReleases,
}}

// keeperSlow is the keeper mode for a read inside a server: one reader, and every read takes
// keeperInFlightLatency inside a server, long enough for a kill to land in it.
var keeperSlow = keeperMode.lone(true).withPlugin(scenarios.Plugin{Mode: topology.Keeper,
	Keeper: scenarios.Keeper{DirectIO: true, ReadLatency: keeperInFlightLatency}})

// keeperScenarios are the scenarios of the keeper mode (keeperMode).
func keeperScenarios() []scenarios.Scenario {
	m := keeperMode
	return append([]scenarios.Scenario{
		pluginRestartSurvives(m.row("plugin-restart", "the plugin restarts; its copies of the connections come back from the keeper",
			"No FUSE server runs in the plugin: the keeper's serve on while the plugin is down, and the restarted "+
				"plugin (with restoreMounts) finds every mount answering, remounts nothing, and takes its copy of each "+
				"connection back from the keeper after checking it is the one mounted at the staging path.")),
		survives(m.row("server-crash", "the FUSE server of the volume is killed",
			"The keeper starts another FUSE server, which takes the connection over (the kernel's INIT replayed, "+
				"the requests the dead one had read resent). The descriptor opened before the crash keeps reading, new "+
				"opens work and the subPath bind never notices: a stall of a few milliseconds, no error, no remount."),
			scenarios.Kill(topology.FuseServer), scenarios.Start(topology.FuseServer)),
		readInFlight(keeperSlow.row("in-flight", "the FUSE server is killed while a slow read is inside it",
			"Every read takes 1 s inside the server (a slow backend). The server is killed in the middle of one: "+
				"its successor asks the kernel to resend the requests it had read (FUSE_NOTIFY_RESEND), and the reader "+
				"gets \"Hello world!\" late instead of EINTR, EIO or ECONNABORTED."),
			untilReadInFlight, scenarios.Kill(topology.FuseServer), scenarios.Start(topology.FuseServer), watchSlowReads),
		survives(m.row("restart", "the keeper is killed with its FUSE servers and started again",
			"The plugin's copies keep every connection alive while no keeper runs: the workloads' reads wait. "+
				"The new keeper gets the connections from the plugin and its servers take them over."),
			scenarios.Kill(topology.KeeperContainer), scenarios.Start(topology.KeeperContainer)),
		also(survives(m.row("upgrade", "every FUSE server is replaced by a new build",
			"A rolling update of the keeper: the new build starts beside the old one and its servers take every "+
				"connection over, then the old keeper is stopped and its servers exit without unmounting anything. The "+
				"workloads keep reading throughout; the keeper's log shows the new version serving."),
			scenarios.Upgrade(topology.KeeperContainer)), scenarios.NewVersionServes{}),
		holdersDie(m.lone(false).row("all-holders", "the plugin and the keeper die together",
			"The limit: with every holder of a connection gone at once, the kernel ends it, exactly as in "+
				"restart-no-restore. The plugin and the keeper come back, but no process has the connection to hand on.")),
	}, keeperFaultScenarios()...)
}

// keeperReaders are the workload containers of most keeper rows (manifests/pod-keeper.yaml): every way to read,
// a descriptor kept open from before any kill, an open for every read, and through a subPath bind; all read
// every few milliseconds, so that a gap between servers shows as the latency of a read (the stall), and exit
// on the first error.
func keeperReaders() []scenarios.Container {
	return []scenarios.Container{
		{Name: reader, ExitOnError: true, KeepOpen: true, ReadInterval: keeperReadInterval},
		{Name: reopen, ExitOnError: true, KeepOpen: false, ReadInterval: keeperReadInterval},
		{Name: sub, ExitOnError: true, KeepOpen: false, SubPath: scenarios.FileName, MountPath: "/mnt/" + scenarios.FileName, ReadInterval: keeperReadInterval},
	}
}
