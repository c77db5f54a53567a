// Command scenariodoc keeps scenarios/README.md's per-version table tied to recorded runs. Run from the
// repository root.
//
//	scenariodoc                 regenerate the table from every file of scenarios/results (make scenarios-doc)
//	scenariodoc record [flags] DIR...
//	                            gather the result.json of the run dirs below DIR (a catalog run: make scenarios,
//	                            make ci-kube) into results files, one per backend and kubelet
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/catalog"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/report"
)

const (
	resultsDir = "scenarios/results"
	readme     = "scenarios/README.md"
)

func main() {
	var err error
	if len(os.Args) > 1 && os.Args[1] == "record" {
		err = record(os.Args[2:])
	} else if len(os.Args) > 1 {
		err = fmt.Errorf("unknown argument %q (none, or record)", os.Args[1])
	} else {
		err = render(resultsDir, readme)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "scenariodoc:", err)
		os.Exit(1)
	}
}

func record(args []string) error {
	fl := flag.NewFlagSet("scenariodoc record", flag.ContinueOnError)
	commit := fl.String("commit", "", "the project's commit the runs were built from (git describe --always --dirty)")
	command := fl.String("command", "", "what ran the catalog, e.g. make ci-kube")
	since := fl.String("since", "", "only runs that started at this time (RFC 3339) or later")
	note := fl.String("note", "", "anything else a reader of the figures needs to know")
	out := fl.String("out", resultsDir, "directory of the results files")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if *commit == "" || *command == "" || fl.NArg() == 0 {
		return fmt.Errorf("record needs -commit, -command and at least one run directory")
	}
	var from time.Time
	if *since != "" {
		var err error
		if from, err = time.Parse(time.RFC3339, *since); err != nil {
			return fmt.Errorf("-since: %w", err)
		}
	}
	all, err := report.Collect(from, fl.Args()...)
	if err != nil {
		return err
	}
	if len(all) == 0 {
		return fmt.Errorf("no %s below %v (since %s)", report.ResultFile, fl.Args(), *since)
	}
	for _, rs := range all {
		rs.Commit, rs.Command, rs.Note = *commit, *command, *note
		path, err := rs.Write(*out)
		if err != nil {
			return err
		}
		fmt.Printf("recorded %d runs on backend %s, kubelet %s: %s\n", len(rs.Runs), rs.Backend, rs.Kubelet, path)
	}
	return nil
}

// render regenerates the per-version table of the README at path from the results in dir.
func render(dir, path string) error {
	results, files, err := report.LoadResults(dir)
	if err != nil {
		return err
	}
	old, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	updated, err := report.SpliceVersionTable(old, report.VersionTable(catalog.All(), results, files))
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.WriteFile(path, updated, 0o644)
}
