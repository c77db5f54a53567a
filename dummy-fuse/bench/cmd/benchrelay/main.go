// Command benchrelay runs the relay's benchmarks (BenchmarkRelay in dummy-fuse/relayfs: every real server read
// directly and through the relay, then killed under a reader through the relay) in rounds whose order
// alternates, prints the machine, its load and every round, and writes the result file in
// dummy-fuse/bench/results/relay from which `make bench-doc` generates the relay table of dummy-fuse/README.md.
// hack/bench-relay.sh builds what it needs.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/bench"
)

func main() {
	var rn bench.RelayRun
	out := flag.String("out", "", "directory for the result file (none when empty)")
	flag.StringVar(&rn.TestBinary, "test-binary", "", "compiled test binary of ./dummy-fuse/relayfs (go test -c)")
	flag.StringVar(&rn.Dir, "dir", "dummy-fuse/relayfs", "directory to run the test binary in")
	flag.StringVar(&rn.Commit, "commit", "", "commit of dummy-fuse")
	flag.IntVar(&rn.Rounds, "rounds", 5, "rounds")
	flag.StringVar(&rn.Benchtime, "benchtime", "2s", "go test -benchtime per benchmark, server and way")
	flag.IntVar(&rn.Kills, "kills", 5, "server kills per round and server")
	flag.Parse()
	rn.Log = os.Stderr
	if rn.TestBinary == "" || rn.Rounds < 1 || rn.Kills < 1 {
		fmt.Fprintln(os.Stderr, "benchrelay: -test-binary, -rounds >= 1 and -kills >= 1 are required")
		os.Exit(2)
	}
	r, err := rn.Do()
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchrelay:", err)
		os.Exit(1)
	}
	fmt.Println()
	fmt.Println(bench.RelayGoals(r))
	if *out != "" {
		path, err := r.Write(*out)
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchrelay:", err)
			os.Exit(1)
		}
		fmt.Println("wrote", path)
	}
}
