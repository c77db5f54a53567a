package catalog

import (
	"slices"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// A mode is what the rows of one FUSE mode share, so that a row gives only its own text and a template (below)
// its steps and expectations: the same fault then reads the same in every mode that has what it kills.
type mode struct {
	// name and title begin the names and titles of its rows ("keeper-", "Keeper mode: ").
	name, title string
	// base holds what its rows have in common: the plugin, the pod of its readers, where they run.
	base scenarios.Scenario
	// directIO: its lone readers (lone) read with O_DIRECT, so that every read reaches the server.
	directIO bool
}

// row is the mode's row called name: its title and what it shows, on the mode's base.
func (m mode) row(name, title, shows string) scenarios.Scenario {
	s := m.base
	s.Name, s.Title, s.Shows = m.name+name, m.title+title, shows
	return s
}

// lone is the mode with a pod of one reader instead, which keeps its descriptor open from before the fault and,
// when exits, exits on its first error.
func (m mode) lone(exits bool) mode {
	m.base.Pod = pod(scenarios.Container{Name: reader, ExitOnError: exits, KeepOpen: true, DirectIO: m.directIO})
	return m
}

// withPlugin is the mode with plugin p instead.
func (m mode) withPlugin(p scenarios.Plugin) mode {
	m.base.Plugin = p
	return m
}

// withPod is the mode with pod p instead.
func (m mode) withPod(p scenarios.Pod) mode {
	m.base.Pod = p
	return m
}

// pod is a pod of containers cs that kubelet restarts whenever they exit.
func pod(cs ...scenarios.Container) scenarios.Pod {
	return scenarios.Pod{RestartPolicy: scenarios.RestartAlways, Containers: cs}
}

// everyServer is s run by CI with each real server on the kube backend too, for why.
func everyServer(s scenarios.Scenario, why string) scenarios.Scenario {
	s.EveryServer = why
	return s
}

// survives makes s the row of faults that the mode's holders ride out: after warm-up reads, the faults, then
// reads watched. No read of any of its containers fails after the first fault and the volume dir stays alive:
// the reads wait, they do not fail.
func survives(s scenarios.Scenario, faults ...scenarios.Step) scenarios.Scenario {
	s.Steps = slices.Concat([]scenarios.Step{warmUp}, faults, []scenarios.Step{scenarios.Observe(watchReads)})
	s.Expect = nil
	for _, c := range s.Pod.Containers {
		s.Expect = append(s.Expect, scenarios.Expectation{Check: scenarios.NeverFails{C: c.Name, After: scenarios.AfterKill, Reads: 10}})
	}
	s.Expect = append(s.Expect, scenarios.Expectation{Check: scenarios.VolumeDirAlive{}})
	return s
}

// pluginRestartSurvives makes s the row of a plugin restart that the mode's other holders ride out: reads are
// watched while the plugin is down and after it is back.
func pluginRestartSurvives(s scenarios.Scenario) scenarios.Scenario {
	return also(survives(s, scenarios.KillPlugin(), scenarios.Observe(watchReads), scenarios.StartPlugin()),
		scenarios.NeverFails{C: reader, After: scenarios.AfterPluginBack, Reads: 5})
}

// also is s expecting checks too, after what it expects already.
func also(s scenarios.Scenario, checks ...scenarios.Check) scenarios.Scenario {
	s.Expect = slices.Clone(s.Expect)
	for _, c := range checks {
		s.Expect = append(s.Expect, scenarios.Expectation{Check: c})
	}
	return s
}

// holdersDie makes s the row where every holder of the connection dies at once (the plugin, and the keeper in
// the modes that have one): the kernel ends the connection and no process has it to hand on, the limit of every
// mode. The plugin does not restore its mounts, so the reader fails from the first read after the kill, forever
// (restart-no-restore).
func holdersDie(s scenarios.Scenario) scenarios.Scenario {
	s = everyHolderDies(s, warmUp, untilENOTCONN)
	s.Expect = []scenarios.Expectation{
		failsFirst(reader),
		{Check: scenarios.KeepsFailing{C: reader, Errno: "ENOTCONN", After: scenarios.AfterPluginBack}},
		{Check: scenarios.NeverRecovers{C: reader, After: scenarios.AfterPluginBack, For: watchReads}},
		noRestarts(reader),
		{Check: scenarios.VolumeDir{Errno: "ENOTCONN", After: scenarios.AfterPluginBack}},
	}
	return s
}

// everyHolderDies gives s the steps of every holder of its connection dying at once, without a restore: warm,
// every holder killed, until fails (the workload's first error), the volume dir dead, every holder started
// again, a while watched.
func everyHolderDies(s scenarios.Scenario, warm, fails scenarios.Step) scenarios.Scenario {
	kill, start := everyHolder(s)
	s.Plugin.RestoreMounts, s.Plugin.RestoreStrategy = false, ""
	s.Steps = slices.Concat([]scenarios.Step{warm}, kill, []scenarios.Step{fails, hostDead}, start,
		[]scenarios.Step{scenarios.Observe(watchReads)})
	return s
}

// everyHolder are the steps that kill every holder of s's connection at once (the plugin, and the keeper when
// its mode has one) and those that start them again.
func everyHolder(s scenarios.Scenario) (kill, start []scenarios.Step) {
	kill, start = []scenarios.Step{scenarios.KillPlugin()}, []scenarios.Step{scenarios.StartPlugin()}
	if s.Plugin.Topology().Has(topology.KeeperContainer) {
		kill, start = append(kill, scenarios.Kill(topology.KeeperContainer)), append(start, scenarios.Start(topology.KeeperContainer))
	}
	return kill, start
}

// restartHeals makes s the row of a plugin restart that ends the connection, with restoreMounts and a reader
// that exits on error: while the host's volume dir is dead its restarts fail (kubelet's stat of it), and once
// the plugin has restored its mounts the next restart reads again (restart).
func restartHeals(s scenarios.Scenario) scenarios.Scenario {
	s.Plugin.RestoreMounts, s.Plugin.RestoreStrategy = true, scenarios.StrategyRebind
	s.Steps = deadThenBack(untilStatFails,
		scenarios.WaitFor(scenarios.Recovers{C: reader}, scenarios.Dur{Fixed: 10 * time.Second, Backoffs: 12}),
		scenarios.Observe(scenarios.Dur{Reads: 3}),
	)
	s.Expect = []scenarios.Expectation{
		failsFirst(reader),
		{Check: scenarios.Exits{C: reader, Code: 1}},
		{Check: scenarios.StartFails{C: reader, Contains: failedToStatVolume, Errno: "ENOTCONN"}},
		{Check: scenarios.VolumeDir{After: scenarios.AfterPluginBack}},
		{Check: scenarios.Recovers{C: reader, Instance: scenarios.NewInstance}},
	}
	return s
}

// readInFlight makes s the row of a FUSE server killed with a read inside it (steps, after warm-up reads) in a
// mode that takes connections over: the read returns late instead of failing, and no read after it fails.
func readInFlight(s scenarios.Scenario, steps ...scenarios.Step) scenarios.Scenario {
	s.Steps = append([]scenarios.Step{warmUp}, steps...)
	s.Expect = []scenarios.Expectation{
		{Check: scenarios.InFlightReadSucceeds{C: reader}},
		{Check: scenarios.NeverFails{C: reader, After: scenarios.AfterKill, Reads: 2}},
	}
	return s
}

// endsWait is what a mode promises when no server can come back: the plugin or the relay ends the wait within
// d with an error, and the reader exits instead of hanging.
func endsWait(d time.Duration) []scenarios.Expectation {
	return []scenarios.Expectation{
		{Check: scenarios.FailsWithin{C: reader, Within: scenarios.Dur{Fixed: d}}},
		{Check: scenarios.Exits{C: reader, Code: 1}},
	}
}

// exitsWithin waits until the reader has exited, for a wait the mode ends within d.
func exitsWithin(d time.Duration) scenarios.Step {
	return scenarios.WaitFor(scenarios.Exits{C: reader, Code: 1}, scenarios.Dur{Fixed: d + 10*time.Second})
}

// failsFirst: c's first read after the kill fails with ENOTCONN.
func failsFirst(c string) scenarios.Expectation {
	return scenarios.Expectation{Check: scenarios.FailsWith{C: c, Errno: "ENOTCONN", Within: scenarios.Dur{Fixed: 5 * time.Second, Reads: 2}}}
}

// noRestarts: c never exits, so kubelet never restarts it.
func noRestarts(c string) scenarios.Expectation {
	return scenarios.Expectation{Check: scenarios.Restarts{C: c, Min: 0, Max: 0}}
}

// beforeSubPathFix is c expected on the kubelets before the subPath fix, and sinceSubPathFix on those since it
// (SubPathSourceBefore, SubPathSourceSince).
func beforeSubPathFix(c scenarios.Check) scenarios.Expectation {
	return scenarios.Expectation{Check: c, Kubelet: scenarios.KubeletBefore(scenarios.SubPathFixedIn), Source: SubPathSourceBefore}
}

func sinceSubPathFix(c scenarios.Check) scenarios.Expectation {
	return scenarios.Expectation{Check: c, Kubelet: scenarios.KubeletSince(scenarios.SubPathFixedIn), Source: SubPathSourceSince}
}
