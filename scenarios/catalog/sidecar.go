package catalog

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// sidecarReleases is why the sidecar scenarios run on every kubelet release: the sidecar's start before the
// containers and its restarts go through kubelet's handling of restartable init containers, which v1.37 changed
// (computeInitContainerActions in pkg/kubelet/kuberuntime/kuberuntime_container.go decides whether the pod has
// initialized from the current sandbox's containers only). v1.36.3 and v1.37.2 gave the same outcomes.
const sidecarReleases = "kubelet v1.37 changed its handling of restartable init containers (computeInitContainerActions, " +
	"pkg/kubelet/kuberuntime/kuberuntime_container.go), which starts and restarts the native sidecar"

// SidecarDelay is how long sidecar-late holds its sidecar back.
const SidecarDelay = time.Second

// sidecarMode is the plugin's sidecar mode (the GCS FUSE CSI design): the pod's own unprivileged sidecar serves
// the /dev/fuse descriptor of its mount. Its rows hold for every server and run on every kubelet release.
var sidecarMode = mode{name: "sidecar-", title: "Sidecar mode: ", base: scenarios.Scenario{
	Plugin:  scenarios.Plugin{Mode: topology.Sidecar},
	Servers: scenarios.AllServers, EveryRelease: sidecarReleases,
}}

// sidecarPod is a pod of containers cs with a FUSE sidecar held back by delay.
func sidecarPod(delay time.Duration, cs ...scenarios.Container) scenarios.Pod {
	p := pod(cs...)
	p.Sidecar = &scenarios.Sidecar{Delay: delay}
	return p
}

// sidecarScenarios are the scenarios of the sidecar mode (sidecarMode).
func sidecarScenarios() []scenarios.Scenario {
	m := sidecarMode.withPod(sidecarPod(0, scenarios.Container{Name: reader}))
	restart := survives(m.withPlugin(scenarios.Plugin{RestoreMounts: true, RestoreStrategy: scenarios.StrategyRebind, Mode: topology.Sidecar}).
		withPod(sidecarPod(0, scenarios.Container{Name: reader, ExitOnError: true, KeepOpen: true})).row("plugin-restart",
		"the plugin restarts under a running workload",
		"In the sidecar mode (the GCS FUSE CSI design) no FUSE server runs in the plugin: the pod's own "+
			"unprivileged sidecar serves the mount's /dev/fuse descriptor. Killing and restarting the plugin "+
			"changes nothing for the workload: its descriptor, opened before the kill, keeps reading, and the "+
			"host volume dir never dies, so nothing is mounted again."),
		scenarios.KillPlugin(), scenarios.Observe(watchReads), scenarios.StartPlugin())
	restart.Expect = []scenarios.Expectation{
		{Check: scenarios.NeverFails{C: reader, After: scenarios.AfterKill, Reads: 10}},
		{Check: scenarios.NeverFails{C: reader, After: scenarios.AfterPluginBack, Reads: 5}},
		{Check: scenarios.VolumeDirAlive{}},
	}

	late := m.withPod(sidecarPod(SidecarDelay, scenarios.Container{Name: reader, ExitOnError: true})).row("late",
		"the sidecar is held back at pod start",
		"Until the sidecar takes the descriptor and answers the kernel's INIT, every access to the mount "+
			"blocks, stat included: the container runtime's stat of the volume dir before the workload's "+
			"container starts waits for the sidecar, then the workload reads without ever seeing an error.")
	late.Steps = []scenarios.Step{warmUp, scenarios.Observe(scenarios.Dur{Reads: 3})}
	late.Expect = []scenarios.Expectation{
		{Check: scenarios.BlocksUntilServed{C: reader, Delay: SidecarDelay}},
		{Check: scenarios.NeverFails{C: reader, After: scenarios.FromStart, Reads: 3}},
		{Check: scenarios.VolumeDirAlive{}},
	}

	killed := m.row("killed", "the sidecar container is killed and restarted",
		"The sidecar holds the only descriptor of the mount (the plugin closed its copy once sent): when "+
			"it dies, the mount dies (ENOTCONN). Kubelet restarts the native sidecar, but it finds no socket and "+
			"nothing to serve; the mount stays dead for the running container, which only a new pod would fix.")
	killed.Steps = []scenarios.Step{warmUp, scenarios.Kill(topology.SidecarContainer), untilENOTCONN, hostDead,
		scenarios.Start(topology.SidecarContainer), scenarios.Observe(watchReads)}
	killed.Expect = []scenarios.Expectation{
		failsFirst(reader),
		{Check: scenarios.KeepsFailing{C: reader, Errno: "ENOTCONN", After: scenarios.AfterRestart}},
		{Check: scenarios.NeverRecovers{C: reader, After: scenarios.AfterRestart, For: watchReads}},
		{Check: scenarios.SidecarNeverServes{After: scenarios.AfterRestart, For: watchReads}},
		noRestarts(reader),
		{Check: scenarios.VolumeDir{Errno: "ENOTCONN", After: scenarios.AfterRestart}},
	}

	newPod := m.row("new-pod", "the sidecar is killed; only a new pod brings the volume back",
		"What fixes sidecar-killed: deleting the pod (kubelet unpublishes and unstages its volume) and "+
			"creating it again (a new pod UID, a new NodePublishVolume, a new descriptor for its new sidecar). "+
			"The new pod's container reads again; the sidecar's restart before that did not help.")
	newPod.Steps = []scenarios.Step{warmUp, scenarios.Kill(topology.SidecarContainer), untilENOTCONN,
		scenarios.Start(topology.SidecarContainer), scenarios.Observe(scenarios.Dur{Reads: 5}),
		scenarios.Kill(topology.WorkloadPod), scenarios.Start(topology.WorkloadPod),
		scenarios.WaitFor(scenarios.Recovers{C: reader}, scenarios.Dur{Fixed: 10 * time.Second, Reads: 5}),
		scenarios.Observe(scenarios.Dur{Reads: 3})}
	newPod.Expect = []scenarios.Expectation{
		failsFirst(reader),
		{Check: scenarios.NoGoodReadUntil{C: reader, Component: topology.WorkloadPod}},
		{Check: scenarios.Recovers{C: reader, Instance: scenarios.NewInstance}},
	}

	keepFD := survives(sidecarKeepFD.withPod(sidecarPod(0, scenarios.Container{Name: reader, ExitOnError: true, KeepOpen: true,
		ReadInterval: keeperReadInterval, DirectIO: true})).row("keep-fd",
		"the plugin keeps its copy of the descriptor; the sidecar is killed",
		"With --sidecar-keep-fd the plugin keeps its copy of the pod's FUSE descriptor and serves it to "+
			"whichever sidecar connects, with the kernel's INIT as first answered. The killed sidecar's "+
			"connection outlives it; kubelet restarts the native sidecar, which takes the connection over "+
			"(INIT replayed, the requests its predecessor had read resent): a stall, where sidecar-killed "+
			"gets ENOTCONN for good."),
		scenarios.Kill(topology.SidecarContainer), scenarios.Start(topology.SidecarContainer))
	return []scenarios.Scenario{restart, late, killed, newPod, keepFD}
}

