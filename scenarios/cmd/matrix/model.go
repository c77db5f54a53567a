package main

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/report"
)

// matrixCommand begins the command of every pass hack/matrix.sh records (RECORD_COMMAND): how its passes are
// found among the records to say how long it took.
const matrixCommand = "make matrix"

// chartDriver names the runs of this project's own chart (report.Record.Driver empty).
const chartDriver = "dummy-fuse-csi"

// row is a row of the matrix: what was killed, where the FUSE servers ran, which server and driver, in
// which scenario.
type row struct {
	Killed, Placement, Scenario, Server, Driver string
	order                                       int // the scenario's place in the catalog; unknown ones after it
}

func (r row) label() string {
	s := fmt.Sprintf("%s · %s · %s · %s", r.Killed, r.Placement, r.Server, r.Scenario)
	if r.Driver != chartDriver {
		s += " · driver " + r.Driver
	}
	return s
}

// column is a kubelet a run was on: a release the local backend models, or a real one (the kube backend).
type column struct{ Kubelet, Backend string }

func (c column) label() string {
	switch c.Backend {
	case scenarios.BackendLocal:
		return c.Kubelet + " model"
	case scenarios.BackendKube:
		return c.Kubelet + " real"
	}
	return c.Kubelet + " " + c.Backend
}

// cell is the newest record of a row on a column.
type cell struct {
	rec  report.Record
	file string
	io   []report.IOOutcome
	// legacy: the record predates per-I/O outcomes; io was derived from its first container's measures.
	legacy bool
	// notRunnable: the backend refused the run (the kubelet lacks what the row needs); nothing was measured.
	notRunnable bool
}

// notRunnableText is how every view shows a cell whose run was not runnable: a verdict of its own, never a FAIL.
const notRunnableText = "NOT RUNNABLE"

// outcome is the cell's outcome for an I/O kind, false when the run had no I/O of that kind.
func (c cell) outcome(kind string) (report.IOOutcome, bool) {
	i := slices.IndexFunc(c.io, func(o report.IOOutcome) bool { return o.Kind == kind })
	if i < 0 {
		return report.IOOutcome{}, false
	}
	return c.io[i], true
}

// matrix is every recorded run that killed something, newest per row and column.
type matrix struct {
	rows    []row
	columns []column
	cells   map[row]map[column]cell
	// quiet are the scenarios recorded that kill nothing (no I/O outcome to show), sorted.
	quiet []string
	// passes are the make matrix runs found, oldest first.
	passes []pass
}

// pass is one `make matrix` as its records show it.
type pass struct {
	commit     string
	start, end time.Time
	runs       int
	files      int
	combos     []string
}

// build reads the results (report.LoadResults) against the catalog; a record of a scenario the catalog does not
// know is placed by its own fields.
func build(cat []scenarios.Scenario, results []*report.Results, files []string) *matrix {
	m := &matrix{cells: map[row]map[column]cell{}}
	quiet := map[string]bool{}
	passes := map[string]*pass{}
	for i, rs := range results {
		for _, r := range rs.Runs {
			if strings.HasPrefix(rs.Command, matrixCommand) {
				p := passes[rs.Commit]
				if p == nil {
					p = &pass{commit: rs.Commit}
					passes[rs.Commit] = p
				}
				p.add(r, rs)
			}
			sc, known := findScenario(cat, r.Scenario)
			notRunnable := r.Result == notRunnableText && known >= 0 && report.Disruption(sc) != ""
			if !r.Measured.Kills && !notRunnable {
				quiet[r.Scenario] = true
				continue
			}
			rw := row{Scenario: r.Scenario, Server: recordServer(r), Driver: cmp.Or(r.Driver, chartDriver),
				Killed: cmp.Or(r.Killed, "?"), Placement: cmp.Or(r.Placement, "?"), order: len(cat)}
			if known >= 0 {
				rw.Killed, rw.Placement, rw.order = cmp.Or(r.Killed, report.Disruption(sc)), cmp.Or(r.Placement, report.Placement(sc)), known
			}
			col := column{Kubelet: r.Kubelet, Backend: r.Backend}
			c := cell{rec: r, file: files[i], io: r.Measured.IO, notRunnable: notRunnable}
			if c.io == nil && r.Profile != nil {
				c.io = profileIO(r.Profile.IO)
			}
			if c.io == nil && !notRunnable {
				c.io, c.legacy = legacyIO(r.Measured, sc, known >= 0), true
			}
			if m.cells[rw] == nil {
				m.cells[rw] = map[column]cell{}
				m.rows = append(m.rows, rw)
			}
			if !slices.Contains(m.columns, col) {
				m.columns = append(m.columns, col)
			}
			m.cells[rw][col] = c // later files and later runs are newer
		}
	}
	servers := fuseserver.Names()
	slices.SortFunc(m.rows, func(a, b row) int {
		return cmp.Or(cmp.Compare(a.Killed, b.Killed), cmp.Compare(a.Placement, b.Placement), cmp.Compare(a.order, b.order),
			cmp.Compare(a.Scenario, b.Scenario), cmp.Compare(serverIndex(servers, a.Server), serverIndex(servers, b.Server)),
			cmp.Compare(a.Server, b.Server), cmp.Compare(a.Driver, b.Driver))
	})
	slices.SortFunc(m.columns, func(a, b column) int {
		return cmp.Or(report.NewerFirst(a.Kubelet, b.Kubelet), cmp.Compare(a.Backend, b.Backend))
	})
	for s := range quiet {
		m.quiet = append(m.quiet, s)
	}
	slices.Sort(m.quiet)
	for _, p := range passes {
		m.passes = append(m.passes, *p)
	}
	slices.SortFunc(m.passes, func(a, b pass) int { return a.start.Compare(b.start) })
	return m
}

