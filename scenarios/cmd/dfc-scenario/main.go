// Command dfc-scenario runs the FUSE mount-loss scenarios of the catalog (scenarios/) on this machine and
// writes a report per run. See scenarios/README.md.
package main

import (
	"os"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/command"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/cli"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/local"
)

func main() {
	local.MaybeInit() // the local backend re-executes this binary as its containers' init
	os.Exit(command.Main("dfc-scenario", cli.Run, os.Args[1:], command.OS()))
}
