package catalog

import (
	"slices"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/contract"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
)

// remediation is how the remediate rows run the remediator: a short grace period and frequent passes, for a
// fast run (the chart's defaults are 2m and 30s).
var remediation = &scenarios.Remediation{Grace: 2 * time.Second, Interval: 500 * time.Millisecond}

// remediatorReleases is why the remediate rows run on every kubelet release: the remediator's decision reads
// the node's kubelet version (its subPath rule, csi-plugin/remediate/decide.go).
const remediatorReleases = "the remediator's decision depends on the node's kubelet version (its subPath rule, csi-plugin/remediate/decide.go)"

// recoverWait bounds the wait for a recreated pod's first good read: the grace period, a pass, the pod's
// teardown and setup.
var recoverWait = scenarios.Dur{Fixed: 30 * time.Second}

// healthReported is kubelet's report of the dead volume within reported after after, as its version makes it:
// up to v1.36 an event from NodeGetVolumeStats's VolumeCondition, since v1.37 pod.status.volumeHealth.
func healthReported(after scenarios.Anchor, reported scenarios.Dur) []scenarios.Expectation {
	return []scenarios.Expectation{
		{Check: scenarios.HealthReported{After: after, Within: reported},
			Kubelet: scenarios.KubeletBefore(scenarios.VolumeHealthManagerIn), Source: "pkg/kubelet/server/stats/volume_stat_calculator.go (v1.36)"},
		{Check: scenarios.HealthReported{Status: true, After: after, Within: reported},
			Kubelet: scenarios.KubeletSince(scenarios.VolumeHealthManagerIn), Source: "pkg/kubelet/volumemanager/volumehealth/ (v1.37)"},
	}
}

