// Command benchrun runs dummy-fuse's benchmarks against the C reference in alternating rounds (hack/bench.sh
// builds what it needs), prints the machine, its load and every round, and writes the result file from which
// `make bench-doc` generates the table of dummy-fuse/README.md.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/bench"
)

func main() {
	var rn bench.Run
	out := flag.String("out", "", "directory for the result file (none when empty)")
	flag.StringVar(&rn.TestBinary, "test-binary", "", "compiled test binary of ./dummy-fuse (go test -c)")
	flag.StringVar(&rn.Dir, "dir", "dummy-fuse", "directory to run the test binary in")
	flag.StringVar(&rn.GoServer, "go", "bin/dummy-fuse", "the dummy-fuse binary")
	flag.StringVar(&rn.CServer, "c", "bin/dummy-fuse-cref", "the C reference binary")
	flag.StringVar(&rn.Libfuse, "libfuse", "", "libfuse version of the C reference")
	flag.StringVar(&rn.Commit, "commit", "", "commit of dummy-fuse")
	flag.IntVar(&rn.Rounds, "rounds", 5, "rounds")
	flag.StringVar(&rn.Benchtime, "benchtime", "2s", "go test -benchtime per benchmark and server")
	flag.StringVar(&rn.Bench, "bench", ".", "benchmarks to run (regexp)")
	flag.BoolVar(&rn.Loaded, "loaded", false, "run a CPU-bound thread per core beside the benchmarks, as on a busy node")
	flag.Parse()
	rn.Log = os.Stderr
	if rn.TestBinary == "" || rn.Rounds < 1 {
		fmt.Fprintln(os.Stderr, "benchrun: -test-binary and -rounds >= 1 are required")
		os.Exit(2)
	}
	r, err := rn.Do()
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchrun:", err)
		os.Exit(1)
	}
	fmt.Println()
	bench.PrintSummary(os.Stdout, r)
	if *out != "" {
		path, err := r.Write(*out)
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchrun:", err)
			os.Exit(1)
		}
		fmt.Println("wrote", path)
	}
}
