package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/catalog"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/kube"
)

// The driver-agnostic rows against a CSI driver the caller installed (e.g. this chart as a black box, see
// scenarios/README.md "Bring your own driver"): DFC_DRIVER names it, and the volume comes from DFC_DRIVER_PV
// (a static PV file) or DFC_DRIVER_STORAGE_CLASS; DFC_DRIVER_READ_PATH is the file to read; DFC_SCENARIOS, when
// set, names the rows to run (all that the flags allow when empty).
const (
	driverEnv       = "DFC_DRIVER"
	driverPVEnv     = "DFC_DRIVER_PV"
	driverClassEnv  = "DFC_DRIVER_STORAGE_CLASS"
	driverReadEnv   = "DFC_DRIVER_READ_PATH"
	driverFuseEnv   = "DFC_DRIVER_FUSE_PROCESS"
	driverMountPods = "DFC_DRIVER_MOUNT_POD_SELECTOR"
	driverPlacement = "DFC_DRIVER_PLACEMENT"
)

func TestDriver(t *testing.T) {
	if os.Getenv(optInEnv) != "1" {
		t.Skip(optInEnv + "=1 not set: the driver-agnostic rows run against a cluster only on request")
	}
	if os.Getenv(driverEnv) == "" {
		// Not a failure in CI either: which foreign driver to measure is the caller's choice.
		t.Skip(driverEnv + " not set: no foreign CSI driver to measure")
	}
	d := kube.DriverTarget{Name: os.Getenv(driverEnv), PVFile: os.Getenv(driverPVEnv), StorageClass: os.Getenv(driverClassEnv),
		ReadPath: os.Getenv(driverReadEnv), FuseProcess: os.Getenv(driverFuseEnv), MountPodSelector: os.Getenv(driverMountPods),
		Placement: os.Getenv(driverPlacement)}
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	if d.PVFile != "" && !filepath.IsAbs(d.PVFile) {
		// go test runs in the package's directory; a relative path is the repository's, where make runs.
		repo, err := kube.FindRepo(".")
		if err != nil {
			t.Fatal(err)
		}
		d.PVFile = filepath.Join(repo, d.PVFile)
	}
	rows := catalog.Drivers()
	if names := strings.Fields(os.Getenv(selectEnv)); len(names) > 0 {
		var err error
		if rows, err = catalog.SelectDrivers(names); err != nil {
			t.Fatalf("%s: %v", selectEnv, err)
		}
		for _, sc := range rows {
			if why := d.Runnable(sc.Name); why != "" {
				t.Fatalf("%s names %s: %s", selectEnv, sc.Name, why)
			}
		}
	}
	var feats []features.Feature
	for _, sc := range rows {
		if why := d.Runnable(sc.Name); why != "" {
			t.Logf("left out: %s", why)
			continue
		}
		sc.Driver, sc.DriverPlacement, sc.DriverServer = d.Name, d.Placement, d.FuseProcess
		feats = append(feats, scenarioFeature(sc, &d))
	}
	testEnv.Test(t, feats...)
}