// healthScenarios are the rows of volume health: what kubelet reports of a dead volume, per version, and the
// opt-in remediator, which deletes the pods that nothing else will heal when a controller recreates them.
func healthScenarios() []scenarios.Scenario {
	bare := pod(scenarios.Container{Name: reader})
	owned := bare
	owned.Controller = scenarios.ControllerReplicaSet
	restore := scenarios.Plugin{RestoreMounts: true, RestoreStrategy: scenarios.StrategyRebind, Remediation: remediation}
	deleted := scenarios.Expectation{Check: scenarios.PodEvent{Reason: contract.ReasonDeleted}}
	notDeleted := scenarios.Expectation{Check: scenarios.PodEvent{Reason: contract.ReasonDeleted, None: true}}
	// A report comes at the first probe after the plugin's return, when kubelet has the driver registered again
	// (v1.37.2: 3.0 s after its return with a period of 2 s), and the API server has the status or event.
	reported := scenarios.Dur{Fixed: 2*scenarios.HealthPeriod + time.Second}
	watchProbes := scenarios.Observe(scenarios.Dur{Fixed: 2 * scenarios.HealthPeriod})
	// The health rows run kubelet with the CSIVolumeHealth gate.
	probed := mode{base: scenarios.Scenario{VolumeHealth: true}}
	remediated := mode{base: scenarios.Scenario{Plugin: restore, Pod: bare, EveryRelease: remediatorReleases}}

	report := probed.withPod(pod(scenarios.Container{Name: reader, KeepOpen: true})).row("health-report", "Volume health: kubelet reports the dead volume, as its version does",
		"With the CSIVolumeHealth gate kubelet asks the plugin about the volume every volumeStatsAggPeriod. "+
			"Up to v1.36 it reads the VolumeCondition of NodeGetVolumeStats and records a VolumeConditionAbnormal "+
			"Warning event on the pod; v1.37 calls NodeGetVolumeHealth and writes pod.status.volumeHealth. Only the "+
			"plugin can answer, so the report comes within a period of its return. It reports; nothing acts.")
	report.Steps = []scenarios.Step{warmUp, watchProbes, scenarios.KillPlugin(), untilENOTCONN, hostDead, scenarios.StartPlugin(), watchProbes}
	report.Expect = slices.Concat([]scenarios.Expectation{failsFirst(reader)}, healthReported(scenarios.AfterPluginBack, reported),
		[]scenarios.Expectation{{Check: scenarios.NeverRecovers{C: reader, After: scenarios.AfterPluginBack, For: scenarios.Dur{Fixed: 2 * scenarios.HealthPeriod}}}})

	serverKill := everyServer(probed.withPod(bare).row("health-server-kill", "Volume health against the truth: the FUSE server dies, the plugin lives",
		"Only the FUSE server dies (child placement); the plugin stays and answers kubelet's health question. "+
			"The workload's reads fail at once (the truth), and kubelet reports the volume within a period of the "+
			"kill, whatever the server: the plugin's probe reaches the server (a statfs, which no kernel cache "+
			"answers), so a mount whose attributes and entries the kernel still caches is reported dead too, "+
			"unlike a stat of it or a mount-point check."),
		"whether the plugin's probe sees a dead volume depends on what the server's kernel caches still answer")
	serverKill.Servers = scenarios.AllServers
	serverKill.Steps = []scenarios.Step{warmUp, watchProbes, scenarios.Kill(topology.FuseServer), untilENOTCONN, hostDead,
		scenarios.Observe(scenarios.Dur{Fixed: 2*scenarios.HealthPeriod + time.Second})}
	serverKill.Expect = slices.Concat(
		[]scenarios.Expectation{{Check: scenarios.FailsWith{C: reader, Errno: "ENOTCONN", Within: scenarios.Dur{Fixed: 5 * time.Second, Reads: 4}}}},
		healthReported(scenarios.AfterKill, reported),
		[]scenarios.Expectation{{Check: scenarios.NeverRecovers{C: reader, After: scenarios.AfterKill, For: scenarios.Dur{Fixed: 2 * scenarios.HealthPeriod}}}})

	running := remediated.withPod(owned).row("remediate-running", "Remediator: a Deployment's pod whose running container holds the dead mount is recreated",
		"The plugin restores the volume, but the running container keeps the dead bind (restore-without-exit). "+
			"The remediator sees it from the plugin's records and the container's start time, and deletes the pod; "+
			"its ReplicaSet creates a new one, which gets a fresh mount and reads again.")
	running.Steps = deadThenBack(untilENOTCONN, scenarios.WaitFor(scenarios.Recovers{C: reader}, recoverWait), scenarios.Observe(scenarios.Dur{Reads: 3}))
	running.Expect = []scenarios.Expectation{failsFirst(reader), deleted,
		{Check: scenarios.NoGoodReadUntil{C: reader, Component: topology.WorkloadPod}},
		{Check: scenarios.Recovers{C: reader, Instance: scenarios.NewInstance}},
	}

	subPath := remediated.withPod(scenarios.Pod{RestartPolicy: scenarios.RestartAlways, Controller: scenarios.ControllerReplicaSet, Containers: []scenarios.Container{
		{Name: reader, ExitOnError: true, KeepOpen: true, SubPath: scenarios.FileName, MountPath: "/mnt/" + scenarios.FileName},
	}}).row("remediate-subpath", "Remediator: a subPath that the kubelet will not repair is recovered through a new pod",
		"As in subpath: up to v1.36 kubelet re-uses the dead subPath bind at every restart, forever. The "+
			"remediator deletes the Deployment's pod there, and the new pod reads. Since v1.37 kubelet repairs the "+
			"bind itself at the container's restart and the remediator leaves the pod alone.")
	subPath.Steps = deadThenBack(untilSubPathFails, scenarios.WaitFor(scenarios.Recovers{C: reader}, recoverWait), scenarios.Observe(scenarios.Dur{Reads: 3}))
	subPath.Expect = []scenarios.Expectation{failsFirst(reader),
		{Check: scenarios.Exits{C: reader, Code: 1}},
		{Check: scenarios.Recovers{C: reader, Instance: scenarios.NewInstance}},
		beforeSubPathFix(deleted.Check),
		sinceSubPathFix(notDeleted.Check),
	}

	bareLeft := remediated.row("remediate-bare-pod", "Remediator: a bare pod is left alone, with a Warning event that says why",
		"The same dead mount as remediate-running, but no controller would recreate the pod: deleting it would "+
			"lose it. The remediator records a Warning event on the pod instead, and the pod stays broken.")
	bareLeft.Steps = deadThenBack(untilENOTCONN, scenarios.WaitFor(scenarios.PodEvent{Reason: contract.ReasonLeftAlone}, recoverWait), scenarios.Observe(watchReads))
	bareLeft.Expect = []scenarios.Expectation{failsFirst(reader),
		{Check: scenarios.PodEvent{Reason: contract.ReasonLeftAlone}},
		notDeleted,
		{Check: scenarios.NeverRecovers{C: reader, After: scenarios.AfterPluginBack, For: watchReads}},
		noRestarts(reader),
	}
	return []scenarios.Scenario{report, serverKill, running, subPath, bareLeft}
}
