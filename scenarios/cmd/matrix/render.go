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
	rootReadme = "README.md"
)

// paths are the generator's input directory and output files.
type paths struct{ results, doc, svg, readme string }

// generated is what the records give: the matrix doc, its heatmap and the README with its table.
type generated struct{ doc, svg, readme []byte }

// generate reads every results file and the README and returns what they should be.
func generate(p paths) (generated, error) {
	results, files, err := report.LoadResults(p.results)
	if err != nil {
		return generated{}, err
	}
	if len(results) == 0 {
		return generated{}, fmt.Errorf("no results files in %s", p.results)
	}
	m := build(catalog.All(), results, files)
	readme, err := os.ReadFile(p.readme)
	if err != nil {
		return generated{}, err
	}
	readme, err = spliceReadme(readme, m.readmeTable())
	if err != nil {
		return generated{}, fmt.Errorf("%s: %w", p.readme, err)
	}
	return generated{doc: []byte(m.markdown()), svg: m.heatmap(), readme: readme}, nil
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
	}{{p.doc, g.doc}, {p.svg, g.svg}, {p.readme, g.readme}} {
		if err := atomicfile.Write(f.path, f.b, 0o644); err != nil {
			return err
		}
	}
	return nil
}
