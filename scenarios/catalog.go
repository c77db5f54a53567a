package scenarios

import (
	"fmt"
	"time"
)

// Container names used by the catalog.
const (
	reader = "reader"
	reopen = "reopen"
	holder = "holder"
)

// The start failure kubelet reports while the volume dir is a dead FUSE mount: containerd's stat of the bind
// source, surfaced by kubelet as `Error: failed to generate container "<id>" spec: failed to generate spec:
// failed to stat "<volume dir>": stat <volume dir>: transport endpoint is not connected`.
const failedToStatVolume = `failed to stat "{volume}"`

// The start failure kubelet reports when it cannot prepare a subPath bind mount (makeMounts in
// pkg/kubelet/kubelet_pods.go; the cause is only in kubelet's log).
const failedToPrepareSubPath = `failed to prepare subPath for volumeMount`

// SubPathSource says where the subpath scenario's outcome comes from: derived from kubelet's code first, then
// measured on a real kubelet by the Kubernetes backend (scenarios/kube, make test-kube).
const SubPathSource = "derived from kubelet v1.33 code, confirmed on kubelet v1.33.13 with containerd 1.6"

// Catalog returns every scenario, in a stable order (restart first).
func Catalog() []Scenario {
	warmUp := WaitFor(GoodReads{N: 3}, Dur{Fixed: 30 * time.Second})
	// Long enough to see a few restart attempts fail after the plugin is back: attempts come after 1, 2, 4
	// back-offs, so 6 back-offs see at least two.
	watchStarts := Dur{Fixed: time.Second, Backoffs: 6}
	watchReads := Dur{Fixed: time.Second, Reads: 10}
	// Before the plugin comes back, stat of the volume dir must have failed: right after the kill it may
	// still succeed from the attribute cache (1 s), and "restored" means nothing without "dead" first.
	hostDead := WaitFor(VolumeDir{Errno: "ENOTCONN", After: AfterKill}, Dur{Fixed: 10 * time.Second})

	return []Scenario{
		{
			Name:  "restart",
			Title: "Plugin restart with restoreMounts and a workload that exits on error (the original demo)",
			Shows: "Killing the plugin container kills its FUSE servers: the workload gets ENOTCONN and exits; " +
				"while the host mount is dead kubelet cannot even start the container again (failed to stat the " +
				"volume dir); once the restarted plugin has restored its mounts the next restart reads again.",
			Plugin: Plugin{RestoreMounts: true, RestoreStrategy: StrategyRebind},
			Pod: Pod{RestartPolicy: RestartAlways, Containers: []Container{
				{Name: reader, ExitOnError: true, KeepOpen: true},
			}},
			Steps: []Step{
				warmUp,
				KillPlugin(),
				WaitFor(StartFails{C: reader, Contains: failedToStatVolume}, Dur{Fixed: 10 * time.Second, Backoffs: 4}),
				hostDead,
				StartPlugin(),
				WaitFor(Recovers{C: reader}, Dur{Fixed: 10 * time.Second, Backoffs: 12}),
				Observe(Dur{Reads: 3}),
			},
			Expect: []Expectation{
				{Check: FailsWith{C: reader, Errno: "ENOTCONN", Within: Dur{Fixed: 5 * time.Second, Reads: 2}}},
				{Check: Exits{C: reader, Code: 1}},
				{Check: StartFails{C: reader, Contains: failedToStatVolume, Errno: "ENOTCONN"}},
				{Check: VolumeDir{After: AfterPluginBack}},
				{Check: Recovers{C: reader, Instance: NewInstance}},
			},
		},
		{
			Name:  "restart-no-restore",
			Title: "Plugin restart without restoreMounts, workload keeps running",
			Shows: "Without restoreMounts nothing remounts the volume: the workload reads ENOTCONN from the first " +
				"read after the kill, forever, also after the plugin is back.",
			Plugin: Plugin{},
			Pod: Pod{RestartPolicy: RestartAlways, Containers: []Container{
				{Name: reader, KeepOpen: true},
			}},
			Steps: []Step{
				warmUp,
				KillPlugin(),
				WaitFor(FailsWith{C: reader, Errno: "ENOTCONN"}, Dur{Fixed: 10 * time.Second}),
				hostDead,
				StartPlugin(),
				Observe(watchReads),
			},
			Expect: []Expectation{
				{Check: FailsWith{C: reader, Errno: "ENOTCONN", Within: Dur{Fixed: 5 * time.Second, Reads: 2}}},
				{Check: KeepsFailing{C: reader, Errno: "ENOTCONN", After: AfterPluginBack}},
				{Check: NeverRecovers{C: reader, After: AfterPluginBack, For: watchReads}},
				{Check: Restarts{C: reader, Min: 0, Max: 0}},
				{Check: VolumeDir{Errno: "ENOTCONN", After: AfterPluginBack}},
			},
		},
		{
			Name:  "restore-without-exit",
			Title: "Plugin restores its mounts, the running workload does not exit",
			Shows: "restoreMounts repairs the host: the volume dir is a live mount again. The running container " +
				"does not benefit: its private mount namespace still holds the dead bind, so even fresh opens " +
				"(keep-open=false) fail with ENOTCONN forever. It works only halfway.",
			Plugin: Plugin{RestoreMounts: true, RestoreStrategy: StrategyRebind},
			Pod: Pod{RestartPolicy: RestartAlways, Containers: []Container{
				{Name: reader, KeepOpen: false},
			}},
			Steps: []Step{
				warmUp,
				KillPlugin(),
				WaitFor(FailsWith{C: reader, Errno: "ENOTCONN"}, Dur{Fixed: 10 * time.Second}),
				hostDead,
				StartPlugin(),
				WaitFor(VolumeDir{After: AfterPluginBack}, Dur{Fixed: 10 * time.Second}),
				Observe(watchReads),
			},
			Expect: []Expectation{
				{Check: FailsWith{C: reader, Errno: "ENOTCONN", Within: Dur{Fixed: 5 * time.Second, Reads: 2}}},
				{Check: VolumeDir{After: AfterPluginBack}},
				{Check: KeepsFailing{C: reader, Errno: "ENOTCONN", After: AfterVolumeRestored}},
				{Check: NeverRecovers{C: reader, After: AfterVolumeRestored, For: watchReads}},
				{Check: Restarts{C: reader, Min: 0, Max: 0}},
			},
		},
		{
			Name:  "exit-without-restore",
			Title: "Workload exits on error, plugin restarts without restoreMounts",
			Shows: "Exiting is not enough: with nothing restoring the mount, every restart of the container " +
				"fails in kubelet's pre-start stat of the dead volume dir, before and after the plugin is back.",
			Plugin: Plugin{},
			Pod: Pod{RestartPolicy: RestartAlways, Containers: []Container{
				{Name: reader, ExitOnError: true, KeepOpen: true},
			}},
			Steps: []Step{
				warmUp,
				KillPlugin(),
				WaitFor(StartFails{C: reader, Contains: failedToStatVolume}, Dur{Fixed: 10 * time.Second, Backoffs: 4}),
				hostDead,
				StartPlugin(),
				Observe(watchStarts),
			},
			Expect: []Expectation{
				{Check: FailsWith{C: reader, Errno: "ENOTCONN", Within: Dur{Fixed: 5 * time.Second, Reads: 2}}},
				{Check: Exits{C: reader, Code: 1}},
				{Check: StartFails{C: reader, After: AfterPluginBack, Contains: failedToStatVolume, Errno: "ENOTCONN", Min: 2}},
				{Check: Restarts{C: reader, Min: 0, Max: 0}},
				{Check: NeverRecovers{C: reader, After: AfterPluginBack, For: watchStarts}},
				{Check: VolumeDir{Errno: "ENOTCONN", After: AfterPluginBack}},
			},
		},
		{
			Name:  "host-to-container",
			Title: "Stacking restore with HostToContainer propagation",
			Shows: "With --restore-strategy=stack the plugin mounts the restored volume on top of the dead one; " +
				"HostToContainer propagation carries that mount into the running container, so new opens " +
				"recover without a restart, while an fd held open across the crash stays ENOTCONN.",
			Plugin: Plugin{RestoreMounts: true, RestoreStrategy: StrategyStack},
			Pod: Pod{RestartPolicy: RestartAlways, Containers: []Container{
				{Name: reopen, KeepOpen: false, Propagation: PropagationHostToContainer},
				{Name: holder, KeepOpen: true, Propagation: PropagationHostToContainer},
			}},
			Steps: []Step{
				warmUp,
				KillPlugin(),
				WaitFor(FailsWith{C: reopen, Errno: "ENOTCONN"}, Dur{Fixed: 10 * time.Second}),
				WaitFor(FailsWith{C: holder, Errno: "ENOTCONN"}, Dur{Fixed: 10 * time.Second}),
				hostDead,
				StartPlugin(),
				WaitFor(Recovers{C: reopen}, Dur{Fixed: 10 * time.Second, Reads: 5}),
				WaitFor(VolumeDir{After: AfterPluginBack}, Dur{Fixed: 10 * time.Second}),
				Observe(watchReads),
			},
			Expect: []Expectation{
				{Check: FailsWith{C: reopen, Errno: "ENOTCONN", Within: Dur{Fixed: 5 * time.Second, Reads: 2}}},
				{Check: Recovers{C: reopen, Instance: SameInstance}},
				{Check: Restarts{C: reopen, Min: 0, Max: 0}},
				{Check: FailsWith{C: holder, Errno: "ENOTCONN", Within: Dur{Fixed: 5 * time.Second, Reads: 2}}},
				{Check: KeepsFailing{C: holder, Errno: "ENOTCONN", After: AfterVolumeRestored}},
				{Check: NeverRecovers{C: holder, After: AfterVolumeRestored, For: watchReads}},
				{Check: VolumeDir{After: AfterPluginBack}},
			},
		},
		{
			Name:  "subpath",
			Title: "Workload mounts a subPath of the volume, plugin restores, workload exits on error",
			Shows: "kubelet bind-mounts a subPath once, under pods/<uid>/volume-subpaths/, from the FUSE mount of " +
				"that moment, and reuses that bind on every container restart. After the crash the bind is dead: " +
				"kubelet's check of it (mount-utils IsNotMountPoint → lstat) fails with ENOTCONN, so every restart " +
				"fails with \"failed to prepare subPath\" even after the plugin restored the volume dir. Only " +
				"deleting the pod (which cleans volume-subpaths) helps.",
			Plugin: Plugin{RestoreMounts: true, RestoreStrategy: StrategyRebind},
			Pod: Pod{RestartPolicy: RestartAlways, Containers: []Container{
				{Name: reader, ExitOnError: true, KeepOpen: true, SubPath: FileName, MountPath: "/mnt/" + FileName},
			}},
			Steps: []Step{
				warmUp,
				KillPlugin(),
				WaitFor(StartFails{C: reader, Contains: failedToPrepareSubPath}, Dur{Fixed: 10 * time.Second, Backoffs: 4}),
				hostDead,
				StartPlugin(),
				WaitFor(VolumeDir{After: AfterPluginBack}, Dur{Fixed: 10 * time.Second}),
				Observe(watchStarts),
			},
			Expect: []Expectation{
				{Check: FailsWith{C: reader, Errno: "ENOTCONN", Within: Dur{Fixed: 5 * time.Second, Reads: 2}}},
				{Check: Exits{C: reader, Code: 1}},
				{Check: VolumeDir{After: AfterPluginBack}},
				{Check: StartFails{C: reader, After: AfterVolumeRestored, Contains: failedToPrepareSubPath,
					Errno: "ENOTCONN", Detail: "volume-subpaths", Min: 2}, Source: SubPathSource},
				{Check: Restarts{C: reader, Min: 0, Max: 0}, Source: SubPathSource},
				{Check: NeverRecovers{C: reader, After: AfterVolumeRestored, For: watchStarts}, Source: SubPathSource},
			},
			Note: "The outcome after the restore is " + SubPathSource + ": kubelet's makeMounts → " +
				"PrepareSafeSubpath → doBindSubPath → prepareSubpathTarget calls mount.IsNotMountPoint on the old " +
				"bind target; on a dead FUSE bind that returns ENOTCONN, which is not IsNotExist, so the start fails " +
				"and the stale bind is only removed by CleanSubPaths when the volume is unmounted for the pod.",
		},
	}
}

// Lookup returns the scenario called name.
func Lookup(name string) (Scenario, error) {
	for _, s := range Catalog() {
		if s.Name == name {
			return s, nil
		}
	}
	return Scenario{}, fmt.Errorf("no scenario %q (have: %v)", name, Names())
}

// Select returns the scenarios named, in the order given; no names, or the name "all", stand for the whole
// catalog. dfc-scenario's arguments and the e2e tests' DFC_SCENARIOS are such lists.
func Select(names []string) ([]Scenario, error) {
	if len(names) == 0 {
		return Catalog(), nil
	}
	var out []Scenario
	for _, n := range names {
		if n == "all" {
			out = append(out, Catalog()...)
			continue
		}
		s, err := Lookup(n)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// Names lists the catalog's scenario names in catalog order.
func Names() []string {
	var out []string
	for _, s := range Catalog() {
		out = append(out, s.Name)
	}
	return out
}
