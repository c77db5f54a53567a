package scenarios

import "context"

// Backend deploys a scenario's setup on some platform, performs the steps' actions and reports Evidence.
//
// The local backend (scenarios/local) plays kubelet and the container runtime with real processes, mounts and
// namespaces; a Kubernetes backend drives a real cluster (helm install of chart/, pods from manifests/,
// `kubectl delete pod` of the plugin, kubectl logs / events / restart counts). Both run the same Scenario
// values; the runner (Run) sequences the steps and judges the outcome from the evidence alone.
//
// What the evidence must contain for the catalog's checks (see evidence.go for the kinds):
//   - every line of every workload container instance's JSON log, parsed with ParseWorkloadLine and tagged
//     with the container name and instance (restart count of that instance); a Kubernetes backend follows
//     the logs of each instance as it starts, because `kubectl logs --previous` only keeps the last one;
//   - KContainerStarted / KContainerExited (with ExitCode) per instance, and KStartFailed for every failed
//     start attempt with kubelet's event message ("Error: failed to generate container ... failed to stat
//     \"<volume dir>\": ...") in Message and the errno, when known, in Errno (e.g. from the message text);
//   - KPluginKilled when the plugin container was killed and KPluginReady when a (new) plugin serves CSI again;
//   - KProbe events on every change of the result of stat(2) on the host volume dir (Path PathVolume, Errno
//     "" for success), and Paths[PathVolume] set to that dir; a backend that cannot stat host paths leaves
//     them out, and the checks that need them fail with "no stat of the volume dir in the evidence".
//
// Methods are called from one goroutine, in this order: Timing, Start, then any of KillPlugin, StartPlugin
// and Evidence, then Stop (always, also after a failed Start or a cancelled context).
type Backend interface {
	// Name is the backend's name ("local", "kube").
	Name() string
	// Timing is the default read interval and the container restart back-off this backend runs with; the
	// scenarios' waits scale with it.
	Timing() Timing
	// Start deploys sc's setup, writing every component's logs into dir: the plugin container with sc.Plugin's
	// flags, the volume staged and published for the pod the way kubelet does it, and the pod's containers.
	// It returns once every container has had its first start attempt.
	Start(ctx context.Context, sc *Scenario, dir string) error
	// KillPlugin kills the plugin container abruptly, as a container kill or `kubectl delete pod` does; the
	// FUSE servers it runs die with it. It returns once the plugin is gone, and the plugin must stay down
	// until StartPlugin: the steps in between (e.g. "wait until a start of the container fails") rely on
	// it. A DaemonSet recreates a deleted pod at once, so a Kubernetes backend keeps it off the node first
	// (e.g. patch the DaemonSet's nodeSelector to a label no node has, then delete the pod with
	// --grace-period=0 --force for an abrupt kill) and undoes that in StartPlugin.
	KillPlugin(ctx context.Context) error
	// StartPlugin starts the plugin container again with the same flags and state and returns once it serves
	// CSI (Probe ready). Like kubelet, no backend calls NodeStage/NodePublish again for volumes kubelet
	// believes mounted: whatever the plugin restores, it restores on its own.
	StartPlugin(ctx context.Context) error
	// Evidence returns a snapshot of everything observed so far, with Until set to the snapshot's time.
	// The runner calls it every ~100 ms while it waits.
	Evidence(ctx context.Context) (*Evidence, error)
	// Stop tears everything down: every process it started is stopped, everything it mounted unmounted, every
	// object deleted, even after failures. It reports what it could not clean.
	Stop(ctx context.Context) error
}
