package report

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/atomicfile"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
)

// ResultFile is the name of a run's machine-readable result in its run dir.
const ResultFile = "result.json"

// Record is one run of a scenario, machine-readable: its verdict and measured times as report.md states them.
// WriteReport writes it into the run dir; Collect gathers the records of a catalog run into a Results file
// (scenarios/results), from which scenarios/README.md's per-version table is generated.
type Record struct {
	Scenario string `json:"scenario"`
	Backend  string `json:"backend"`
	Kubelet  string `json:"kubelet"`
	// Server is the FUSE server the run's plugin ran (internal/fuseserver); empty in records of dummy-fuse.
	Server string `json:"server,omitempty"`
	// Killed is the scenario's first disruption ("plugin killed", "keeper upgraded") and Placement where its
	// FUSE servers run (child, sidecar, keeper): the rows of docs/outage-matrix.md (absent in older records).
	Killed string `json:"killed,omitempty"`
	// Driver is the CSI driver a run measured when it is not this project's chart (a foreign driver on the kube
	// backend, --driver); empty: the chart. Its Result is MEASURED when its evidence was collected, and Profile
	// what its outage profile adds to Measured.
	Driver    string   `json:"driver,omitempty"`
	Profile   *Profile `json:"profile,omitempty"`
	Placement string   `json:"placement,omitempty"`
	Result    string   `json:"result"` // PASS, FAIL, NOT RUNNABLE or MEASURED
	// Held of Expected expected outcomes for this kubelet held; Failed says which did not, and why a run that
	// could not be carried out failed.
	Held     int      `json:"held"`
	Expected int      `json:"expected"`
	Failed   []string `json:"failed,omitempty"`
	Start    string   `json:"start"` // RFC 3339, UTC
	// ReadInterval is the backend's default read interval in seconds (a container may set its own).
	ReadInterval float64  `json:"read_interval_s"`
	Kernel       string   `json:"kernel"` // of the machine that ran the runner
	Measured     Measured `json:"measured"`
}

// Measured is a run's scenarios.Measures in seconds (the stall in milliseconds), with what tells a time that
// did not happen apart from one that had nothing to happen to. A time of 0 did not happen.
type Measured struct {
	// Kills: a step kills or replaces a component, so the times from the kill mean something. Sidecar: the pod
	// has a FUSE sidecar, so the times from its start do.
	Kills   bool `json:"kills"`
	Sidecar bool `json:"sidecar"`
	// Writes: the first container is a writer, so its recovery is a good write, not a good read; LostPieces
	// and LostBytes are what the storage lacks of what it was told was written (a limit row's loss).
	Writes     bool  `json:"writes,omitempty"`
	LostPieces int   `json:"lost_pieces,omitempty"`
	LostBytes  int64 `json:"lost_bytes,omitempty"`
	// Failed: the first container failed after the kill; VolumeDied: a stat of the volume dir failed after it.
	Failed      bool    `json:"failed"`
	VolumeDied  bool    `json:"volume_died"`
	KillToError float64 `json:"kill_to_enotconn_s"`
	// FirstErrno and KillToFirstError: the first error after the kill, whatever its errno (empty in older records).
	FirstErrno       string  `json:"first_errno,omitempty"`
	KillToFirstError float64 `json:"kill_to_first_error_s,omitempty"`
	KillToRestore    float64 `json:"kill_to_volume_restored_s"`
	KillToRecovery   float64 `json:"kill_to_good_read_s"`
	Stall            float64 `json:"stall_ms"`
	SidecarToServe   float64 `json:"sidecar_to_served_s"`
	SidecarToRead    float64 `json:"sidecar_to_good_read_s"`
	Wall             float64 `json:"wall_s"`
	// IO is what each kind of I/O of the run met after the kill (absent in older records): the one list every
	// view reads, a driver-agnostic run's outage profile included.
	IO []IOOutcome `json:"io,omitempty"`
}

