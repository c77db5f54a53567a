package catalog

import (
	"slices"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/restore"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
)

// setnsScenarios compare the three restore strategies for a container that keeps running across the crash,
// with the whole volume and with a subPath: rebind (restore-without-exit, rebind-subpath-running), stack
// (host-to-container, stack-subpath) and setns. Each has a container that opens the file for every read and
// one that keeps its descriptor; the workload checks every read's content, so a good read through a subPath
// proves it shows the file of the volume, not its root.
func setnsScenarios() []scenarios.Scenario {
	setns := scenarios.Plugin{RestoreMounts: true, RestoreStrategy: string(restore.Setns)}
	recovers := scenarios.Dur{Fixed: 10 * time.Second, Reads: 5}
	subPath := func(name string, keepOpen bool, p scenarios.Propagation) scenarios.Container {
		return scenarios.Container{Name: name, KeepOpen: keepOpen, Propagation: p, SubPath: scenarios.FileName, MountPath: "/mnt/" + scenarios.FileName}
	}
	// Both containers fail after the kill and the host's volume dir is dead before the plugin comes back.
	crash := func(more ...scenarios.Step) []scenarios.Step {
		return append([]scenarios.Step{
			warmUp,
			scenarios.KillPlugin(),
			scenarios.WaitFor(scenarios.FailsWith{C: reopen, Errno: "ENOTCONN"}, scenarios.Dur{Fixed: 10 * time.Second}),
			scenarios.WaitFor(scenarios.FailsWith{C: holder, Errno: "ENOTCONN"}, scenarios.Dur{Fixed: 10 * time.Second}),
			hostDead,
			scenarios.StartPlugin(),
		}, more...)
	}
	failed := []scenarios.Expectation{
		{Check: scenarios.FailsWith{C: reopen, Errno: "ENOTCONN", Within: scenarios.Dur{Fixed: 5 * time.Second, Reads: 2}}},
		{Check: scenarios.FailsWith{C: holder, Errno: "ENOTCONN", Within: scenarios.Dur{Fixed: 5 * time.Second, Reads: 2}}},
		{Check: scenarios.VolumeDir{After: scenarios.AfterPluginBack}},
		{Check: scenarios.Restarts{C: reopen, Min: 0, Max: 0}},
		{Check: scenarios.Restarts{C: holder, Min: 0, Max: 0}},
	}
	// The kept descriptor holds the dead connection under every strategy.
	keptDead := []scenarios.Expectation{
		{Check: scenarios.KeepsFailing{C: holder, Errno: "ENOTCONN", After: scenarios.AfterVolumeRestored}},
		{Check: scenarios.NeverRecovers{C: holder, After: scenarios.AfterVolumeRestored, For: watchReads}},
	}
	recovered := []scenarios.Expectation{{Check: scenarios.Recovers{C: reopen, Instance: scenarios.SameInstance}}}
	notRecovered := []scenarios.Expectation{
		{Check: scenarios.KeepsFailing{C: reopen, Errno: "ENOTCONN", After: scenarios.AfterVolumeRestored}},
		{Check: scenarios.NeverRecovers{C: reopen, After: scenarios.AfterVolumeRestored, For: watchReads}},
	}
	restored := scenarios.WaitFor(scenarios.VolumeDir{After: scenarios.AfterPluginBack}, scenarios.Dur{Fixed: 10 * time.Second})
	return []scenarios.Scenario{
		{
			Name:    "setns",
			Servers: scenarios.AllServers,
			Title:   "Re-binding restore inside the running container (--restore-strategy=setns)",
			Shows: "The plugin restores the volume dir, then enters the mount namespace of every process that still " +
				"holds the dead mount and puts a bind of the new staging mount in its place: the running container's " +
				"fresh opens read again without a restart and without any mount propagation, while the descriptor " +
				"held open across the crash stays ENOTCONN.",
			Plugin: setns,
			Pod: scenarios.Pod{RestartPolicy: scenarios.RestartAlways, Containers: []scenarios.Container{
				{Name: reopen, KeepOpen: false},
				{Name: holder, KeepOpen: true},
			}},
			Steps:  crash(scenarios.WaitFor(scenarios.Recovers{C: reopen}, recovers), restored, scenarios.Observe(watchReads)),
			Expect: slices.Concat(failed, recovered, keptDead),
		},
		{
			Name:    "setns-subpath",
			Servers: scenarios.AllServers,
			Title:   "Re-binding restore inside the running container, volume mounted with a subPath",
			Shows: "As setns, with both containers mounting the volume's file through a subPath: the plugin reads " +
				"from the container's mount table which part of the volume the dead mount showed and binds that same " +
				"part again, so the subPath still shows its file, not the volume's root (the re-binding trap " +
				"csi-plugin/README.md's \"Restore strategies\" describes). The kept descriptor stays ENOTCONN.",
			Plugin: setns,
			Pod: scenarios.Pod{RestartPolicy: scenarios.RestartAlways, Containers: []scenarios.Container{
				subPath(reopen, false, ""),
				subPath(holder, true, ""),
			}},
			Steps:  crash(scenarios.WaitFor(scenarios.Recovers{C: reopen}, recovers), restored, scenarios.Observe(watchReads)),
			Expect: slices.Concat(failed, recovered, keptDead),
		},
		{
			Name:    "stack-subpath",
			Servers: scenarios.AllServers,
			Title:   "Stacking restore with HostToContainer propagation, volume mounted with a subPath",
			Shows: "A subPath is a bind of kubelet's own (under volume-subpaths/), made from the volume of that moment: " +
				"the mount the plugin stacks on the volume dir does not propagate onto it, so even with " +
				"HostToContainer propagation the running container's fresh opens stay ENOTCONN.",
			Plugin: scenarios.Plugin{RestoreMounts: true, RestoreStrategy: scenarios.StrategyStack},
			Pod: scenarios.Pod{RestartPolicy: scenarios.RestartAlways, Containers: []scenarios.Container{
				subPath(reopen, false, scenarios.PropagationHostToContainer),
				subPath(holder, true, scenarios.PropagationHostToContainer),
			}},
			Steps:  crash(restored, scenarios.Observe(watchReads)),
			Expect: slices.Concat(failed, notRecovered, keptDead),
		},
		{
			Name:    "rebind-subpath-running",
			Servers: scenarios.AllServers,
			Title:   "Rebinding restore, running container with a subPath",
			Shows: "As restore-without-exit with both containers mounting the volume's file through a subPath: the " +
				"running container keeps the dead bind, fresh opens and the kept descriptor alike.",
			Plugin: scenarios.Plugin{RestoreMounts: true, RestoreStrategy: scenarios.StrategyRebind},
			Pod: scenarios.Pod{RestartPolicy: scenarios.RestartAlways, Containers: []scenarios.Container{
				subPath(reopen, false, ""),
				subPath(holder, true, ""),
			}},
			Steps:  crash(restored, scenarios.Observe(watchReads)),
			Expect: slices.Concat(failed, notRecovered, keptDead),
		},
	}
}
