package main

import (
	"fmt"
	"os"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/atomicfile"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/catalog"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/report"
)

const (
	resultsDir = "scenarios/results"
	matrixDoc  = "docs/outage-matrix.md"
	matrixSVG  = "docs/outage-matrix.svg"
	outcomeDoc = "docs/outcomes.md"
)

// paths are the generator's input directory and output files: the matrix doc, its heatmap, and the doc with the
// per-scenario outcome table.
type paths struct{ results, doc, svg, outcomes string }

// generated is what the records give: the matrix doc, its heatmap and the outcome doc with its table.
type generated struct{ doc, svg, outcomes []byte }

// generate reads every results file and the outcome doc and returns what they should be.
func generate(p paths) (generated, error) {
	results, files, err := report.LoadResults(p.results)
	if err != nil {
		return generated{}, err
	}
	if len(results) == 0 {
		return generated{}, fmt.Errorf("no results files in %s", p.results)
	}
	m := build(catalog.All(), results, files)
	outcomes, err := os.ReadFile(p.outcomes)
	if err != nil {
		return generated{}, err
	}
	outcomes, err = spliceOutcomes(outcomes, m.outcomeTable())
	if err != nil {
		return generated{}, fmt.Errorf("%s: %w", p.outcomes, err)
	}
	return generated{doc: []byte(m.markdown()), svg: m.heatmap(), outcomes: outcomes}, nil
}

// render writes what generate gives.
func render(p paths) error {
	g, err := generate(p)
	if err != nil {
		return err
	}
	for _, f := range []struct {
		path string
		b    []byte
	}{{p.doc, g.doc}, {p.svg, g.svg}, {p.outcomes, g.outcomes}} {
		if err := atomicfile.Write(f.path, f.b, 0o644); err != nil {
			return err
		}
	}
	return nil
}
