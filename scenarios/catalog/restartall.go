package catalog

import (
	"slices"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// restartAllReleases is why the restart-all rows run on every kubelet release: the feature is young (beta and on
// by default since v1.36) and its kubelet code still changes from release to release.
const restartAllReleases = "KEP-5532's RestartAllContainers is beta since v1.36 and its kubelet code still changes: each release is measured"

// restartAllMode is what the restart-all rows share: a reader with a restart rule RestartAllContainers for its
// exit code and a holder that keeps its descriptor and never exits on its own, checked on every release.
var restartAllMode = mode{name: "restart-all-", base: scenarios.Scenario{
	Plugin:  restoring,
	Servers: scenarios.AllServers, EveryRelease: restartAllReleases,
}}

// Steps and expectations of the restart-all rows: the reader's exit that restarts the pod in place, and the
// wait for a container's first good read after it.
var (
	untilRestartsAll = scenarios.WaitFor(scenarios.Exits{C: reader, Code: scenarios.RestartAllExitCode}, scenarios.Dur{Fixed: 10 * time.Second})
	restartsAll      = scenarios.Expectation{Check: scenarios.Exits{C: reader, Code: scenarios.RestartAllExitCode}}
	restartAllHeals  = scenarios.Dur{Fixed: 10 * time.Second, Backoffs: 12}
)

// restartAllScenarios are the rows of KEP-5532's container restart rule action RestartAllContainers: one
// container's exit restarts every container of the pod in place (the same pod, UID and volumes).
func restartAllScenarios() []scenarios.Scenario {
	m := restartAllMode
	holds := scenarios.Container{Name: holder, KeepOpen: true}
	all := m.withPod(pod(scenarios.Container{Name: reader, ExitOnError: true, KeepOpen: true, RestartAllContainers: true}, holds)).row("containers",
		"Restore, and a restart rule that restarts the whole pod in place (KEP-5532 RestartAllContainers)",
		"The restart setup with a second container, holder, that keeps its descriptor and never exits on its "+
			"own: without help it would read ENOTCONN for good (restore-without-exit). The reader has a restart rule "+
			"RestartAllContainers for its exit code 1: when it exits on the dead mount, kubelet stops the holder at "+
			"once (SIGTERM, SIGKILL 2 s later) and starts both again in place, in the same pod with the same volumes "+
			"(nothing is published again). "+
			"While the plugin is down their starts fail as in restart; once it restored the volume, both read again: "+
			"one container's exit heals every container of the pod, without a new pod.")
	all.Steps = deadThenBack(untilRestartsAll, scenarios.WaitFor(scenarios.Recovers{C: reader}, restartAllHeals),
		scenarios.WaitFor(scenarios.Recovers{C: holder}, restartAllHeals), scenarios.Observe(scenarios.Dur{Reads: 3}))
	all.Expect = []scenarios.Expectation{failsFirst(reader), restartsAll,
		{Check: scenarios.Recovers{C: reader, Instance: scenarios.NewInstance}},
		{Check: scenarios.Recovers{C: holder, Instance: scenarios.NewInstance}},
	}

	subPath := m.withPod(pod(scenarios.Container{Name: reader, ExitOnError: true, KeepOpen: true, RestartAllContainers: true,
		SubPath: scenarios.FileName, MountPath: "/mnt/" + scenarios.FileName}, holds)).row("subpath",
		"restart-all-containers with the reader on a subPath: does the in-place restart prepare the subPath again?",
		"The reader mounts a subPath of the volume (kubelet's bind under volume-subpaths/, made at its first "+
			"start), the holder the whole volume. The reader's exit on the dead mount restarts both in place. "+
			"RestartAllContainers removes the containers, not the pod's subPath binds: each start goes through the same "+
			"check of the old bind as an ordinary restart (subpath), so the kubelet version decides again. Up to v1.36 "+
			"the reader's starts fail with \"failed to prepare subPath\" for good, while the holder reads again; since "+
			"v1.37 kubelet binds the restored volume again and both read.")
	subPath.Steps = deadThenBack(untilRestartsAll, scenarios.WaitFor(scenarios.Recovers{C: holder}, restartAllHeals), scenarios.Observe(watchStarts))
	subPath.Expect = []scenarios.Expectation{failsFirst(reader), restartsAll,
		{Check: scenarios.Recovers{C: holder, Instance: scenarios.NewInstance}},

		beforeSubPathFix(scenarios.StartFails{C: reader, After: scenarios.AfterVolumeRestored, Contains: failedToPrepareSubPath, Min: 2}),
		beforeSubPathFix(scenarios.NeverRecovers{C: reader, After: scenarios.AfterVolumeRestored, For: watchStarts}),

		sinceSubPathFix(scenarios.Recovers{C: reader, Instance: scenarios.NewInstance}),
	}

	sidecar := m.withPlugin(scenarios.Plugin{Mode: topology.Sidecar}).withPod(sidecarPod(0,
		scenarios.Container{Name: reader, ExitOnError: true, RestartAllContainers: true}, holds)).row("sidecar",
		"Sidecar mode: the sidecar is killed; does the reader's RestartAllContainers, restarting the sidecar in place, bring the volume back?",
		"sidecar-killed with a reader that exits on the dead mount and restarts the whole pod in place, and a "+
			"holder. Kubelet stops and removes every container, the native sidecar included, and starts them again in "+
			"the same pod; but nothing is published again, so the plugin sends the new sidecar no descriptor: it "+
			"serves nothing, the volume dir stays dead, and every start of the reader and the holder fails on it. "+
			"Restarting the sidecar in place does not bring the volume back: only a new pod does (sidecar-new-pod).")
	sidecar.Steps = []scenarios.Step{warmUp, scenarios.Kill(topology.SidecarContainer), untilRestartsAll, hostDead, untilStatFails,
		scenarios.Observe(watchStarts)}
	sidecar.Expect = []scenarios.Expectation{failsFirst(reader), restartsAll,
		{Check: scenarios.StartFails{C: reader, Contains: failedToStatVolume, Errno: "ENOTCONN"}},
		{Check: scenarios.NeverRecovers{C: reader, After: scenarios.AfterKill, For: watchStarts}},
		{Check: scenarios.NeverRecovers{C: holder, After: scenarios.AfterKill, For: watchStarts}},
		{Check: scenarios.SidecarNeverServes{After: scenarios.AfterKill, For: watchStarts}},
		{Check: scenarios.VolumeDir{Errno: "ENOTCONN", After: scenarios.AfterKill}},
	}

	// sidecar-keep-fd's plugin with restart-all-sidecar's pod; like sidecar-keep-fd, it runs with dummy-fuse only.
	keptFD := mode{name: m.name, base: scenarios.Scenario{Plugin: sidecarKeepFD.base.Plugin, EveryRelease: restartAllReleases}}
	keepFD := survives(keptFD.withPod(sidecarPod(0,
		scenarios.Container{Name: reader, ExitOnError: true, KeepOpen: true, ReadInterval: keeperReadInterval, DirectIO: true, RestartAllContainers: true},
		scenarios.Container{Name: holder, KeepOpen: true, ReadInterval: keeperReadInterval, DirectIO: true})).row("sidecar-keep-fd",
		"Sidecar mode with --sidecar-keep-fd: the sidecar is killed under a reader with a RestartAllContainers rule",
		"sidecar-keep-fd with restart-all-sidecar's pod: the plugin's kept copy of the descriptor keeps the "+
			"connection while the sidecar is down, and kubelet's own restart of the native sidecar takes it over. "+
			"Reads stall and never fail, so the reader never exits and its rule never restarts the pod: with a kept "+
			"descriptor the in-place restart is not needed, the sidecar's own restart brings the volume back."),
		scenarios.Kill(topology.SidecarContainer), scenarios.Start(topology.SidecarContainer))
	// Neither container exits, so neither restarts.
	keepFD.Expect = slices.Insert(keepFD.Expect, 2, noRestarts(reader), noRestarts(holder))
	return []scenarios.Scenario{all, subPath, sidecar, keepFD}
}
