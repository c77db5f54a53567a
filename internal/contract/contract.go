// Package contract is what the components promise those who watch them: the names a chart, a pod or a test must
// use (FUSE modes, sockets, volumes), the lines the keeper and the sidecar log when something happened and how to
// read them, the reasons of the remediator's pod events, and the workload's JSON records. The components write
// them from here and the scenario backends read them from here, so neither side changes one alone. It is a leaf:
// it imports the standard library and x/sys/unix only, so whatever observes a component links nothing of it.
package contract

// The FUSE modes: where the plugin's FUSE servers run (csi-plugin --fuse-mode, the chart's fuseMode).
const (
	// ModeChild: a child process of the plugin, dying with it (through the parent-death signal), as a FUSE
	// server inside the plugin's container dies with that container.
	ModeChild = "child"
	// ModeSidecar: an unprivileged native sidecar of the workload pod serves the descriptor the plugin opened
	// and mounted, as in the GCS FUSE CSI driver; the mount lives and dies with the sidecar.
	ModeSidecar = "sidecar"
	// ModeKeeper: the keeper (csi-plugin keeper, a DaemonSet's pod) runs the servers; the plugin keeps a copy of
	// every connection and hands them to the keeper that connects.
	ModeKeeper = "keeper"
	// ModeRelay: the plugin serves each staging path with a relay (dummy-fuse --relay-backend) in front of the
	// real server's mount, which it keeps private and restarts when it dies.
	ModeRelay = "relay"
	// ModeRelayKeeper: the relay and the real server run in the keeper (its servers relay each connection to a
	// backend root the plugin hands over; the real server serves the backend connection the plugin mounted
	// privately and handed over); the plugin keeps a copy of the staging connection: no single crash ends it.
	ModeRelayKeeper = "relay-keeper"
)

// Where the plugin and its FUSE server holders meet.
const (
	// SidecarVolume is the emptyDir volume a pod of the sidecar mode must have, mounted in its sidecar: the
	// plugin puts each CSI volume's socket in <SidecarVolume>/<volume spec name>/<SidecarSocket> (the PV's name,
	// or the pod's volume name for an inline volume), as GCS puts it in its gke-gcsfuse-tmp emptyDir.
	SidecarVolume = "dfc-sidecar"
	// SidecarSocket is the name of that socket.
	SidecarSocket = "socket"
	// KeeperSocket is the keeper mode's session socket, beside the plugin's CSI socket unless configured
	// otherwise.
	KeeperSocket = "keeper.sock"
)

// SidecarReceived is what the sidecar's line says once it holds the volume's descriptor.
const SidecarReceived = "received the FUSE descriptor"

// The reasons of the events the remediator records on pods.
const (
	ReasonDeleted   = "DeletedForDeadVolume" // Normal: the pod is deleted so that its controller recreates it
	ReasonLeftAlone = "VolumeNotRemediated"  // Warning: the pod's volume will not heal and nothing recreates it
)