// sidecarKeepFD is the sidecar mode with --sidecar-keep-fd, beyond the GCS design: the plugin keeps its copy of
// each pod's descriptor, so that a restarted sidecar takes the connection over.
var sidecarKeepFD = mode{name: "sidecar-", title: "Sidecar mode, beyond GCS: ", base: scenarios.Scenario{
	Plugin: scenarios.Plugin{Mode: topology.Sidecar, SidecarKeepFD: true}, EveryRelease: sidecarReleases,
}}

// WithSidecarDelay returns the scenario with its FUSE sidecar held back by d instead (sidecar-late at another
// delay), named <name>-<d>: the expectation that the first access waits for the sidecar is about d.
func WithSidecarDelay(s scenarios.Scenario, d time.Duration) (scenarios.Scenario, error) {
	if s.Pod.Sidecar == nil {
		return s, fmt.Errorf("scenario %s: the pod has no sidecar to hold back", s.Name)
	}
	if d < 0 {
		return s, fmt.Errorf("scenario %s: negative sidecar delay %s", s.Name, d)
	}
	s.Name = fmt.Sprintf("%s-%s", s.Name, d)
	s.Title = fmt.Sprintf("%s (sidecar delay %s)", s.Title, d)
	sc := *s.Pod.Sidecar
	sc.Delay = d
	s.Pod.Sidecar = &sc
	s.Expect = slices.Clone(s.Expect)
	for i, e := range s.Expect {
		if c, ok := e.Check.(scenarios.BlocksUntilServed); ok {
			c.Delay = d
			s.Expect[i].Check = c
		}
	}
	return s, nil
}

// VarySidecarDelay replaces each scenario of list whose FUSE sidecar is held back (sidecar-late) by one variant
// per delay (WithSidecarDelay), to see how long the first access waits as the delay varies; the others stay.
// It is an error when no scenario of list holds its sidecar back.
func VarySidecarDelay(list []scenarios.Scenario, delays []time.Duration) ([]scenarios.Scenario, error) {
	var out []scenarios.Scenario
	varied := false
	for _, s := range list {
		if s.Pod.Sidecar == nil || s.Pod.Sidecar.Delay <= 0 {
			out = append(out, s)
			continue
		}
		varied = true
		for _, d := range delays {
			v, err := WithSidecarDelay(s, d)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
	}
	if !varied {
		return nil, errors.New("no scenario selected holds its sidecar back (sidecar-late does)")
	}
	return out, nil
}

// ParseDelays parses a list of durations separated by commas or spaces ("0s,1s,3s").
func ParseDelays(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		d, err := time.ParseDuration(f)
		if err != nil {
			return nil, err
		}
		if d < 0 {
			return nil, fmt.Errorf("negative delay %s", d)
		}
		out = append(out, d)
	}
	if len(out) == 0 {
		return nil, errors.New("no delay given")
	}
	return out, nil
}
