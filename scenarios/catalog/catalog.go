package catalog

import (
	"fmt"
	"slices"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
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

// Where the subpath scenario's version-dependent outcomes come from.
const (
	SubPathSourceBefore = "prepareSubpathTarget fails on the dead bind (pkg/volume/util/subpath/subpath_linux.go, read in " +
		"v1.36.3); measured on kubelet v1.33.13 and v1.36.3"
	SubPathSourceSince = "prepareSubpathTarget unmounts the corrupted bind and binds again (kubernetes PRs #138856 and " +
		"#139275, read in v1.37.2); measured on kubelet v1.37.2"
)

// All returns every scenario, in a stable order: the FUSE servers in the plugin (restart first), then
// each other placement of them (sidecar.go, keeper.go, health.go).
func All() []scenarios.Scenario {
	return slices.Concat(childScenarios(), restartAllScenarios(), sidecarScenarios(), keeperScenarios(), relayScenarios(), relayKeeperScenarios(), healthScenarios(), setnsScenarios())
}

// The waits that many scenarios share.
var (
	warmUp = scenarios.WaitFor(scenarios.GoodReads{N: 3}, scenarios.Dur{Fixed: 30 * time.Second})
	// Long enough to see a few restart attempts fail after the plugin is back: attempts come after 1, 2, 4
	// back-offs, so 6 back-offs see at least two.
	watchStarts = scenarios.Dur{Fixed: time.Second, Backoffs: 6}
	watchReads  = scenarios.Dur{Fixed: time.Second, Reads: 10}
	// Before the plugin comes back, stat of the volume dir must have failed: right after the kill it may
	// still succeed from the attribute cache (1 s), and "restored" means nothing without "dead" first.
	hostDead = scenarios.WaitFor(scenarios.VolumeDir{Errno: "ENOTCONN", After: scenarios.AfterKill}, scenarios.Dur{Fixed: 10 * time.Second})
	// untilENOTCONN waits for the reader's first ENOTCONN after a kill.
	untilENOTCONN = scenarios.WaitFor(scenarios.FailsWith{C: reader, Errno: "ENOTCONN"}, scenarios.Dur{Fixed: 10 * time.Second})
	// untilStatFails waits for a start of the reader to fail on the dead volume dir, and untilSubPathFails on its
	// dead subPath bind.
	untilStatFails    = scenarios.WaitFor(scenarios.StartFails{C: reader, Contains: failedToStatVolume}, scenarios.Dur{Fixed: 10 * time.Second, Backoffs: 4})
	untilSubPathFails = scenarios.WaitFor(scenarios.StartFails{C: reader, Contains: failedToPrepareSubPath}, scenarios.Dur{Fixed: 10 * time.Second, Backoffs: 4})
	// untilRestored waits until the plugin has restored the host's volume dir.
	untilRestored = scenarios.WaitFor(scenarios.VolumeDir{After: scenarios.AfterPluginBack}, scenarios.Dur{Fixed: 10 * time.Second})
)

// deadThenBack are the steps of a plugin restart that the volume does not survive: warm-up reads, the kill, a
// wait until the workload notices (noticed), until the host volume dir is dead, the plugin's start, then more.
func deadThenBack(noticed scenarios.Step, more ...scenarios.Step) []scenarios.Step {
	return append([]scenarios.Step{warmUp, scenarios.KillPlugin(), noticed, hostDead, scenarios.StartPlugin()}, more...)
}

// childMode is the plugin's default FUSE placement: each FUSE server is a child of the plugin and dies with it,
// which is the mount loss the testbed is about. Its rows hold for every server.
var childMode = mode{base: scenarios.Scenario{Servers: scenarios.AllServers}}

// restart is the original demo, and the baseline of every server on a real kubelet.
var restart = everyServer(restartHeals(childMode.lone(true).row("restart",
	"Plugin restart with restoreMounts and a workload that exits on error (the original demo)",
	"Killing the plugin container kills its FUSE servers: the workload gets ENOTCONN and exits; "+
		"while the host mount is dead kubelet cannot even start the container again (failed to stat the "+
		"volume dir); once the restarted plugin has restored its mounts the next restart reads again.")),
	"the baseline: how a real server's death with the plugin reaches a workload on a real kubelet")

// childScenarios are the scenarios of the plugin's default FUSE placement: each FUSE server is a child of the
// plugin and dies with it, which is the mount loss the testbed is about.
func childScenarios() []scenarios.Scenario {
	return []scenarios.Scenario{
		restart,
		{
			Name:        "server-kill-in-flight",
			Servers:     scenarios.AllServers,
			EveryServer: "what a read inside the server gets at its death is the server's and the kernel's doing, not the plugin's",
			Title:       "The FUSE server dies while a read is inside it (child placement)",
			Shows: "The plugin's FUSE server is stopped, the workload's next read (O_DIRECT, so it reaches the server) " +
				"waits inside it, then the server is killed: that read fails with ECONNABORTED (the kernel aborts " +
				"what the connection still owed), every access after it with ENOTCONN. The same for every server.",
			Plugin: scenarios.Plugin{},
			Pod: scenarios.Pod{RestartPolicy: scenarios.RestartAlways, Containers: []scenarios.Container{
				{Name: reader, KeepOpen: true, DirectIO: true},
			}},
			Steps: []scenarios.Step{warmUp, scenarios.Kill(topology.FuseServer), untilENOTCONN, scenarios.Observe(scenarios.Dur{Reads: 3})},
			Expect: []scenarios.Expectation{
				{Check: scenarios.FailsWith{C: reader, Errno: "ECONNABORTED", Within: scenarios.Dur{Fixed: 5 * time.Second, Reads: 2}}},
				{Check: scenarios.FailsWith{C: reader, Errno: "ENOTCONN", Within: scenarios.Dur{Fixed: 5 * time.Second, Reads: 4}}},
				{Check: scenarios.KeepsFailing{C: reader, Errno: "ENOTCONN", After: scenarios.AfterKill}},
				{Check: scenarios.Restarts{C: reader, Min: 0, Max: 0}},
			},
		},
		holdersDie(childMode.lone(false).row("restart-no-restore", "Plugin restart without restoreMounts, workload keeps running",
			"Without restoreMounts nothing remounts the volume: the workload reads ENOTCONN from the first "+
				"read after the kill, forever, also after the plugin is back.")),
		{
			Name:    "restore-without-exit",
			Servers: scenarios.AllServers,
			Title:   "Plugin restores its mounts, the running workload does not exit",
			Shows: "restoreMounts repairs the host: the volume dir is a live mount again. The running container " +
				"does not benefit: its private mount namespace still holds the dead bind, so even fresh opens " +
				"(keep-open=false) fail with ENOTCONN forever. It works only halfway.",
			Plugin: scenarios.Plugin{RestoreMounts: true, RestoreStrategy: scenarios.StrategyRebind},
			Pod: scenarios.Pod{RestartPolicy: scenarios.RestartAlways, Containers: []scenarios.Container{
				{Name: reader, KeepOpen: false},
			}},
			Steps: deadThenBack(
				untilENOTCONN,
				scenarios.WaitFor(scenarios.VolumeDir{After: scenarios.AfterPluginBack}, scenarios.Dur{Fixed: 10 * time.Second}),
				scenarios.Observe(watchReads),
			),
			Expect: []scenarios.Expectation{
				{Check: scenarios.FailsWith{C: reader, Errno: "ENOTCONN", Within: scenarios.Dur{Fixed: 5 * time.Second, Reads: 2}}},
				{Check: scenarios.VolumeDir{After: scenarios.AfterPluginBack}},
				{Check: scenarios.KeepsFailing{C: reader, Errno: "ENOTCONN", After: scenarios.AfterVolumeRestored}},
				{Check: scenarios.NeverRecovers{C: reader, After: scenarios.AfterVolumeRestored, For: watchReads}},
				{Check: scenarios.Restarts{C: reader, Min: 0, Max: 0}},
			},
		},
		{
			Name:    "exit-without-restore",
			Servers: scenarios.AllServers,
			Title:   "Workload exits on error, plugin restarts without restoreMounts",
			Shows: "Exiting is not enough: with nothing restoring the mount, every restart of the container " +
				"fails in kubelet's pre-start stat of the dead volume dir, before and after the plugin is back.",
			Plugin: scenarios.Plugin{},
			Pod: scenarios.Pod{RestartPolicy: scenarios.RestartAlways, Containers: []scenarios.Container{
				{Name: reader, ExitOnError: true, KeepOpen: true},
			}},
			Steps: deadThenBack(
				scenarios.WaitFor(scenarios.StartFails{C: reader, Contains: failedToStatVolume}, scenarios.Dur{Fixed: 10 * time.Second, Backoffs: 4}),
				scenarios.Observe(watchStarts),
			),
			Expect: []scenarios.Expectation{
				{Check: scenarios.FailsWith{C: reader, Errno: "ENOTCONN", Within: scenarios.Dur{Fixed: 5 * time.Second, Reads: 2}}},
				{Check: scenarios.Exits{C: reader, Code: 1}},
				{Check: scenarios.StartFails{C: reader, After: scenarios.AfterPluginBack, Contains: failedToStatVolume, Errno: "ENOTCONN", Min: 2}},
				{Check: scenarios.Restarts{C: reader, Min: 0, Max: 0}},
				{Check: scenarios.NeverRecovers{C: reader, After: scenarios.AfterPluginBack, For: watchStarts}},
				{Check: scenarios.VolumeDir{Errno: "ENOTCONN", After: scenarios.AfterPluginBack}},
			},
		},
		{
			Name:    "host-to-container",
			Servers: scenarios.AllServers,
			Title:   "Stacking restore with HostToContainer propagation",
			Shows: "With --restore-strategy=stack the plugin mounts the restored volume on top of the dead one; " +
				"HostToContainer propagation carries that mount into the running container, so new opens " +
				"recover without a restart, while an fd held open across the crash stays ENOTCONN.",
			Plugin: scenarios.Plugin{RestoreMounts: true, RestoreStrategy: scenarios.StrategyStack},
			Pod: scenarios.Pod{RestartPolicy: scenarios.RestartAlways, Containers: []scenarios.Container{
				{Name: reopen, KeepOpen: false, Propagation: scenarios.PropagationHostToContainer},
				{Name: holder, KeepOpen: true, Propagation: scenarios.PropagationHostToContainer},
			}},
			Steps: []scenarios.Step{
				warmUp,
				scenarios.KillPlugin(),
				scenarios.WaitFor(scenarios.FailsWith{C: reopen, Errno: "ENOTCONN"}, scenarios.Dur{Fixed: 10 * time.Second}),
				scenarios.WaitFor(scenarios.FailsWith{C: holder, Errno: "ENOTCONN"}, scenarios.Dur{Fixed: 10 * time.Second}),
				hostDead,
				scenarios.StartPlugin(),
				scenarios.WaitFor(scenarios.Recovers{C: reopen}, scenarios.Dur{Fixed: 10 * time.Second, Reads: 5}),
				scenarios.WaitFor(scenarios.VolumeDir{After: scenarios.AfterPluginBack}, scenarios.Dur{Fixed: 10 * time.Second}),
				scenarios.Observe(watchReads),
			},
			Expect: []scenarios.Expectation{
				{Check: scenarios.FailsWith{C: reopen, Errno: "ENOTCONN", Within: scenarios.Dur{Fixed: 5 * time.Second, Reads: 2}}},
				{Check: scenarios.Recovers{C: reopen, Instance: scenarios.SameInstance}},
				{Check: scenarios.Restarts{C: reopen, Min: 0, Max: 0}},
				{Check: scenarios.FailsWith{C: holder, Errno: "ENOTCONN", Within: scenarios.Dur{Fixed: 5 * time.Second, Reads: 2}}},
				{Check: scenarios.KeepsFailing{C: holder, Errno: "ENOTCONN", After: scenarios.AfterVolumeRestored}},
				{Check: scenarios.NeverRecovers{C: holder, After: scenarios.AfterVolumeRestored, For: watchReads}},
				{Check: scenarios.VolumeDir{After: scenarios.AfterPluginBack}},
			},
		},
		{
			Name:    "subpath",
			Servers: scenarios.AllServers,
			Title:   "Workload mounts a subPath of the volume, plugin restores, workload exits on error",
			Shows: "kubelet bind-mounts a subPath once, under pods/<uid>/volume-subpaths/, from the FUSE mount of " +
				"that moment, and checks that bind before every container start. After the crash the bind is dead, and " +
				"while the volume dir is dead too every restart fails with \"failed to prepare subPath\". Once the " +
				"plugin has restored the volume dir, the kubelet version decides: up to v1.36 kubelet's check of the " +
				"old bind fails with ENOTCONN at every restart, forever (only deleting the pod helps); since v1.37 " +
				"kubelet unmounts the corrupted bind, binds the restored volume again, and the restarted container reads.",
			Plugin: scenarios.Plugin{RestoreMounts: true, RestoreStrategy: scenarios.StrategyRebind},
			Pod: scenarios.Pod{RestartPolicy: scenarios.RestartAlways, Containers: []scenarios.Container{
				{Name: reader, ExitOnError: true, KeepOpen: true, SubPath: scenarios.FileName, MountPath: "/mnt/" + scenarios.FileName},
			}},
			Steps: deadThenBack(
				scenarios.WaitFor(scenarios.StartFails{C: reader, Contains: failedToPrepareSubPath}, scenarios.Dur{Fixed: 10 * time.Second, Backoffs: 4}),
				scenarios.WaitFor(scenarios.VolumeDir{After: scenarios.AfterPluginBack}, scenarios.Dur{Fixed: 10 * time.Second}),
				scenarios.Observe(watchStarts),
			),
			Expect: []scenarios.Expectation{
				{Check: scenarios.FailsWith{C: reader, Errno: "ENOTCONN", Within: scenarios.Dur{Fixed: 5 * time.Second, Reads: 2}}},
				{Check: scenarios.Exits{C: reader, Code: 1}},
				{Check: scenarios.StartFails{C: reader, Contains: failedToPrepareSubPath}},
				{Check: scenarios.VolumeDir{After: scenarios.AfterPluginBack}},

				// No cause is asked for: kubelet keeps it out of the event ("Don't pass detailed error back to
				// the user", pkg/kubelet/kubelet_pods.go makeMounts), and kubelet v1.36.3 logs the failure with a nil
				// error too, so no evidence of the real kubelet names the ENOTCONN behind it.
				{Check: scenarios.StartFails{C: reader, After: scenarios.AfterVolumeRestored, Contains: failedToPrepareSubPath, Min: 2},
					Kubelet: scenarios.KubeletBefore(scenarios.SubPathFixedIn), Source: SubPathSourceBefore},
				{Check: scenarios.Restarts{C: reader, Min: 0, Max: 0}, Kubelet: scenarios.KubeletBefore(scenarios.SubPathFixedIn), Source: SubPathSourceBefore},
				{Check: scenarios.NeverRecovers{C: reader, After: scenarios.AfterVolumeRestored, For: watchStarts},
					Kubelet: scenarios.KubeletBefore(scenarios.SubPathFixedIn), Source: SubPathSourceBefore},

				{Check: scenarios.Recovers{C: reader, Instance: scenarios.NewInstance}, Kubelet: scenarios.KubeletSince(scenarios.SubPathFixedIn), Source: SubPathSourceSince},
				{Check: scenarios.Restarts{C: reader, Min: 1, Max: 1}, Kubelet: scenarios.KubeletSince(scenarios.SubPathFixedIn), Source: SubPathSourceSince},
			},
			Note: "What happens after the restore depends on the kubelet version. Before every start kubelet's makeMounts → " +
				"PrepareSafeSubpath → doBindSubPath → prepareSubpathTarget checks the old bind under volume-subpaths/. " +
				"Up to v1.36 it calls mount.IsNotMountPoint, which on a dead FUSE bind returns ENOTCONN; that is not " +
				"IsNotExist, so the start fails, and the stale bind is only removed by CleanSubPaths when the pod's " +
				"volume is unmounted. Since " + scenarios.SubPathFixedIn + " (kubernetes PRs #138856 and #139275) it calls " +
				"mounter.IsMountPoint and, when the error is a corrupted mount (IsCorruptedMnt, which includes ENOTCONN), " +
				"unmounts the bind and binds the subPath again from the restored volume; a live bind whose inode differs " +
				"from the source is lazily unmounted and bound again.",
		},
	}
}

// Lookup returns the scenario called name.
func Lookup(name string) (scenarios.Scenario, error) {
	for _, s := range All() {
		if s.Name == name {
			return s, nil
		}
	}
	return scenarios.Scenario{}, fmt.Errorf("no scenario %q (have: %v)", name, Names())
}

// Select returns the scenarios named, in the order given; no names, or the name "all", stand for the whole
// catalog. dfc-scenario's arguments and the e2e tests' DFC_SCENARIOS are such lists.
func Select(names []string) ([]scenarios.Scenario, error) {
	if len(names) == 0 {
		return All(), nil
	}
	var out []scenarios.Scenario
	for _, n := range names {
		if n == "all" {
			out = append(out, All()...)
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
	for _, s := range All() {
		out = append(out, s.Name)
	}
	return out
}
