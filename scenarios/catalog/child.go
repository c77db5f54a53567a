package catalog

import (
	"slices"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// childMode is the plugin's default FUSE placement: each FUSE server is a child of the plugin and dies with it,
// which is the mount loss the testbed is about. Its rows hold for every server.
var childMode = mode{base: scenarios.Scenario{Servers: scenarios.AllServers}}

// restoring is the plugin that restores its mounts when it starts, by binding the restored volume again.
var restoring = scenarios.Plugin{RestoreMounts: true, RestoreStrategy: scenarios.StrategyRebind}

// restart is the original demo, and the baseline of every server on a real kubelet.
var restart = everyServer(restartHeals(childMode.lone(true).row("restart",
	"Plugin restart with restoreMounts and a workload that exits on error (the original demo)",
	"Killing the plugin container kills its FUSE servers: the workload gets ENOTCONN and exits; "+
		"while the host mount is dead kubelet cannot even start the container again (failed to stat the "+
		"volume dir); once the restarted plugin has restored its mounts the next restart reads again.")),
	"the baseline: how a real server's death with the plugin reaches a workload on a real kubelet")

// childScenarios are the scenarios of the child placement (childMode).
func childScenarios() []scenarios.Scenario {
	m := childMode
	inFlight := everyServer(m.row("server-kill-in-flight", "The FUSE server dies while a read is inside it (child placement)",
		"The plugin's FUSE server is stopped, the workload's next read (O_DIRECT, so it reaches the server) "+
			"waits inside it, then the server is killed: that read fails with ECONNABORTED (the kernel aborts "+
			"what the connection still owed), every access after it with ENOTCONN. The same for every server."),
		"what a read inside the server gets at its death is the server's and the kernel's doing, not the plugin's")
	inFlight.Pod = pod(scenarios.Container{Name: reader, KeepOpen: true, DirectIO: true})
	inFlight.Steps = []scenarios.Step{warmUp, scenarios.Kill(topology.FuseServer), untilENOTCONN, scenarios.Observe(scenarios.Dur{Reads: 3})}
	inFlight.Expect = []scenarios.Expectation{
		{Check: scenarios.FailsWith{C: reader, Errno: "ECONNABORTED", Within: scenarios.Dur{Fixed: 5 * time.Second, Reads: 2}}},
		{Check: scenarios.FailsWith{C: reader, Errno: "ENOTCONN", Within: scenarios.Dur{Fixed: 5 * time.Second, Reads: 4}}},
		{Check: scenarios.KeepsFailing{C: reader, Errno: "ENOTCONN", After: scenarios.AfterKill}},
		noRestarts(reader),
	}

	keepsRunning := m.withPlugin(restoring).row("restore-without-exit", "Plugin restores its mounts, the running workload does not exit",
		"restoreMounts repairs the host: the volume dir is a live mount again. The running container "+
			"does not benefit: its private mount namespace still holds the dead bind, so even fresh opens "+
			"(keep-open=false) fail with ENOTCONN forever. It works only halfway.")
	keepsRunning.Pod = pod(scenarios.Container{Name: reader})
	keepsRunning.Steps = deadThenBack(untilENOTCONN, untilRestored, scenarios.Observe(watchReads))
	keepsRunning.Expect = []scenarios.Expectation{
		failsFirst(reader),
		{Check: scenarios.VolumeDir{After: scenarios.AfterPluginBack}},
		{Check: scenarios.KeepsFailing{C: reader, Errno: "ENOTCONN", After: scenarios.AfterVolumeRestored}},
		{Check: scenarios.NeverRecovers{C: reader, After: scenarios.AfterVolumeRestored, For: watchReads}},
		noRestarts(reader),
	}

	exits := m.lone(true).row("exit-without-restore", "Workload exits on error, plugin restarts without restoreMounts",
		"Exiting is not enough: with nothing restoring the mount, every restart of the container "+
			"fails in kubelet's pre-start stat of the dead volume dir, before and after the plugin is back.")
	exits.Steps = deadThenBack(untilStatFails, scenarios.Observe(watchStarts))
	exits.Expect = []scenarios.Expectation{
		failsFirst(reader),
		{Check: scenarios.Exits{C: reader, Code: 1}},
		{Check: scenarios.StartFails{C: reader, After: scenarios.AfterPluginBack, Contains: failedToStatVolume, Errno: "ENOTCONN", Min: 2}},
		noRestarts(reader),
		{Check: scenarios.NeverRecovers{C: reader, After: scenarios.AfterPluginBack, For: watchStarts}},
		{Check: scenarios.VolumeDir{Errno: "ENOTCONN", After: scenarios.AfterPluginBack}},
	}

	stacks := m.withPlugin(scenarios.Plugin{RestoreMounts: true, RestoreStrategy: scenarios.StrategyStack}).row("host-to-container",
		"Stacking restore with HostToContainer propagation",
		"With --restore-strategy=stack the plugin mounts the restored volume on top of the dead one; "+
			"HostToContainer propagation carries that mount into the running container, so new opens "+
			"recover without a restart, while an fd held open across the crash stays ENOTCONN.")
	stacks.Pod = pod(scenarios.Container{Name: reopen, Propagation: scenarios.PropagationHostToContainer},
		scenarios.Container{Name: holder, KeepOpen: true, Propagation: scenarios.PropagationHostToContainer})
	stacks.Steps = bothFail(scenarios.WaitFor(scenarios.Recovers{C: reopen}, untilReopenRecovers), untilRestored, scenarios.Observe(watchReads))
	stacks.Expect = slices.Concat([]scenarios.Expectation{
		failsFirst(reopen),
		{Check: scenarios.Recovers{C: reopen, Instance: scenarios.SameInstance}},
		noRestarts(reopen),
		failsFirst(holder),
	}, keptDead, []scenarios.Expectation{{Check: scenarios.VolumeDir{After: scenarios.AfterPluginBack}}})

	noRestore := holdersDie(m.lone(false).row("restart-no-restore", "Plugin restart without restoreMounts, workload keeps running",
		"Without restoreMounts nothing remounts the volume: the workload reads ENOTCONN from the first "+
			"read after the kill, forever, also after the plugin is back."))
	return []scenarios.Scenario{restart, inFlight, noRestore, keepsRunning, exits, stacks, subpathScenario()}
}

// subpathScenario is the child placement's row of a subPath, whose outcome after the restore depends on the
// kubelet version.
func subpathScenario() scenarios.Scenario {
	s := childMode.withPlugin(restoring).row("subpath", "Workload mounts a subPath of the volume, plugin restores, workload exits on error",
		"kubelet bind-mounts a subPath once, under pods/<uid>/volume-subpaths/, from the FUSE mount of "+
			"that moment, and checks that bind before every container start. After the crash the bind is dead, and "+
			"while the volume dir is dead too every restart fails with \"failed to prepare subPath\". Once the "+
			"plugin has restored the volume dir, the kubelet version decides: up to v1.36 kubelet's check of the "+
			"old bind fails with ENOTCONN at every restart, forever (only deleting the pod helps); since v1.37 "+
			"kubelet unmounts the corrupted bind, binds the restored volume again, and the restarted container reads.")
	s.Pod = pod(scenarios.Container{Name: reader, ExitOnError: true, KeepOpen: true, SubPath: scenarios.FileName, MountPath: "/mnt/" + scenarios.FileName})
	s.Steps = deadThenBack(untilSubPathFails, untilRestored, scenarios.Observe(watchStarts))
	s.Expect = []scenarios.Expectation{
		failsFirst(reader),
		{Check: scenarios.Exits{C: reader, Code: 1}},
		{Check: scenarios.StartFails{C: reader, Contains: failedToPrepareSubPath}},
		{Check: scenarios.VolumeDir{After: scenarios.AfterPluginBack}},

		// No cause is asked for: kubelet keeps it out of the event ("Don't pass detailed error back to
		// the user", pkg/kubelet/kubelet_pods.go makeMounts), and kubelet v1.36.3 logs the failure with a nil
		// error too, so no evidence of the real kubelet names the ENOTCONN behind it.
		beforeSubPathFix(scenarios.StartFails{C: reader, After: scenarios.AfterVolumeRestored, Contains: failedToPrepareSubPath, Min: 2}),
		beforeSubPathFix(scenarios.Restarts{C: reader, Min: 0, Max: 0}),
		beforeSubPathFix(scenarios.NeverRecovers{C: reader, After: scenarios.AfterVolumeRestored, For: watchStarts}),

		sinceSubPathFix(scenarios.Recovers{C: reader, Instance: scenarios.NewInstance}),
		sinceSubPathFix(scenarios.Restarts{C: reader, Min: 1, Max: 1}),
	}
	s.Note = "What happens after the restore depends on the kubelet version. Before every start kubelet's makeMounts → " +
		"PrepareSafeSubpath → doBindSubPath → prepareSubpathTarget checks the old bind under volume-subpaths/. " +
		"Up to v1.36 it calls mount.IsNotMountPoint, which on a dead FUSE bind returns ENOTCONN; that is not " +
		"IsNotExist, so the start fails, and the stale bind is only removed by CleanSubPaths when the pod's " +
		"volume is unmounted. Since " + scenarios.SubPathFixedIn + " (kubernetes PRs #138856 and #139275) it calls " +
		"mounter.IsMountPoint and, when the error is a corrupted mount (IsCorruptedMnt, which includes ENOTCONN), " +
		"unmounts the bind and binds the subPath again from the restored volume; a live bind whose inode differs " +
		"from the source is lazily unmounted and bound again."
	return s
}