func (p *pass) add(r report.Record, rs *report.Results) {
	start, err := time.Parse(time.RFC3339, r.Start)
	if err != nil {
		return
	}
	end := start.Add(time.Duration(r.Measured.Wall * float64(time.Second)))
	if p.start.IsZero() || start.Before(p.start) {
		p.start = start
	}
	if end.After(p.end) {
		p.end = end
	}
	p.runs++
	combo := cmp.Or(rs.Server, fuseserver.DummyFuse) + " × " + rs.Kubelet
	if !slices.Contains(p.combos, combo) {
		p.combos = append(p.combos, combo)
		p.files++
	}
}

func findScenario(cat []scenarios.Scenario, name string) (scenarios.Scenario, int) {
	i := slices.IndexFunc(cat, func(s scenarios.Scenario) bool { return s.Name == name })
	if i < 0 {
		return scenarios.Scenario{}, -1
	}
	return cat[i], i
}

func serverIndex(servers []string, s string) int {
	if i := slices.Index(servers, s); i >= 0 {
		return i
	}
	return len(servers)
}

// profileIO is the I/O of a driver-agnostic run recorded before the per-I/O outcomes: its profile measured no
// open or read latency, and its cells have always shown the longest time without a good read as the stall.
func profileIO(io []report.IOOutcome) []report.IOOutcome {
	out := slices.Clone(io)
	for i := range out {
		out[i].Stall = out[i].Gap
	}
	return out
}

// legacyIO derives what an older record says about its I/O: its first container's first error, stall and
// recovery (of that container's kind where the catalog knows the scenario), and whether stat of the volume dir
// failed (its errno was not recorded).
func legacyIO(m report.Measured, sc scenarios.Scenario, known bool) []report.IOOutcome {
	var out []report.IOOutcome
	if known && len(sc.Pod.Containers) > 0 {
		c := sc.Pod.Containers[0]
		o := report.IOOutcome{Kind: report.IOKindOf(c), Container: c.Name, Stall: m.Stall}
		if m.Failed {
			o.FirstError, o.FaultToFirstError = cmp.Or(m.FirstErrno, "failed"), m.KillToFirstError
			if o.FirstError == "failed" && m.KillToError > 0 {
				o.FirstError, o.FaultToFirstError = "ENOTCONN", m.KillToError
			}
			o.FaultToGood = m.KillToRecovery
		}
		out = append(out, o)
	}
	st := report.IOOutcome{Kind: report.IOStat}
	if m.VolumeDied {
		st.FirstError, st.FaultToGood = "failed", m.KillToRestore
	}
	return append(out, st)
}

// class is how an outcome is drawn: nothing failed, failed and came back, failed for good.
type class int

const (
	classNone class = iota // no I/O of this kind, or not recorded
	classOK
	classRecovered
	classLost
	classNotRunnable // the run was refused: the kubelet lacks what the row needs
)

func classOf(o report.IOOutcome) class {
	switch {
	case o.FirstError == "":
		return classOK
	case o.FaultToGood > 0:
		return classRecovered
	}
	return classLost
}

// text is an outcome in a few words: "no error · stall 3ms", "ENOTCONN +0.51s · ok +1.07s",
// "ENOTCONN +0.51s · never ok".
func text(o report.IOOutcome) string {
	if o.FirstError == "" {
		if o.Stall == 0 { // stat from the host: no latency is recorded
			return "no error"
		}
		return "no error · stall " + ms(o.Stall)
	}
	s := o.FirstError
	if o.FaultToFirstError > 0 {
		s += fmt.Sprintf(" +%.2fs", o.FaultToFirstError)
	}
	if o.FaultToGood > 0 {
		return s + fmt.Sprintf(" · ok +%.2fs", o.FaultToGood)
	}
	return s + " · never ok"
}

func ms(v float64) string {
	switch {
	case v >= 1000:
		return fmt.Sprintf("%.2fs", v/1000)
	case v < 10:
		return fmt.Sprintf("%.1fms", v)
	}
	return fmt.Sprintf("%.0fms", v)
}

// recordServer is the FUSE server of record r's row: dummy-fuse when a record of this project's chart names
// none (records before servers were named), unknown for a foreign driver's that names none.
func recordServer(r report.Record) string {
	if r.Driver != "" {
		return cmp.Or(r.Server, report.UnknownServer)
	}
	return cmp.Or(r.Server, fuseserver.DummyFuse)
}
