package driver

import (
	"flag"
	"os"
	"testing"

	"k8s.io/klog/v2"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// bins builds dummy-fuse once for all the tests of this package.
var bins testenv.Binaries

// TestMain registers klog's flags, so that `go test ./csi-plugin/driver -args -v=5` shows the plugin's logs.
func TestMain(m *testing.M) {
	klog.InitFlags(nil)
	flag.Parse()
	code := m.Run()
	bins.Remove()
	os.Exit(code)
}
