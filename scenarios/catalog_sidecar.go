package scenarios

import "time"

// SidecarDelay is how long sidecar-late holds its sidecar back.
const SidecarDelay = time.Second

// sidecarScenarios are the scenarios of the plugin's sidecar mode (the GCS FUSE CSI design): the pod's own
// unprivileged sidecar serves the /dev/fuse descriptor of its mount.
func sidecarScenarios() []Scenario {
	return []Scenario{
		{
			Name:  "sidecar-plugin-restart",
			Title: "Sidecar mode: the plugin restarts under a running workload",
			Shows: "In the sidecar mode (the GCS FUSE CSI design) no FUSE server runs in the plugin: the pod's own " +
				"unprivileged sidecar serves the mount's /dev/fuse descriptor. Killing and restarting the plugin " +
				"changes nothing for the workload: its descriptor, opened before the kill, keeps reading, and the " +
				"host volume dir never dies, so nothing is mounted again.",
			Plugin: Plugin{RestoreMounts: true, RestoreStrategy: StrategyRebind, FuseMode: FuseModeSidecar},
			Pod: Pod{RestartPolicy: RestartAlways, Sidecar: &Sidecar{}, Containers: []Container{
				{Name: reader, ExitOnError: true, KeepOpen: true},
			}},
			Steps: []Step{
				warmUp,
				KillPlugin(),
				Observe(watchReads),
				StartPlugin(),
				Observe(watchReads),
			},
			Expect: []Expectation{
				{Check: NeverFails{C: reader, After: AfterKill, Reads: 10}},
				{Check: NeverFails{C: reader, After: AfterPluginBack, Reads: 5}},
				{Check: VolumeDirAlive{}},
			},
		},
		{
			Name:  "sidecar-late",
			Title: "Sidecar mode: the sidecar is held back at pod start",
			Shows: "Until the sidecar takes the descriptor and answers the kernel's INIT, every access to the mount " +
				"blocks, stat included: the container runtime's stat of the volume dir before the workload's " +
				"container starts waits for the sidecar, then the workload reads without ever seeing an error.",
			Plugin: Plugin{FuseMode: FuseModeSidecar},
			Pod: Pod{RestartPolicy: RestartAlways, Sidecar: &Sidecar{Delay: SidecarDelay}, Containers: []Container{
				{Name: reader, ExitOnError: true, KeepOpen: false},
			}},
			Steps: []Step{
				warmUp,
				Observe(Dur{Reads: 3}),
			},
			Expect: []Expectation{
				{Check: BlocksUntilServed{C: reader, Delay: SidecarDelay}},
				{Check: NeverFails{C: reader, After: FromStart, Reads: 3}},
				{Check: VolumeDirAlive{}},
			},
		},
		{
			Name:  "sidecar-killed",
			Title: "Sidecar mode: the sidecar container is killed and restarted",
			Shows: "The sidecar holds the only descriptor of the mount (the plugin closed its copy once sent): when " +
				"it dies, the mount dies (ENOTCONN). Kubelet restarts the native sidecar, but it finds no socket and " +
				"nothing to serve; the mount stays dead for the running container, which only a new pod would fix.",
			Plugin: Plugin{FuseMode: FuseModeSidecar},
			Pod: Pod{RestartPolicy: RestartAlways, Sidecar: &Sidecar{}, Containers: []Container{
				{Name: reader, KeepOpen: false},
			}},
			Steps: []Step{
				warmUp,
				Kill(SidecarContainer),
				WaitFor(FailsWith{C: reader, Errno: "ENOTCONN"}, Dur{Fixed: 10 * time.Second}),
				hostDead,
				Start(SidecarContainer),
				Observe(watchReads),
			},
			Expect: []Expectation{
				{Check: FailsWith{C: reader, Errno: "ENOTCONN", Within: Dur{Fixed: 5 * time.Second, Reads: 2}}},
				{Check: KeepsFailing{C: reader, Errno: "ENOTCONN", After: AfterRestart}},
				{Check: NeverRecovers{C: reader, After: AfterRestart, For: watchReads}},
				{Check: SidecarNeverServes{After: AfterRestart, For: watchReads}},
				{Check: Restarts{C: reader, Min: 0, Max: 0}},
				{Check: VolumeDir{Errno: "ENOTCONN", After: AfterRestart}},
			},
		},
		{
			Name:  "sidecar-new-pod",
			Title: "Sidecar mode: the sidecar is killed; only a new pod brings the volume back",
			Shows: "What fixes sidecar-killed: deleting the pod (kubelet unpublishes and unstages its volume) and " +
				"creating it again (a new pod UID, a new NodePublishVolume, a new descriptor for its new sidecar). " +
				"The new pod's container reads again; the sidecar's restart before that did not help.",
			Plugin: Plugin{FuseMode: FuseModeSidecar},
			Pod: Pod{RestartPolicy: RestartAlways, Sidecar: &Sidecar{}, Containers: []Container{
				{Name: reader, KeepOpen: false},
			}},
			Steps: []Step{
				warmUp,
				Kill(SidecarContainer),
				WaitFor(FailsWith{C: reader, Errno: "ENOTCONN"}, Dur{Fixed: 10 * time.Second}),
				Start(SidecarContainer),
				Observe(Dur{Reads: 5}),
				Kill(WorkloadPod),
				Start(WorkloadPod),
				WaitFor(Recovers{C: reader}, Dur{Fixed: 10 * time.Second, Reads: 5}),
				Observe(Dur{Reads: 3}),
			},
			Expect: []Expectation{
				{Check: FailsWith{C: reader, Errno: "ENOTCONN", Within: Dur{Fixed: 5 * time.Second, Reads: 2}}},
				{Check: NoGoodReadUntil{C: reader, Component: WorkloadPod}},
				{Check: Recovers{C: reader, Instance: NewInstance}},
			},
		},
	}
}
