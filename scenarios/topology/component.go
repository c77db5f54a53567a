package topology

// Component is a part of a scenario's setup that a step kills or starts.
//
// Adding a kind: a constant here with its words in components, a node in the topologies that have it
// (topology.go), and its part in each backend that plays it (a file with a constructor in the backend's
// partKinds).
type Component string

// The components steps can kill and start.
const (
	// PluginContainer is the CSI node plugin container; the FUSE servers it runs die with it.
	PluginContainer Component = "plugin"
	// SidecarContainer is the pod's FUSE sidecar (Pod.Sidecar), which serves the mount's /dev/fuse descriptor
	// in the plugin's sidecar mode. Kill kills its FUSE server as a crash does (the container exits with it);
	// kubelet starts a native sidecar again by itself (the first time at once), so Start only waits until it
	// runs again. It serves only if the plugin has a descriptor for it, and KReady says when it received one.
	SidecarContainer Component = "sidecar"
	// WorkloadPod is the workload pod as a whole. Kill deletes it the way kubelet tears a deleted pod down (its
	// containers stopped, then NodeUnpublishVolume and NodeUnstageVolume); Start creates it again, as its
	// controller would, with a new pod UID: NodeStageVolume, NodePublishVolume, its sidecar and containers.
	WorkloadPod Component = "pod"
	// KeeperContainer is the keeper of the plugin's keeper mode (`csi-plugin keeper`, a container of its own):
	// it holds a copy of every FUSE connection and runs the FUSE servers, which die with it.
	KeeperContainer Component = "keeper"
	// FuseServer is the FUSE server process that serves the scenario's volume in keeper mode. Kill sends it
	// SIGKILL, as a crash would; nobody starts it but the keeper, so Start waits until the keeper has a new
	// server serving the volume (KReady, Detail: its version).
	FuseServer Component = "fuse-server"
	// FuseSuccessor is the FUSE server that the keeper starts after FuseServer died: Kill sends SIGKILL to the
	// volume's server, then to its successor the moment the keeper names it (while it starts, replays the INIT
	// and asks for the resend: a death in the middle of the recovery). Start waits, as for FuseServer, until
	// the keeper has a server serving the volume again.
	FuseSuccessor Component = "fuse-successor"
	// FuseCrashLoop is the volume's FUSE servers when none can start: Kill sends SIGKILL to the running one and
	// then to every server the keeper starts for the volume, as soon as the keeper names it, until Start ends
	// the loop and waits until a server serves the volume again.
	FuseCrashLoop Component = "fuse-crash-loop"
	// PluginRecollecting is the plugin container (keeper mode) while the keeper hands it back its copies of the
	// connections: Kill starts the plugin, which is down, and sends it SIGKILL the moment the keeper reports
	// its session up (it has sent its hello and every copy; the plugin adopts one in well under a millisecond,
	// so the kill lands in or right after the adoption); Start is the plugin's start.
	PluginRecollecting Component = "plugin-recollecting"
	// DriverPod is the node plugin pod of a foreign CSI driver (a driver-agnostic run, kube only) on the
	// workload's node. Kill deletes it (grace period 0, as PluginContainer's kill); its DaemonSet creates a new
	// one at once, as it would in production, and Start waits until that one is ready.
	DriverPod Component = "driver-pod"
	// DriverDaemonSet is a foreign driver's node plugin DaemonSet: Upgrade restarts its rollout (kubectl rollout
	// restart), the way an upgrade happens, and returns once the new pod on the node is ready.
	DriverDaemonSet Component = "driver-daemonset"
	// DriverProcess is a named process (e.g. the FUSE server) in a foreign driver's node plugin pod: Kill sends
	// it SIGKILL, as a crash would; Start waits until the pod is ready again (whoever restarts the process).
	DriverProcess Component = "driver-process"
	// MountPod is a foreign driver's mount pod (a pod of its own that runs the FUSE server): Kill deletes it
	// (grace period 0); Start waits until a pod of the same selector is ready on the node, if the driver makes one.
	MountPod Component = "mount-pod"
	// RelayProcess is the relay that serves the volume's staging path in the relay mode: Kill sends it SIGKILL;
	// the plugin lets a successor take the connection over, and Start waits until one serves.
	RelayProcess Component = "relay"
	// RelayServer is the real FUSE server behind the relay: Kill stops it (SIGSTOP; gcsfuse's fake GCS server
	// instead) until a read is inside it, then sends SIGKILL; the plugin mounts a new backend and starts the server again, and Start waits until a
	// new one runs. Upgrade gives the server its next build (NextBuildFlag: the local backend replaces the
	// executable the plugin runs and kills the running server; the kube backend rolls the relay-keeper mode's
	// keeper with the flag in keeper.relayServerArgs) and waits until a server with the flag runs.
	RelayServer Component = "relay-server"
	// RelayServerGone is the real server when it cannot come back: Kill gives it a build that fails at once (the
	// local backend: an executable that exits; the kube backend: a keeper rollout with an argument the server
	// refuses) and ends the running one; Start puts the real one back and waits until it runs again.
	RelayServerGone Component = "relay-server-gone"
)

// componentText says how the steps, the timeline and the report describe a component.
type componentText struct {
	// noun names it ("plugin container").
	noun string
	// kill, start and upgrade describe the step's action in full; no upgrade: it cannot be upgraded.
	kill, start, upgrade string
	// ready says that it serves again.
	ready string
}

