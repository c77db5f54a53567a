package catalog

import (
	"slices"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/restore"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
)

// The steps and expectations of the rows of a container that keeps running across the crash with two readers,
// reopen and holder (host-to-container and the setns rows).
var (
	// untilReopenRecovers bounds the wait for reopen's first good read after the restore.
	untilReopenRecovers = scenarios.Dur{Fixed: 10 * time.Second, Reads: 5}
	// The kept descriptor holds the dead connection under every strategy.
	keptDead = []scenarios.Expectation{
		{Check: scenarios.KeepsFailing{C: holder, Errno: "ENOTCONN", After: scenarios.AfterVolumeRestored}},
		{Check: scenarios.NeverRecovers{C: holder, After: scenarios.AfterVolumeRestored, For: watchReads}},
	}
)

// bothFail are the steps of a plugin restart in which both readers fail after the kill and the host's volume
// dir is dead before the plugin comes back, then more.
func bothFail(more ...scenarios.Step) []scenarios.Step {
	return append([]scenarios.Step{
		warmUp,
		scenarios.KillPlugin(),
		scenarios.WaitFor(scenarios.FailsWith{C: reopen, Errno: "ENOTCONN"}, scenarios.Dur{Fixed: 10 * time.Second}),
		scenarios.WaitFor(scenarios.FailsWith{C: holder, Errno: "ENOTCONN"}, scenarios.Dur{Fixed: 10 * time.Second}),
		hostDead,
		scenarios.StartPlugin(),
	}, more...)
}

// setnsScenarios compare the three restore strategies for a container that keeps running across the crash,
// with the whole volume and with a subPath: rebind (restore-without-exit, rebind-subpath-running), stack
// (host-to-container, stack-subpath) and setns. Each has a container that opens the file for every read and
// one that keeps its descriptor; the workload checks every read's content, so a good read through a subPath
// proves it shows the file of the volume, not its root.
func setnsScenarios() []scenarios.Scenario {
	setns := childMode.withPlugin(scenarios.Plugin{RestoreMounts: true, RestoreStrategy: string(restore.Setns)})
	stack := childMode.withPlugin(scenarios.Plugin{RestoreMounts: true, RestoreStrategy: scenarios.StrategyStack})
	subPaths := func(p scenarios.Propagation) scenarios.Pod {
		file := func(name string, keepOpen bool) scenarios.Container {
			return scenarios.Container{Name: name, KeepOpen: keepOpen, Propagation: p, SubPath: scenarios.FileName, MountPath: "/mnt/" + scenarios.FileName}
		}
		return pod(file(reopen, false), file(holder, true))
	}
	failed := []scenarios.Expectation{failsFirst(reopen), failsFirst(holder), {Check: scenarios.VolumeDir{After: scenarios.AfterPluginBack}},
		noRestarts(reopen), noRestarts(holder)}
	// Fresh opens read again where the strategy reaches the running container, or stay ENOTCONN.
	recovered := func(s scenarios.Scenario) scenarios.Scenario {
		s.Steps = bothFail(scenarios.WaitFor(scenarios.Recovers{C: reopen}, untilReopenRecovers), untilRestored, scenarios.Observe(watchReads))
		s.Expect = slices.Concat(failed, []scenarios.Expectation{{Check: scenarios.Recovers{C: reopen, Instance: scenarios.SameInstance}}}, keptDead)
		return s
	}
	notRecovered := func(s scenarios.Scenario) scenarios.Scenario {
		s.Steps = bothFail(untilRestored, scenarios.Observe(watchReads))
		s.Expect = slices.Concat(failed, []scenarios.Expectation{
			{Check: scenarios.KeepsFailing{C: reopen, Errno: "ENOTCONN", After: scenarios.AfterVolumeRestored}},
			{Check: scenarios.NeverRecovers{C: reopen, After: scenarios.AfterVolumeRestored, For: watchReads}},
		}, keptDead)
		return s
	}
	return []scenarios.Scenario{
		recovered(setns.withPod(pod(scenarios.Container{Name: reopen}, scenarios.Container{Name: holder, KeepOpen: true})).row("setns", "Re-binding restore inside the running container (--restore-strategy=setns)",
			"The plugin restores the volume dir, then enters the mount namespace of every process that still "+
				"holds the dead mount and puts a bind of the new staging mount in its place: the running container's "+
				"fresh opens read again without a restart and without any mount propagation, while the descriptor "+
				"held open across the crash stays ENOTCONN.")),
		recovered(setns.withPod(subPaths("")).row("setns-subpath", "Re-binding restore inside the running container, volume mounted with a subPath",
			"As setns, with both containers mounting the volume's file through a subPath: the plugin reads "+
				"from the container's mount table which part of the volume the dead mount showed and binds that same "+
				"part again, so the subPath still shows its file, not the volume's root (the re-binding trap "+
				"csi-plugin/README.md's \"Restore strategies\" describes). The kept descriptor stays ENOTCONN.")),
		notRecovered(stack.withPod(subPaths(scenarios.PropagationHostToContainer)).row("stack-subpath", "Stacking restore with HostToContainer propagation, volume mounted with a subPath",
			"A subPath is a bind of kubelet's own (under volume-subpaths/), made from the volume of that moment: "+
				"the mount the plugin stacks on the volume dir does not propagate onto it, so even with "+
				"HostToContainer propagation the running container's fresh opens stay ENOTCONN.")),
		notRecovered(childMode.withPlugin(restoring).withPod(subPaths("")).row("rebind-subpath-running", "Rebinding restore, running container with a subPath",
			"As restore-without-exit with both containers mounting the volume's file through a subPath: the "+
				"running container keeps the dead bind, fresh opens and the kept descriptor alike.")),
	}
}
