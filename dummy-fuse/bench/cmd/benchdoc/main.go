// Command benchdoc regenerates the generated tables of dummy-fuse/README.md from the newest result files in
// dummy-fuse/bench/results (written by `make bench`), results/relay (`make bench-relay`) and results/soak
// (`make soak-relay`), and csi-plugin/README.md's from results/soak-relay-keeper (`make soak-relay-keeper`). Run
// from the repository root (`make bench-doc`).
package main

import (
	"fmt"
	"os"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/bench"
)

func main() {
	if err := run("dummy-fuse/bench/results", "dummy-fuse/README.md", bench.Regenerate); err != nil {
		fmt.Fprintln(os.Stderr, "benchdoc:", err)
		os.Exit(1)
	}
	if err := run("dummy-fuse/bench/results", "csi-plugin/README.md", bench.RegenerateCSIPlugin); err != nil {
		fmt.Fprintln(os.Stderr, "benchdoc:", err)
		os.Exit(1)
	}
}

func run(results, readme string, regenerate func(readme []byte, results string) ([]byte, error)) error {
	old, err := os.ReadFile(readme)
	if err != nil {
		return err
	}
	updated, err := regenerate(old, results)
	if err != nil {
		return fmt.Errorf("%s: %w", readme, err)
	}
	return os.WriteFile(readme, updated, 0o644)
}