var components = map[Component]componentText{
	PluginContainer: {
		noun:  "plugin container",
		kill:  "kill the plugin container (SIGKILL; its FUSE servers die with it)",
		start: "start the plugin container again (same flags, same state dir)",
		ready: "plugin serves CSI",
	},
	SidecarContainer: {
		noun:  "sidecar container",
		kill:  "kill the pod's FUSE sidecar container (SIGKILL of the FUSE server serving the mount; the container exits with it)",
		start: "wait until kubelet has started the native sidecar again (it does so by itself)",
		ready: "sidecar received the FUSE descriptor",
	},
	KeeperContainer: {
		noun:    "keeper container",
		kill:    "kill the keeper container (SIGKILL; its FUSE servers die with it, the plugin keeps its copies of the connections)",
		start:   "start the keeper container again",
		upgrade: "roll the keeper to a new build: the new keeper starts beside the old one, takes every connection over, then the old one is stopped (SIGTERM)",
		ready:   "keeper connected to the plugin",
	},
	FuseServer: {
		noun:  "FUSE server",
		kill:  "kill the FUSE server of the volume (SIGKILL, as a crash would; the keeper and the plugin keep copies of its connection)",
		start: "wait until the keeper has started a new FUSE server that serves the volume",
		ready: "FUSE server serves the volume",
	},
	FuseSuccessor: {
		noun:  "FUSE server and its successor",
		kill:  "kill the FUSE server of the volume, then its successor the moment the keeper starts it (while it takes the connection over: INIT replayed, resend asked)",
		start: "wait until the keeper has started a new FUSE server that serves the volume",
		ready: "FUSE server serves the volume",
	},
	FuseCrashLoop: {
		noun:  "FUSE servers of the volume (crash loop)",
		kill:  "make the volume's FUSE servers crash-loop: kill the running one and every one the keeper starts for it, the moment the keeper names it",
		start: "end the crash loop and wait until a FUSE server serves the volume",
		ready: "FUSE server serves the volume",
	},
	PluginRecollecting: {
		noun:  "plugin container while it re-collects",
		kill:  "start the plugin container and kill it (SIGKILL) the moment the keeper has handed it back its copies of the connections (in or right after their adoption)",
		start: "start the plugin container again (same flags, same state dir)",
		ready: "plugin serves CSI",
	},
	DriverPod: {
		noun:  "driver's node plugin pod",
		kill:  "delete the driver's node plugin pod on the workload's node (grace period 0); its DaemonSet creates a new one",
		start: "wait until the DaemonSet's new node plugin pod is ready",
		ready: "driver's node plugin pod ready",
	},
	DriverDaemonSet: {
		noun:    "driver's node plugin DaemonSet",
		upgrade: "restart the rollout of the driver's node plugin DaemonSet (kubectl rollout restart) and wait until its new pod on the node is ready",
		ready:   "driver's node plugin pod ready",
	},
	DriverProcess: {
		noun:  "named process in the driver's node plugin pod",
		kill:  "kill the named process in the driver's node plugin pod (SIGKILL, as a crash would)",
		start: "wait until the driver's node plugin pod is ready again",
		ready: "driver's node plugin pod ready",
	},
	MountPod: {
		noun:  "driver's mount pod",
		kill:  "delete the driver's mount pod of the volume (grace period 0)",
		start: "wait until a mount pod of the same selector is ready on the node",
		ready: "mount pod ready",
	},
	RelayProcess: {
		noun:  "relay",
		kill:  "kill the relay serving the volume's staging path (SIGKILL; the plugin keeps a copy of the connection)",
		start: "wait until the plugin's successor relay has taken the connection over",
		ready: "a new relay serves the volume",
	},
	RelayServer: {
		noun:    "real FUSE server behind the relay",
		kill:    "stop the real FUSE server behind the relay (SIGSTOP; for gcsfuse its fake GCS server) until a read is inside it, then SIGKILL it",
		start:   "wait until the plugin has mounted a new backend and started the server again",
		upgrade: "give the server its next build (a new flag: a new executable, or the relay-keeper mode's keeper rolled with it), wait until the new one runs",
		ready:   "a new real FUSE server runs behind the relay",
	},
	RelayServerGone: {
		noun:  "real FUSE server behind the relay (cannot start)",
		kill:  "give the server a build that fails at once (an executable that exits, or the keeper rolled with an argument it refuses) and end the running one",
		start: "put the real server back and wait until it runs again",
		ready: "a new real FUSE server runs behind the relay",
	},
	WorkloadPod: {
		noun:  "workload pod",
		kill:  "delete the workload pod (kubelet stops its containers, then NodeUnpublishVolume, NodeUnstageVolume)",
		start: "create the workload pod again (a new pod UID: NodeStageVolume, NodePublishVolume, its containers)",
		ready: "pod's volume published and its containers started",
	},
}

// Known reports whether c is a component kind of the catalog.
func (c Component) Known() bool {
	_, ok := components[c]
	return ok
}

// Noun names the component ("plugin container").
func (c Component) Noun() string {
	if t, ok := components[c]; ok {
		return t.noun
	}
	return string(c)
}

// Says describes what verb v does to c, in full ("" when c has no words for it).
func (c Component) Says(v Verb) string {
	t := components[c]
	switch v {
	case Kill:
		return t.kill
	case Start:
		return t.start
	case Upgrade:
		return t.upgrade
	}
	return ""
}

// Ready says that c serves again ("plugin serves CSI").
func (c Component) Ready() string { return components[c].ready }
