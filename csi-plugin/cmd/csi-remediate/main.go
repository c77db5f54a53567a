// Command csi-remediate is the opt-in remediator of dummy-fuse-csi (package remediate): on its node it deletes the
// controller-owned pods stuck on a dead volume. It is a binary of its own so that the node plugin does not link
// client-go (csi-plugin would grow about threefold).
package main

import (
	"os"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/remediate"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/command"
)

func main() { os.Exit(command.Main("csi-remediate", remediate.Command, os.Args[1:], command.OS())) }
