package catalog

import (
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// restartAllReleases is why the restart-all rows run on every kubelet release: the feature is young (beta and on
// by default since v1.36) and its kubelet code still changes from release to release.
const restartAllReleases = "KEP-5532's RestartAllContainers is beta since v1.36 and its kubelet code still changes: each release is measured"

// restartAllScenarios are the rows of KEP-5532's container restart rule action RestartAllContainers: one
// container's exit restarts every container of the pod in place (the same pod, UID and volumes).
func restartAllScenarios() []scenarios.Scenario {
	recovers := scenarios.Dur{Fixed: 10 * time.Second, Backoffs: 12}
	return []scenarios.Scenario{
		{
			Name:    "restart-all-containers",
			Servers: scenarios.AllServers,
			Title:   "Restore, and a restart rule that restarts the whole pod in place (KEP-5532 RestartAllContainers)",
			Shows: "The restart setup with a second container, holder, that keeps its descriptor and never exits on its " +
				"own: without help it would read ENOTCONN for good (restore-without-exit). The reader has a restart rule " +
				"RestartAllContainers for its exit code 1: when it exits on the dead mount, kubelet stops the holder at " +
				"once (SIGTERM, SIGKILL 2 s later) and starts both again in place, in the same pod with the same volumes " +
				"(nothing is published again). " +
				"While the plugin is down their starts fail as in restart; once it restored the volume, both read again: " +
				"one container's exit heals every container of the pod, without a new pod.",
			Plugin: scenarios.Plugin{RestoreMounts: true, RestoreStrategy: scenarios.StrategyRebind},
			Pod: scenarios.Pod{RestartPolicy: scenarios.RestartAlways, Containers: []scenarios.Container{
				{Name: reader, ExitOnError: true, KeepOpen: true, RestartAllContainers: true},
				{Name: holder, KeepOpen: true},
			}},
			Steps: deadThenBack(
				scenarios.WaitFor(scenarios.Exits{C: reader, Code: scenarios.RestartAllExitCode}, scenarios.Dur{Fixed: 10 * time.Second}),
				scenarios.WaitFor(scenarios.Recovers{C: reader}, recovers),
				scenarios.WaitFor(scenarios.Recovers{C: holder}, recovers),
				scenarios.Observe(scenarios.Dur{Reads: 3}),
			),
			Expect: []scenarios.Expectation{
				{Check: scenarios.FailsWith{C: reader, Errno: "ENOTCONN", Within: scenarios.Dur{Fixed: 5 * time.Second, Reads: 2}}},
				{Check: scenarios.Exits{C: reader, Code: scenarios.RestartAllExitCode}},
				{Check: scenarios.Recovers{C: reader, Instance: scenarios.NewInstance}},
				{Check: scenarios.Recovers{C: holder, Instance: scenarios.NewInstance}},
			},
			EveryRelease: restartAllReleases,
		},
		{
			Name:    "restart-all-subpath",
			Servers: scenarios.AllServers,
			Title:   "restart-all-containers with the reader on a subPath: does the in-place restart prepare the subPath again?",
			Shows: "The reader mounts a subPath of the volume (kubelet's bind under volume-subpaths/, made at its first " +
				"start), the holder the whole volume. The reader's exit on the dead mount restarts both in place. " +
				"RestartAllContainers removes the containers, not the pod's subPath binds: each start goes through the same " +
				"check of the old bind as an ordinary restart (subpath), so the kubelet version decides again. Up to v1.36 " +
				"the reader's starts fail with \"failed to prepare subPath\" for good, while the holder reads again; since " +
				"v1.37 kubelet binds the restored volume again and both read.",
			Plugin: scenarios.Plugin{RestoreMounts: true, RestoreStrategy: scenarios.StrategyRebind},
			Pod: scenarios.Pod{RestartPolicy: scenarios.RestartAlways, Containers: []scenarios.Container{
				{Name: reader, ExitOnError: true, KeepOpen: true, RestartAllContainers: true, SubPath: scenarios.FileName, MountPath: "/mnt/" + scenarios.FileName},
				{Name: holder, KeepOpen: true},
			}},
			Steps: deadThenBack(
				scenarios.WaitFor(scenarios.Exits{C: reader, Code: scenarios.RestartAllExitCode}, scenarios.Dur{Fixed: 10 * time.Second}),
				scenarios.WaitFor(scenarios.Recovers{C: holder}, recovers),
				scenarios.Observe(watchStarts),
			),
			Expect: []scenarios.Expectation{
				{Check: scenarios.FailsWith{C: reader, Errno: "ENOTCONN", Within: scenarios.Dur{Fixed: 5 * time.Second, Reads: 2}}},
				{Check: scenarios.Exits{C: reader, Code: scenarios.RestartAllExitCode}},
				{Check: scenarios.Recovers{C: holder, Instance: scenarios.NewInstance}},

				{Check: scenarios.StartFails{C: reader, After: scenarios.AfterVolumeRestored, Contains: failedToPrepareSubPath, Min: 2},
					Kubelet: scenarios.KubeletBefore(scenarios.SubPathFixedIn), Source: SubPathSourceBefore},
				{Check: scenarios.NeverRecovers{C: reader, After: scenarios.AfterVolumeRestored, For: watchStarts},
					Kubelet: scenarios.KubeletBefore(scenarios.SubPathFixedIn), Source: SubPathSourceBefore},

				{Check: scenarios.Recovers{C: reader, Instance: scenarios.NewInstance}, Kubelet: scenarios.KubeletSince(scenarios.SubPathFixedIn), Source: SubPathSourceSince},
			},
			EveryRelease: restartAllReleases,
		},
		{
			Name:    "restart-all-sidecar",
			Servers: scenarios.AllServers,
			Title:   "Sidecar mode: the sidecar is killed; does the reader's RestartAllContainers, restarting the sidecar in place, bring the volume back?",
			Shows: "sidecar-killed with a reader that exits on the dead mount and restarts the whole pod in place, and a " +
				"holder. Kubelet stops and removes every container, the native sidecar included, and starts them again in " +
				"the same pod; but nothing is published again, so the plugin sends the new sidecar no descriptor: it " +
				"serves nothing, the volume dir stays dead, and every start of the reader and the holder fails on it. " +
				"Restarting the sidecar in place does not bring the volume back: only a new pod does (sidecar-new-pod).",
			Plugin: scenarios.Plugin{Mode: topology.Sidecar},
			Pod: scenarios.Pod{RestartPolicy: scenarios.RestartAlways, Sidecar: &scenarios.Sidecar{}, Containers: []scenarios.Container{
				{Name: reader, ExitOnError: true, KeepOpen: false, RestartAllContainers: true},
				{Name: holder, KeepOpen: true},
			}},
			Steps: []scenarios.Step{
				warmUp,
				scenarios.Kill(topology.SidecarContainer),
				scenarios.WaitFor(scenarios.Exits{C: reader, Code: scenarios.RestartAllExitCode}, scenarios.Dur{Fixed: 10 * time.Second}),
				hostDead,
				scenarios.WaitFor(scenarios.StartFails{C: reader, Contains: failedToStatVolume}, scenarios.Dur{Fixed: 10 * time.Second, Backoffs: 4}),
				scenarios.Observe(watchStarts),
			},
			Expect: []scenarios.Expectation{
				{Check: scenarios.FailsWith{C: reader, Errno: "ENOTCONN", Within: scenarios.Dur{Fixed: 5 * time.Second, Reads: 2}}},
				{Check: scenarios.Exits{C: reader, Code: scenarios.RestartAllExitCode}},
				{Check: scenarios.StartFails{C: reader, Contains: failedToStatVolume, Errno: "ENOTCONN"}},
				{Check: scenarios.NeverRecovers{C: reader, After: scenarios.AfterKill, For: watchStarts}},
				{Check: scenarios.NeverRecovers{C: holder, After: scenarios.AfterKill, For: watchStarts}},
				{Check: scenarios.SidecarNeverServes{After: scenarios.AfterKill, For: watchStarts}},
				{Check: scenarios.VolumeDir{Errno: "ENOTCONN", After: scenarios.AfterKill}},
			},
			EveryRelease: restartAllReleases,
		},
		{
			Name:  "restart-all-sidecar-keep-fd",
			Title: "Sidecar mode with --sidecar-keep-fd: the sidecar is killed under a reader with a RestartAllContainers rule",
			Shows: "sidecar-keep-fd with restart-all-sidecar's pod: the plugin's kept copy of the descriptor keeps the " +
				"connection while the sidecar is down, and kubelet's own restart of the native sidecar takes it over. " +
				"Reads stall and never fail, so the reader never exits and its rule never restarts the pod: with a kept " +
				"descriptor the in-place restart is not needed, the sidecar's own restart brings the volume back.",
			Plugin: scenarios.Plugin{Mode: topology.Sidecar, SidecarKeepFD: true},
			Pod: scenarios.Pod{RestartPolicy: scenarios.RestartAlways, Sidecar: &scenarios.Sidecar{}, Containers: []scenarios.Container{
				{Name: reader, ExitOnError: true, KeepOpen: true, ReadInterval: keeperReadInterval, DirectIO: true, RestartAllContainers: true},
				{Name: holder, KeepOpen: true, ReadInterval: keeperReadInterval, DirectIO: true},
			}},
			Steps: []scenarios.Step{
				warmUp,
				scenarios.Kill(topology.SidecarContainer),
				scenarios.Start(topology.SidecarContainer),
				scenarios.Observe(watchReads),
			},
			Expect: []scenarios.Expectation{
				{Check: scenarios.NeverFails{C: reader, After: scenarios.AfterKill, Reads: 10}},
				{Check: scenarios.NeverFails{C: holder, After: scenarios.AfterKill, Reads: 10}},
				{Check: scenarios.Restarts{C: reader, Min: 0, Max: 0}},
				{Check: scenarios.Restarts{C: holder, Min: 0, Max: 0}},
				{Check: scenarios.VolumeDirAlive{}},
			},
			EveryRelease: restartAllReleases,
		},
	}
}