// measuredOf converts an outcome's measures.
func measuredOf(o *scenarios.Outcome) Measured {
	m := o.Measures
	ran := o.NotRunnable() == nil // a NOT RUNNABLE row's steps never ran: it measured nothing ("–")
	return Measured{
		Kills: o.Scenario.Kills() && ran, Sidecar: o.Scenario.Pod.Sidecar != nil && ran, Failed: m.Failed, VolumeDied: m.VolumeDied,
		Writes:     len(o.Scenario.Pod.Containers) > 0 && o.Scenario.Pod.Containers[0].Write,
		LostPieces: m.Lost.Pieces, LostBytes: m.Lost.Bytes,
		KillToError: m.KillToError.Seconds(), KillToRestore: m.KillToRestore.Seconds(), KillToRecovery: m.KillToRecovery.Seconds(),
		FirstErrno: m.FirstErrno, KillToFirstError: m.KillToFirstError.Seconds(),
		Stall:          float64(m.Stall.Microseconds()) / 1000,
		SidecarToServe: m.SidecarToServe.Seconds(), SidecarToRead: m.SidecarToRead.Seconds(), Wall: m.Wall.Seconds(),
		IO: ioOutcomes(o.Evidence, o.Scenario),
	}
}

// serverOf is the FUSE server a record names: a server of a spec file by the spec's name, since the file's path
// is only this machine's; a foreign driver's by its process name, when the operator gave it.
func serverOf(s scenarios.Scenario) string {
	if s.Driver != "" {
		return cmp.Or(s.DriverServer, UnknownServer)
	}
	p := s.Plugin
	if fuseserver.IsSpecFile(p.FuseServer) {
		if k, err := fuseserver.Lookup(p.FuseServer); err == nil {
			return k.Name
		}
	}
	return p.FuseServer
}

// UnknownServer is the server of a foreign driver's row whose FUSE process the operator did not name.
const UnknownServer = "unknown"

// RecordOf is the record of an outcome.
func RecordOf(o *scenarios.Outcome) Record {
	r := Record{Scenario: o.Scenario.Name, Backend: o.Backend, Kubelet: o.Kubelet.String(), Result: o.Result(),
		Server: serverOf(o.Scenario), Killed: Disruption(o.Scenario), Placement: Placement(o.Scenario),
		Driver: o.Scenario.Driver, Profile: ProfileOf(o),
		Start: o.Start.UTC().Format(time.RFC3339), ReadInterval: o.Timing.ReadInterval.Seconds(), Kernel: kernel(),
		Measured: measuredOf(o), Expected: len(o.Verdicts)}
	for _, v := range o.Verdicts {
		if v.Result.OK {
			r.Held++
		} else {
			r.Failed = append(r.Failed, v.Expectation.Describe())
		}
	}
	if o.Err != nil {
		r.Failed = append(r.Failed, "the run: "+o.Err.Error())
	}
	if o.CleanupErr != nil {
		r.Failed = append(r.Failed, "cleanup: "+o.CleanupErr.Error())
	}
	return r
}

// Disruption is the label of scenario s's first step that kills or replaces a component ("plugin killed"),
// "" when none does.
func Disruption(s scenarios.Scenario) string {
	for _, st := range s.Steps {
		if st.Action == scenarios.ActKill || st.Action == scenarios.ActUpgrade {
			return st.Label()
		}
	}
	return ""
}

// Placement is where scenario s's FUSE servers run: its plugin's --fuse-mode, child when unset; for a foreign
// driver what the operator said (--placement), else "unknown".
func Placement(s scenarios.Scenario) string {
	if s.Driver != "" {
		return cmp.Or(s.DriverPlacement, "unknown")
	}
	return s.Plugin.Topology().String()
}

// kernel is the release of the running kernel.
func kernel() string {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
}

