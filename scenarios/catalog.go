package scenarios

import (
	"fmt"
	"slices"
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

// SubPathFixedIn is the first kubelet release whose subPath preparation recovers from a dead FUSE bind:
// prepareSubpathTarget in pkg/volume/util/subpath/subpath_linux.go unmounts a corrupted bind (mount-utils
// IsCorruptedMnt: ENOTCONN, ESTALE, EIO, …) and binds the subPath again (kubernetes PR #138856), and lazily
// unmounts a bind whose inode differs from the source (PR #139275); both merged in May 2026 and first released
// in v1.37 (v1.36.3 does not have them).
const SubPathFixedIn = "v1.37"

// Where the subpath scenario's version-dependent outcomes come from.
const (
	SubPathSourceBefore = "prepareSubpathTarget fails on the dead bind (pkg/volume/util/subpath/subpath_linux.go, read in " +
		"v1.36.3); measured on kubelet v1.33.13 and v1.36.3"
	SubPathSourceSince = "prepareSubpathTarget unmounts the corrupted bind and binds again (kubernetes PRs #138856 and " +
		"#139275, read in v1.37.2); measured on kubelet v1.37.2"
)

// Catalog returns every scenario, in a stable order: the FUSE servers in the plugin (restart first), then
// each other placement of them (catalog_*.go).
func Catalog() []Scenario {
	return slices.Concat(childScenarios(), sidecarScenarios(), keeperScenarios(), healthScenarios())
}

// The waits that many scenarios share.
var (
	warmUp = WaitFor(GoodReads{N: 3}, Dur{Fixed: 30 * time.Second})
	// Long enough to see a few restart attempts fail after the plugin is back: attempts come after 1, 2, 4
	// back-offs, so 6 back-offs see at least two.
	watchStarts = Dur{Fixed: time.Second, Backoffs: 6}
	watchReads  = Dur{Fixed: time.Second, Reads: 10}
	// Before the plugin comes back, stat of the volume dir must have failed: right after the kill it may
	// still succeed from the attribute cache (1 s), and "restored" means nothing without "dead" first.
	hostDead = WaitFor(VolumeDir{Errno: "ENOTCONN", After: AfterKill}, Dur{Fixed: 10 * time.Second})
	// untilENOTCONN waits for the reader's first ENOTCONN after a kill.
	untilENOTCONN = WaitFor(FailsWith{C: reader, Errno: "ENOTCONN"}, Dur{Fixed: 10 * time.Second})
)

// childScenarios are the scenarios of the plugin's default FUSE placement: each FUSE server is a child of the
// deadThenBack are the steps of a plugin restart that the volume does not survive: warm-up reads, the kill, a
// wait until the workload notices (noticed), until the host volume dir is dead, the plugin's start, then more.
func deadThenBack(noticed Step, more ...Step) []Step {
	return append([]Step{warmUp, KillPlugin(), noticed, hostDead, StartPlugin()}, more...)
}

// plugin and dies with it, which is the mount loss the testbed is about.
func childScenarios() []Scenario {
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
			Steps: deadThenBack(
				WaitFor(StartFails{C: reader, Contains: failedToStatVolume}, Dur{Fixed: 10 * time.Second, Backoffs: 4}),
				WaitFor(Recovers{C: reader}, Dur{Fixed: 10 * time.Second, Backoffs: 12}),
				Observe(Dur{Reads: 3}),
			),
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
			Steps: deadThenBack(untilENOTCONN, Observe(watchReads)),
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
			Steps: deadThenBack(
				untilENOTCONN,
				WaitFor(VolumeDir{After: AfterPluginBack}, Dur{Fixed: 10 * time.Second}),
				Observe(watchReads),
			),
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
			Steps: deadThenBack(
				WaitFor(StartFails{C: reader, Contains: failedToStatVolume}, Dur{Fixed: 10 * time.Second, Backoffs: 4}),
				Observe(watchStarts),
			),
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
				"that moment, and checks that bind before every container start. After the crash the bind is dead, and " +
				"while the volume dir is dead too every restart fails with \"failed to prepare subPath\". Once the " +
				"plugin has restored the volume dir, the kubelet version decides: up to v1.36 kubelet's check of the " +
				"old bind fails with ENOTCONN at every restart, forever (only deleting the pod helps); since v1.37 " +
				"kubelet unmounts the corrupted bind, binds the restored volume again, and the restarted container reads.",
			Plugin: Plugin{RestoreMounts: true, RestoreStrategy: StrategyRebind},
			Pod: Pod{RestartPolicy: RestartAlways, Containers: []Container{
				{Name: reader, ExitOnError: true, KeepOpen: true, SubPath: FileName, MountPath: "/mnt/" + FileName},
			}},
			Steps: deadThenBack(
				WaitFor(StartFails{C: reader, Contains: failedToPrepareSubPath}, Dur{Fixed: 10 * time.Second, Backoffs: 4}),
				WaitFor(VolumeDir{After: AfterPluginBack}, Dur{Fixed: 10 * time.Second}),
				Observe(watchStarts),
			),
			Expect: []Expectation{
				{Check: FailsWith{C: reader, Errno: "ENOTCONN", Within: Dur{Fixed: 5 * time.Second, Reads: 2}}},
				{Check: Exits{C: reader, Code: 1}},
				{Check: StartFails{C: reader, Contains: failedToPrepareSubPath}},
				{Check: VolumeDir{After: AfterPluginBack}},

				// No cause is asked for: kubelet keeps it out of the event ("Don't pass detailed error back to
				// the user", pkg/kubelet/kubelet_pods.go makeMounts), and kubelet v1.36.3 logs the failure with a nil
				// error too, so no evidence of the real kubelet names the ENOTCONN behind it.
				{Check: StartFails{C: reader, After: AfterVolumeRestored, Contains: failedToPrepareSubPath, Min: 2},
					Kubelet: KubeletBefore(SubPathFixedIn), Source: SubPathSourceBefore},
				{Check: Restarts{C: reader, Min: 0, Max: 0}, Kubelet: KubeletBefore(SubPathFixedIn), Source: SubPathSourceBefore},
				{Check: NeverRecovers{C: reader, After: AfterVolumeRestored, For: watchStarts},
					Kubelet: KubeletBefore(SubPathFixedIn), Source: SubPathSourceBefore},

				{Check: Recovers{C: reader, Instance: NewInstance}, Kubelet: KubeletSince(SubPathFixedIn), Source: SubPathSourceSince},
				{Check: Restarts{C: reader, Min: 1, Max: 1}, Kubelet: KubeletSince(SubPathFixedIn), Source: SubPathSourceSince},
			},
			Note: "What happens after the restore depends on the kubelet version. Before every start kubelet's makeMounts → " +
				"PrepareSafeSubpath → doBindSubPath → prepareSubpathTarget checks the old bind under volume-subpaths/. " +
				"Up to v1.36 it calls mount.IsNotMountPoint, which on a dead FUSE bind returns ENOTCONN; that is not " +
				"IsNotExist, so the start fails, and the stale bind is only removed by CleanSubPaths when the pod's " +
				"volume is unmounted. Since " + SubPathFixedIn + " (kubernetes PRs #138856 and #139275) it calls " +
				"mounter.IsMountPoint and, when the error is a corrupted mount (IsCorruptedMnt, which includes ENOTCONN), " +
				"unmounts the bind and binds the subPath again from the restored volume; a live bind whose inode differs " +
				"from the source is lazily unmounted and bound again.",
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
