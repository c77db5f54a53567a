package driver

import (
	"flag"
	"os"
	"testing"

	"k8s.io/klog/v2"
)

// TestMain registers klog's flags, so that `go test ./csi-plugin/driver -args -v=5` shows the plugin's logs.
func TestMain(m *testing.M) {
	klog.InitFlags(nil)
	flag.Parse()
	os.Exit(m.Run())
}
