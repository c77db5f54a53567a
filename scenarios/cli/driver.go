package cli

import (
	"flag"
	"slices"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/command"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/catalog"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/kube"
)

// driverFlags are the flags that only go with --driver.
var driverFlags = []string{"storage-class", "pv", "volume-attributes", "read-path", "placement", "plugin-selector", "fuse-process", "mount-pod-selector"}

// chartFlags configure this project's chart or its FUSE servers: nothing of a foreign driver.
var chartFlags = []string{"fuse-server", "kube-set", "sidecar-delay"}

// parseDriver checks --driver and its flags and sets cfg.kube.Driver when --driver is given.
func parseDriver(cfg *config, fl *flag.FlagSet) error {
	var set []string
	fl.Visit(func(f *flag.Flag) { set = append(set, f.Name) })
	if cfg.driver.Name == "" {
		for _, f := range driverFlags {
			if slices.Contains(set, f) {
				return command.Usagef("--%s goes with --driver", f)
			}
		}
		return nil
	}
	if cfg.backend != scenarios.BackendKube {
		return command.Usagef("--driver runs against a driver installed in a cluster: it needs --backend=kube")
	}
	for _, f := range chartFlags {
		if slices.Contains(set, f) && (f != "fuse-server" || cfg.fuseServer != fuseserver.DummyFuse) {
			return command.Usagef("--%s configures this project's chart, not a foreign driver: it does not go with --driver", f)
		}
	}
	attrs, err := kube.ParseAttributes(cfg.volumeAttributes)
	if err != nil {
		return command.Usagef("--volume-attributes: %v", err)
	}
	cfg.driver.VolumeAttributes = attrs
	if err := cfg.driver.Validate(); err != nil {
		return &command.UsageError{Err: err}
	}
	d := cfg.driver
	cfg.kube.Driver = &d
	return nil
}

// selectDrivers returns the driver-agnostic rows names asks for. "all" leaves out, saying why, the rows that
// need a flag that was not given; a row named explicitly without its flag is an error.
func selectDrivers(t kube.DriverTarget, names []string) (run []scenarios.Scenario, leftOut []string, err error) {
	for _, n := range names {
		sel, err := catalog.SelectDrivers([]string{n})
		if err != nil {
			if err := chartRowUnderDriver(n); err != nil {
				return nil, nil, err
			}
			return nil, nil, err
		}
		for _, s := range sel {
			s.Driver, s.DriverPlacement, s.DriverServer = t.Name, t.Placement, t.FuseProcess
			why := t.Runnable(s.Name)
			switch {
			case why == "":
				run = append(run, s)
			case n == "all":
				leftOut = append(leftOut, why)
			default:
				return nil, nil, command.Usagef("%s", why)
			}
		}
	}
	return run, leftOut, nil
}
