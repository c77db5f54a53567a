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

// keeperScenarios are the scenarios of the plugin's keeper mode: FUSE servers outside the plugin, run by an
// unprivileged keeper; the plugin and the keeper each hold a copy of every connection, so that any one of the
// plugin, the keeper and a server can die while the workloads only wait. Every row reads with direct I/O, so
// that every read reaches a server and a gap between servers shows as the read's latency.
func keeperScenarios() []scenarios.Scenario {
	mode := scenarios.Plugin{Mode: topology.Keeper, RestoreMounts: true, RestoreStrategy: scenarios.StrategyRebind, Keeper: scenarios.Keeper{DirectIO: true}}
	readers := keeperReaders()
	neverFail := func(cs ...string) []scenarios.Expectation {
		var out []scenarios.Expectation
		for _, c := range cs {
			out = append(out, scenarios.Expectation{Check: scenarios.NeverFails{C: c, After: scenarios.AfterKill, Reads: 10}})
		}
		return append(out, scenarios.Expectation{Check: scenarios.VolumeDirAlive{}})
	}
	return append([]scenarios.Scenario{
		{
			Name:  "keeper-plugin-restart",
			Title: "Keeper mode: the plugin restarts; its copies of the connections come back from the keeper",
			Shows: "No FUSE server runs in the plugin: the keeper's serve on while the plugin is down, and the restarted " +
				"plugin (with restoreMounts) finds every mount answering, remounts nothing, and takes its copy of each " +
				"connection back from the keeper after checking it is the one mounted at the staging path.",
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
			EveryRelease: keeperReleases,
		},
		{
			Name:  "keeper-server-crash",
			Title: "Keeper mode: the FUSE server of the volume is killed",
			Shows: "The keeper starts another FUSE server, which takes the connection over (the kernel's INIT replayed, " +
				"the requests the dead one had read resent). The descriptor opened before the crash keeps reading, new " +
				"opens work and the subPath bind never notices: a stall of a few milliseconds, no error, no remount.",
			Plugin: mode,
			Pod:    scenarios.Pod{RestartPolicy: scenarios.RestartAlways, Containers: readers},
			Steps: []scenarios.Step{
				warmUp,
				scenarios.Kill(topology.FuseServer),
				scenarios.Start(topology.FuseServer),
				scenarios.Observe(watchReads),
			},
			Expect:       neverFail(reader, reopen, sub),
			EveryRelease: keeperReleases,
		},
		{
			Name:  "keeper-in-flight",
			Title: "Keeper mode: the FUSE server is killed while a slow read is inside it",
			Shows: "Every read takes 1 s inside the server (a slow backend). The server is killed in the middle of one: " +
				"its successor asks the kernel to resend the requests it had read (FUSE_NOTIFY_RESEND), and the reader " +
				"gets \"Hello world!\" late instead of EINTR, EIO or ECONNABORTED.",
			Plugin: scenarios.Plugin{Mode: topology.Keeper, Keeper: scenarios.Keeper{DirectIO: true, ReadLatency: keeperInFlightLatency}},
			Pod: scenarios.Pod{RestartPolicy: scenarios.RestartAlways, Containers: []scenarios.Container{
				{Name: reader, ExitOnError: true, KeepOpen: true},
			}},
			Steps: []scenarios.Step{
				warmUp,
				scenarios.WaitFor(scenarios.ReadInFlight{C: reader}, scenarios.Dur{Fixed: 10 * time.Second}),
				scenarios.Kill(topology.FuseServer),
				scenarios.Start(topology.FuseServer),
				scenarios.Observe(scenarios.Dur{Fixed: 3 * keeperInFlightLatency, Reads: 3}),
			},
			Expect: []scenarios.Expectation{
				{Check: scenarios.InFlightReadSucceeds{C: reader}},
				{Check: scenarios.NeverFails{C: reader, After: scenarios.AfterKill, Reads: 2}},
			},
			EveryRelease: keeperReleases,
		},
		{
			Name:  "keeper-restart",
			Title: "Keeper mode: the keeper is killed with its FUSE servers and started again",
			Shows: "The plugin's copies keep every connection alive while no keeper runs: the workloads' reads wait. " +
				"The new keeper gets the connections from the plugin and its servers take them over.",
			Plugin: mode,
			Pod:    scenarios.Pod{RestartPolicy: scenarios.RestartAlways, Containers: readers},
			Steps: []scenarios.Step{
				warmUp,
				scenarios.Kill(topology.KeeperContainer),
				scenarios.Start(topology.KeeperContainer),
				scenarios.Observe(watchReads),
			},
			Expect:       neverFail(reader, reopen, sub),
			EveryRelease: keeperReleases,
		},
		{
			Name:  "keeper-upgrade",
			Title: "Keeper mode: every FUSE server is replaced by a new build",
			Shows: "A rolling update of the keeper: the new build starts beside the old one and its servers take every " +
				"connection over, then the old keeper is stopped and its servers exit without unmounting anything. The " +
				"workloads keep reading throughout; the keeper's log shows the new version serving.",
			Plugin: mode,
			Pod:    scenarios.Pod{RestartPolicy: scenarios.RestartAlways, Containers: readers},
			Steps: []scenarios.Step{
				warmUp,
				scenarios.Upgrade(topology.KeeperContainer),
				scenarios.Observe(watchReads),
			},
			Expect: append(neverFail(reader, reopen, sub),
				scenarios.Expectation{Check: scenarios.NewVersionServes{}}),
			EveryRelease: keeperReleases,
		},
		{
			Name:  "keeper-all-holders",
			Title: "Keeper mode: the plugin and the keeper die together",
			Shows: "The limit: with every holder of a connection gone at once, the kernel ends it, exactly as in " +
				"restart-no-restore. The plugin and the keeper come back, but no process has the connection to hand on.",
			Plugin: scenarios.Plugin{Mode: topology.Keeper, Keeper: scenarios.Keeper{DirectIO: true}},
			Pod: scenarios.Pod{RestartPolicy: scenarios.RestartAlways, Containers: []scenarios.Container{
				{Name: reader, KeepOpen: true},
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
			EveryRelease: keeperReleases,
		},
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
