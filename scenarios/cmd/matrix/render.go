package main

import "errors"

const (
	resultsDir = "scenarios/results"
	matrixDoc  = "docs/outage-matrix.md"
	matrixSVG  = "docs/outage-matrix.svg"
	rootReadme = "README.md"
)

type paths struct{ results, doc, svg, readme string }

func render(p paths) error { return errors.New("the generator is not in this commit yet") }
