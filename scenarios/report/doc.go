// Package report renders a scenario's run: the verdict lines and the summary table for a terminal, and the run
// directory's report.md, timeline.svg and events.log.
package report
