// Command matrix keeps docs/outage-matrix.md, its heatmap docs/outage-matrix.svg and docs/outcomes.md's
// per-scenario table tied to the recorded runs of scenarios/results. Run from the repository root.
//
//	matrix           regenerate them from every results file (make matrix-doc)
//	matrix servers   print the FUSE servers the local catalog runs with (make matrix's default)
//	matrix kubelets  print the kubelet versions the local backend models (make matrix's default)
package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/local"
)

func main() {
	var err error
	switch {
	case len(os.Args) == 2 && os.Args[1] == "servers":
		fmt.Println(strings.Join(fuseserver.Names(), " "))
	case len(os.Args) == 2 && os.Args[1] == "kubelets":
		fmt.Println(strings.Join(local.KubeletVersions, " "))
	case len(os.Args) == 1:
		err = render(paths{results: resultsDir, doc: matrixDoc, svg: matrixSVG, outcomes: outcomeDoc})
	default:
		err = fmt.Errorf("unknown arguments %q (none, servers or kubelets)", os.Args[1:])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "matrix:", err)
		os.Exit(1)
	}
}
