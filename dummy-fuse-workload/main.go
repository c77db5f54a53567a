// Command dummy-fuse-workload keeps reading a file and logs every open, read and error, to show what an
// application sees when the FUSE mount under it is lost. See package workload.
package main

import (
	"os"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/dummy-fuse-workload/workload"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/command"
)

func main() {
	os.Exit(command.Main("dummy-fuse-workload", workload.Command(workload.Env{}), os.Args[1:], command.OS()))
}
