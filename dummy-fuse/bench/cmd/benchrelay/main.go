// Command benchrelay runs the relay's benchmarks (BenchmarkRelay in dummy-fuse/relayfs: every real server read
// directly and through the relay, then killed under a reader through the relay; with -writes
// BenchmarkRelayWrite, every writable real server written directly and through the writable relay) in rounds
// whose order alternates, prints the machine, its load and every round, and writes the result file in
// dummy-fuse/bench/results/relay (relay-write) from which `make bench-doc` generates the relay tables of
// dummy-fuse/README.md.
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
	writes := flag.Bool("writes", false, "run the writable relay's write benchmarks (BenchmarkRelayWrite) instead, for dummy-fuse/bench/results/relay-write")
	flag.Parse()
	rn.Log = os.Stderr
	if rn.TestBinary == "" || rn.Rounds < 1 || rn.Kills < 1 {
		fmt.Fprintln(os.Stderr, "benchrelay: -test-binary, -rounds >= 1 and -kills >= 1 are required")
		os.Exit(2)
	}
	if *writes {
		r, err := rn.DoWrites()
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchrelay:", err)
			os.Exit(1)
		}
		fmt.Println()
		fmt.Println(bench.RelayWriteGoal(r))
		write(r, *out)
		return
	}
	r, err := rn.Do()
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchrelay:", err)
		os.Exit(1)
	}
	fmt.Println()
	fmt.Println(bench.RelayGoals(r))
	write(r, *out)
}

// write writes the result file of r in dir, unless dir is empty.
func write(r interface{ Write(string) (string, error) }, dir string) {
	if dir == "" {
		return
	}
	path, err := r.Write(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchrelay:", err)
		os.Exit(1)
	}
	fmt.Println("wrote", path)
}
