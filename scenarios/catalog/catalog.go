package catalog

import (
	"fmt"
	"slices"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
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
// each other placement of them (sidecar.go, keeper.go, relay.go, relay_keeper.go), the rows that write
// (write.go), health.go.
func All() []scenarios.Scenario {
	return slices.Concat(childScenarios(), restartAllScenarios(), sidecarScenarios(), keeperScenarios(), relayScenarios(), relayKeeperScenarios(), writeScenarios(), healthScenarios(), setnsScenarios())
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
