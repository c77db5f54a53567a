// Command benchdoc regenerates the benchmark table of dummy-fuse/README.md from the newest result file in
// dummy-fuse/bench/results (written by `make bench`). Run from the repository root (`make bench-doc`).
package main

import (
	"fmt"
	"os"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/dummy-fuse/bench"
)

func main() {
	if err := run("dummy-fuse/bench/results", "dummy-fuse/README.md"); err != nil {
		fmt.Fprintln(os.Stderr, "benchdoc:", err)
		os.Exit(1)
	}
}

func run(results, readme string) error {
	file, r, err := bench.Newest(results)
	if err != nil {
		return err
	}
	old, err := os.ReadFile(readme)
	if err != nil {
		return err
	}
	updated, err := bench.Splice(old, bench.Table(r, file))
	if err != nil {
		return fmt.Errorf("%s: %w", readme, err)
	}
	return os.WriteFile(readme, updated, 0o644)
}
