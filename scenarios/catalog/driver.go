package catalog

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/contract"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// The workload containers of a driver-agnostic row, one per I/O kind: the same for every driver, so that what
// is measured is comparable. The kube backend points each at the run's read path (--read-path).
const (
	// DriverKeptFD keeps one descriptor, opened before the fault, for every read.
	DriverKeptFD = "kept-fd"
	// DriverNewOpen opens the file for every read.
	DriverNewOpen = "new-open"
	// DriverSubPath mounts the file alone through kubelet's subPath and opens it for every read.
	DriverSubPath = "subpath"
	// DriverInFlight keeps a descriptor and reads with O_DIRECT, so every read reaches the driver's FUSE server.
	DriverInFlight = "direct-read"
)

// DriverContainers are the I/O kinds of a driver-agnostic row, in the profile's order. The stat kind is the
// backend's stat of the pod's volume dir (the probe), not a container.
var DriverContainers = []string{DriverKeptFD, DriverNewOpen, DriverSubPath, DriverInFlight}

// The driver-agnostic rows' names.
const (
	DriverPodDelete   = "driver-pod-delete"
	DriverRollout     = "driver-rollout"
	DriverProcessKill = "driver-process-kill"
	DriverMountPod    = "driver-mount-pod-delete"
	DriverRemediate   = "driver-remediate"
)

// Drivers are the driver-agnostic rows: they run against any CSI driver installed in the cluster (kube only,
// dfc-scenario --driver), know nothing of its internals and expect nothing of it: what the workload saw is
// measured (Scenario.Measured) and reported as an outage profile per I/O kind. They are not part of All,
// which is this project's chart with its expected outcomes.
func Drivers() []scenarios.Scenario {
	pod := scenarios.Pod{RestartPolicy: scenarios.RestartAlways, Containers: []scenarios.Container{
		{Name: DriverKeptFD, KeepOpen: true},
		{Name: DriverNewOpen},
		{Name: DriverSubPath, SubPath: scenarios.FileName, MountPath: "/mnt/" + scenarios.FileName},
		{Name: DriverInFlight, KeepOpen: true, DirectIO: true},
	}}
	warmed := ReadsOK{Cs: DriverContainers, N: 3}
	warm := scenarios.WaitFor(warmed, scenarios.Dur{Fixed: 60 * time.Second})
	// After the fault: long enough for a few restart attempts of a container that exited (back-offs 1, 2, 4).
	watch := scenarios.Observe(scenarios.Dur{Fixed: 5 * time.Second, Backoffs: 4})
	row := func(name, title, shows string, steps ...scenarios.Step) scenarios.Scenario {
		return scenarios.Scenario{
			Name: name, Title: title, Shows: shows, Pod: pod, Measured: true,
			Plugin:   scenarios.Plugin{Mode: topology.ForeignDriver},
			Steps:    slices.Concat([]scenarios.Step{warm}, steps, []scenarios.Step{watch}),
			Expect:   []scenarios.Expectation{{Check: warmed, Source: "the evidence was collected: each I/O kind read before the fault"}},
			Backends: []string{scenarios.BackendKube}, BackendsWhy: "it runs against a CSI driver installed in a cluster",
			Note: "Driver-agnostic: nothing is expected of the driver; the outage profile per I/O kind is measured.",
		}
	}
	// The remediator for any driver (csi-remediate --driver), run as the chart's remediate rows run it; the
	// workload is a Deployment's pod, which the remediator may delete. Its successor gets a minute to read: a
	// node plugin comes back and a new pod starts within seconds (docs/outage-matrix.md, driver-remediate).
	remediated := row(DriverRemediate, "the driver's node plugin pod deleted, with the remediator for any driver (csi-remediate --driver)",
		"whether the remediator brings a Deployment's workload back by itself after its driver's node plugin restarts, and how long that takes",
		scenarios.Kill(topology.DriverPod), scenarios.Start(topology.DriverPod),
		scenarios.WaitFor(scenarios.Recovers{C: DriverKeptFD, Instance: scenarios.NewInstance}, scenarios.Dur{Fixed: time.Minute}))
	remediated.Pod.Controller = scenarios.ControllerReplicaSet
	remediated.Plugin.Remediation = remediation
	remediated.Expect = append(remediated.Expect, scenarios.Expectation{Check: scenarios.PodEvent{Reason: contract.ReasonDeleted},
		Source: "the remediator deleted the pod whose volume died, for its ReplicaSet to recreate"})
	return []scenarios.Scenario{
		row(DriverPodDelete, "the driver's node plugin pod deleted under a running workload",
			"what a crash or a `kubectl delete pod` of the node plugin costs the workloads on its node",
			scenarios.Kill(topology.DriverPod), scenarios.Start(topology.DriverPod)),
		row(DriverRollout, "the driver's node plugin DaemonSet rolled (rollout restart)",
			"what an upgrade of the driver costs the workloads: the DaemonSet replaces the node's pod",
			scenarios.Upgrade(topology.DriverDaemonSet)),
		row(DriverProcessKill, "a named process in the driver's node plugin pod killed (--fuse-process)",
			"what a crash of the driver's FUSE server costs when it runs in the node plugin pod",
			scenarios.Kill(topology.DriverProcess), scenarios.Start(topology.DriverProcess)),
		row(DriverMountPod, "the driver's mount pod deleted (--mount-pod-selector)",
			"what the loss of a mount pod costs, for drivers that run FUSE in a pod of its own",
			scenarios.Kill(topology.MountPod), scenarios.Start(topology.MountPod)),
		remediated,
	}
}

// DriverNames are the driver-agnostic rows' names.
func DriverNames() []string {
	var out []string
	for _, s := range Drivers() {
		out = append(out, s.Name)
	}
	return out
}

// SelectDrivers returns the driver-agnostic rows names asks for ("all": every one).
func SelectDrivers(names []string) ([]scenarios.Scenario, error) {
	var out []scenarios.Scenario
	for _, n := range names {
		i := slices.IndexFunc(Drivers(), func(s scenarios.Scenario) bool { return s.Name == n })
		switch {
		case n == "all":
			out = append(out, Drivers()...)
		case i < 0:
			return nil, fmt.Errorf("no driver-agnostic scenario %q (with --driver: %s)", n, strings.Join(DriverNames(), ", "))
		default:
			out = append(out, Drivers()[i])
		}
	}
	return out, nil
}

// ReadsOK holds when each container of Cs has read N times without an error (whatever the content: a
// foreign driver's file has no known content); a container that never logged fails it.
type ReadsOK struct {
	Cs []string
	N  int
}

func (c ReadsOK) Describe() string {
	return fmt.Sprintf("%s each read the file %d times without an error", strings.Join(c.Cs, ", "), c.N)
}

func (c ReadsOK) Label() string { return "warm-up reads" }

func (c ReadsOK) Containers() []string { return c.Cs }

func (c ReadsOK) Eval(ev *scenarios.Evidence, _ scenarios.Timing) scenarios.Result {
	counts := map[string]int{}
	for _, e := range ev.Events {
		if e.Source == scenarios.SrcWorkload && e.Kind == scenarios.KRead && e.Errno == "" {
			counts[e.Container]++
		}
	}
	var parts []string
	ok := len(c.Cs) > 0
	for _, name := range c.Cs {
		parts = append(parts, fmt.Sprintf("%s: %d reads", name, counts[name]))
		ok = ok && counts[name] >= c.N
	}
	return scenarios.Result{OK: ok, Why: strings.Join(parts, ", ")}
}
