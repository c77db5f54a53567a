package testenv

import (
	"os"
	"testing"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/bench"
)

// SoakRecord is a soak's record (bench.SoakResult, bench.RelayKeeperSoakResult).
type SoakRecord interface {
	Write(dir string) (string, error)
}

// Soak is the frame of a soak test (make soak-relay, make soak-relay-keeper): skipped unless DFC_SOAK_KILLS is set
// (what and target say what it is and how to run it), it runs soak for each server as a subtest with that many
// kills and, with DFC_SOAK_OUT, writes the record that record makes of the run and of the servers' figures, once
// every server's soak ran to its end.
func Soak[S any](t *testing.T, what, target string, servers []string, soak func(t *testing.T, server string, kills int) S, record func(bench.SoakRun, []S) SoakRecord) {
	kills, err := bench.SoakKills()
	if err != nil {
		t.Fatal(err)
	}
	if kills == 0 {
		t.Skipf("%s: set %s (%s)", what, bench.SoakKillsEnv, target)
	}
	RequireFUSE(t)
	run, err := bench.StartSoak()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kernel %s, %s", run.Machine.Kernel, run.Load)
	var figures []S
	for _, name := range servers {
		t.Run(name, func(t *testing.T) { figures = append(figures, soak(t, name, kills)) })
	}
	if dir := os.Getenv(bench.SoakOutEnv); dir != "" && len(figures) == len(servers) {
		path, err := record(run, figures).Write(dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", path)
	}
}
