package scenarios

import (
	"context"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// Backend deploys a scenario's setup on some platform and kills and starts its components when the steps say
// so; the runner (Run) owns the run directory and the evidence, sequences the steps and judges the outcome
// from the evidence alone.
//
// The local backend (scenarios/local) plays kubelet and the container runtime with real processes, mounts and
// namespaces; the Kubernetes backend (scenarios/kube) drives a real cluster (helm install of chart/, pods from
// manifests/, deletion of the plugin pod, logs, events, restart counts). Both run the same Scenario values.
//
// What a backend records into Env.Rec for the catalog's checks (see evidence.go for the kinds):
//   - every line of every workload container instance's JSON log, parsed with ParseWorkloadLine and tagged
//     with the container name and instance (restart count of that instance); a Kubernetes backend follows
//     the logs of each instance as it starts, because `kubectl logs --previous` only keeps the last one;
//   - KContainerStarted / KContainerExited (with ExitCode) per instance, and KStartFailed for every failed
//     start attempt with kubelet's event message ("Error: failed to generate container ... failed to stat
//     \"<volume dir>\": ...") in Message and the errno, when known, in Errno (e.g. from the message text);
//   - KKilled when it killed a component, and KStarted, KReady (serves again) and KExited as it sees a
//     component's lifecycle, each with Event.Component set;
//   - KProbe events on every change of the result of stat(2) on the host volume dir (Path PathVolume, Errno
//     "" for success; ProbeStates and StatHostPaths do this), and Rec.SetPaths with that dir; a backend that
//     cannot stat host paths leaves them out, and the checks that need them fail with "no stat of the volume
//     dir in the evidence".
//
// Methods are called from one goroutine, in this order: Name, Describe and Timing at any time, Setup, then
// any of Kill and Start, then Stop (always, also after a failed Setup or a cancelled context), then KeepNote.
type Backend interface {
	// Name is the backend's name ("local", "kube").
	Name() string
	// Describe says in one line how the backend runs (its timing, the image it deploys), for the run's header.
	Describe() string
	// Timing is the default read interval and the container restart back-off this backend runs with, and how
	// long its teardown may take; the scenarios' waits scale with it.
	Timing() Timing
	// Setup deploys sc's setup, recording evidence into env.Rec and writing its logs with env.Log: the
	// plugin container with sc.Plugin's flags, the volume staged and published for the pod the way kubelet
	// does it, and the pod's containers. It returns once every container has had its first start attempt.
	Setup(ctx context.Context, sc *Scenario, env *Env) error
	// Kill kills component c abruptly, as a container kill or `kubectl delete pod` does (the plugin's FUSE
	// servers die with it), and records KKilled. It returns once c is gone, and c must stay down until Start:
	// the steps in between (e.g. "wait until a start of the container fails") rely on it. A DaemonSet
	// recreates a deleted pod at once, so a Kubernetes backend keeps it off the node first and undoes that in
	// Start. The exception is the pod's native sidecar, which kubelet starts again by itself: every backend
	// lets that happen, and Start waits for it. A component the backend does not have is an error.
	Kill(ctx context.Context, c topology.Component) error
	// Start starts component c again with the same configuration and state and returns once it serves
	// (KReady). Like kubelet, no backend calls NodeStage/NodePublish again for volumes kubelet believes
	// mounted: whatever the plugin restores, it restores on its own.
	Start(ctx context.Context, c topology.Component) error
	// Upgrade replaces component c by a new build of it, as a rolling update does: the new version starts and
	// serves beside the old one, then the old one is stopped (SIGTERM). It records KUpgraded (Detail: the new
	// version) and returns once the old one is gone.
	Upgrade(ctx context.Context, c topology.Component) error
	// Stop tears everything down: every process it started is stopped, everything it mounted unmounted, every
	// object deleted, even after failures. It reports what it could not clean.
	Stop(ctx context.Context) error
	// KeepNote says, after Stop of a backend told to keep its setup, what was left and how to remove it; ""
	// otherwise.
	KeepNote() string
}

// The backends' names (Backend.Name), as Scenario.Backends lists them.
const (
	BackendLocal = "local"
	BackendKube  = "kube"
)

// NextBuildFlag is the flag that tells server's next build from the running one (RelayServer's Upgrade): its
// spec's upgradeArg, an argument that changes nothing the workload sees ("" when it has none).
func NextBuildFlag(server string) string {
	k, err := fuseserver.Lookup(server)
	if err != nil {
		return ""
	}
	return k.UpgradeArg()
}