// Results is one recorded catalog run on one backend and kubelet: a file of scenarios/results.
type Results struct {
	Commit  string `json:"commit"` // the project's commit (git describe), "-dirty" when uncommitted
	Date    string `json:"date"`   // the first run's start, RFC 3339, UTC
	Backend string `json:"backend"`
	Kubelet string `json:"kubelet"`
	// Server is the FUSE server of every run (Record.Server), Driver the foreign driver (Record.Driver).
	Server string `json:"server,omitempty"`
	Driver string `json:"driver,omitempty"`
	Kernel string `json:"kernel"`
	// Command is what ran the catalog (make ci-kube, make scenarios).
	Command string `json:"command"`
	// Note says anything else a reader of the figures needs (e.g. how the records were obtained).
	Note string   `json:"note,omitempty"`
	Runs []Record `json:"runs"`
}

// Collect reads the records of the run dirs below dirs (each dir a run dir or a parent of run dirs) whose runs
// started at since or later, and groups them into one Results per backend and kubelet.
func Collect(since time.Time, dirs ...string) ([]*Results, error) {
	var recs []Record
	for _, d := range dirs {
		paths, err := filepath.Glob(filepath.Join(d, ResultFile))
		if err != nil {
			return nil, err
		}
		more, err := filepath.Glob(filepath.Join(d, "*", ResultFile))
		if err != nil {
			return nil, err
		}
		for _, p := range append(paths, more...) {
			b, err := os.ReadFile(p)
			if err != nil {
				return nil, err
			}
			var r Record
			if err := json.Unmarshal(b, &r); err != nil {
				return nil, fmt.Errorf("%s: %w", p, err)
			}
			start, err := time.Parse(time.RFC3339, r.Start)
			if err != nil {
				return nil, fmt.Errorf("%s: start: %w", p, err)
			}
			if !start.Before(since.Truncate(time.Second)) {
				recs = append(recs, r)
			}
		}
	}
	slices.SortStableFunc(recs, func(a, b Record) int { return strings.Compare(a.Start, b.Start) })
	var out []*Results
	for _, r := range recs {
		i := slices.IndexFunc(out, func(rs *Results) bool {
			return rs.Backend == r.Backend && rs.Kubelet == r.Kubelet && rs.Server == r.Server && rs.Driver == r.Driver
		})
		if i < 0 {
			out = append(out, &Results{Date: r.Start, Backend: r.Backend, Kubelet: r.Kubelet, Server: r.Server, Driver: r.Driver, Kernel: r.Kernel})
			i = len(out) - 1
		}
		out[i].Runs = append(out[i].Runs, r)
	}
	return out, nil
}

// Write writes rs as indented JSON to dir/<date>-<commit>-<backend>-<kubelet>[-<server>].json and returns the
// path.
func (rs *Results) Write(dir string) (string, error) {
	b, err := json.MarshalIndent(rs, "", "  ")
	if err != nil {
		return "", err
	}
	date := strings.NewReplacer(":", "", "-", "").Replace(rs.Date)
	if len(date) > 13 {
		date = date[:13] // 20261126T1314
	}
	server := ""
	if rs.Server != "" {
		server = "-" + rs.Server
	}
	if rs.Driver != "" {
		server += "-driver-" + rs.Driver
	}
	path := filepath.Join(dir, fmt.Sprintf("%s-%s-%s-%s%s.json", date, rs.Commit, rs.Backend, rs.Kubelet, server))
	if err := atomicfile.Write(path, append(b, '\n'), 0o644); err != nil {
		return "", err
	}
	return path, nil
}

// LoadResults reads every results file of dir, oldest first (names sort by date).
func LoadResults(dir string) ([]*Results, []string, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, nil, err
	}
	slices.Sort(paths)
	var out []*Results
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, nil, err
		}
		var rs Results
		if err := json.Unmarshal(b, &rs); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", p, err)
		}
		out = append(out, &rs)
	}
	return out, paths, nil
}
