package scenarios

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/dummy-fuse-workload/workload"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/contract"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// Source is who observed an event.
type Source string

// Event sources.
const (
	// SrcWorkload: a line of the workload's own JSON log.
	SrcWorkload Source = "workload"
	// SrcKubelet: the kubelet / container runtime (container started, exited, start failed, back-off).
	SrcKubelet Source = "kubelet"
	// SrcComponent: the lifecycle of a component that steps kill and start (Event.Component: the plugin...).
	SrcComponent Source = "component"
	// SrcProbe: stat of a volume path on the host.
	SrcProbe Source = "probe"
	// SrcRunner: the scenario runner (steps).
	SrcRunner Source = "runner"
	// SrcRemediator: the remediator (csi-remediate), its events on the pod.
	SrcRemediator Source = "remediator"
	// SrcStorage: a read of the volume's storage behind every FUSE layer, after the steps (StorageReader).
	SrcStorage Source = "storage"
)

// Kind is what happened.
type Kind string

// Event kinds. The workload kinds are the workload log's own event names.
const (
	KWorkloadStart Kind = contract.WorkloadStart
	KOpen          Kind = contract.WorkloadOpen
	KOpenError     Kind = contract.WorkloadOpenError
	KReadStart     Kind = contract.WorkloadReadStart
	KRead          Kind = contract.WorkloadRead
	KReadError     Kind = contract.WorkloadReadError
	KClose         Kind = contract.WorkloadClose
	KWorkloadExit  Kind = contract.WorkloadExit
	KLog           Kind = "log" // a workload line that is not JSON

	// The writer's (Container.Write): a write begun, a piece acknowledged, an fsync, a checkpoint renamed into
	// place, a failed write, fsync or checkpoint (Event.Op says which).
	KWriteStart Kind = contract.WorkloadWriteStart
	KWrite      Kind = contract.WorkloadWrite
	KSync       Kind = contract.WorkloadSync
	KCheckpoint Kind = contract.WorkloadCheckpoint
	KWriteError Kind = contract.WorkloadWriteError

	// KStored is an object read from the volume's storage (Evidence.Stored): Path is its name.
	KStored Kind = "stored"

	KContainerStarted Kind = "container_started"
	KContainerExited  Kind = "container_exited"
	KStartFailed      Kind = "start_failed"
	KBackOff          Kind = "back_off"
	KVolumeMounted    Kind = "volume_mounted"

	// The lifecycle of a component (Event.Component): started, serving again, killed by a step, replaced by a
	// new build by a step (Detail: the new version), exited.
	KStarted  Kind = "started"
	KReady    Kind = "ready"
	KKilled   Kind = "killed"
	KUpgraded Kind = "upgraded"
	KExited   Kind = "exited"

	KProbe Kind = "probe"

	// KPodEvent is a Kubernetes Event on the workload pod: Detail is its reason, Message its type and message.
	// Source is SrcKubelet for kubelet's (VolumeConditionAbnormal), SrcRemediator for the remediator's.
	KPodEvent Kind = "pod_event"
	// KVolumeHealth is a change of the pod's status.volumeHealth (kubelet v1.37): Message is the volume's
	// conditions, "" when it has none (healthy).
	KVolumeHealth Kind = "volume_health"

	KStep        Kind = "step"
	KStepTimeout Kind = "step_timeout"
)

// Path labels used in Event.Path for probes and in Evidence.Paths.
const (
	PathVolume  = "volume"  // the pod's volume dir: <kubelet>/pods/<uid>/volumes/kubernetes.io~csi/<pv>/mount
	PathStaging = "staging" // the staging dir: <kubelet>/plugins/kubernetes.io/csi/<driver>/<sha256>/globalmount
)

// Event is one observation.
type Event struct {
	Time   time.Time `json:"time"`
	Source Source    `json:"source"`
	Kind   Kind      `json:"kind"`
	// Component is the component of a lifecycle event (KStarted, KReady, KKilled, KExited).
	Component topology.Component `json:"component,omitempty"`
	// Container and Instance identify a workload container; Instance counts its starts from 0 (a restart
	// count), so "reader#1" is the first restart.
	Container string `json:"container,omitempty"`
	Instance  int    `json:"instance,omitempty"`
	// Errno is a symbolic errno ("ENOTCONN"), "" when none; for probes "" means stat succeeded.
	Errno string `json:"errno,omitempty"`
	// ExitCode is set for exits.
	ExitCode *int `json:"exit_code,omitempty"`
	// Path is a probe's path label (PathVolume...) or a file.
	Path string `json:"path,omitempty"`
	// Message is the human-readable text: kubelet's event message, the workload's error, the step.
	Message string `json:"message,omitempty"`
	// Detail is what a kubelet would only log (e.g. the cause behind "failed to prepare subPath").
	Detail string `json:"detail,omitempty"`
	// Content is what a read returned.
	Content string `json:"content,omitempty"`
	// Latency is how long the workload's open, read or write took (the event's Time is its end).
	Latency time.Duration `json:"latency,omitempty"`
	// The writer's (KWriteStart, KWrite, KSync, KCheckpoint, KWriteError): the piece's (or checkpoint's)
	// sequence number, where it went in the file (a sync: how far the file is durable), its size and SHA-256,
	// and what failed (Op: create, write, fsync, close, rename). WritesKept checks the storage against them.
	Seq    *int   `json:"seq,omitempty"`
	Offset *int64 `json:"offset,omitempty"`
	Bytes  *int   `json:"bytes,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
	Op     string `json:"op,omitempty"`
}

// Who names the event's container instance ("reader#1"), its component or its source.
func (e Event) Who() string {
	switch {
	case e.Container != "":
		return fmt.Sprintf("%s#%d", e.Container, e.Instance)
	case e.Component != "":
		return string(e.Component)
	}
	return string(e.Source)
}

// IsWorkloadError reports a failed open, read or write (fsync, checkpoint) logged by the workload.
func (e Event) IsWorkloadError() bool {
	return e.Source == SrcWorkload && (e.Kind == KReadError || e.Kind == KOpenError || e.Kind == KWriteError)
}

// IsAckedWrite reports a piece the kernel acknowledged to a writer container.
func (e Event) IsAckedWrite() bool {
	return e.Source == SrcWorkload && e.Kind == KWrite
}

// IsGoodIO reports a good read or an acknowledged write: the I/O of a container that worked.
func (e Event) IsGoodIO() bool { return e.IsGoodRead() || e.IsAckedWrite() }

// IsGoodRead reports a read that returned the file's content.
func (e Event) IsGoodRead() bool {
	return e.Source == SrcWorkload && e.Kind == KRead && e.Content == Content
}

// Evidence is everything a backend observed during a run, in time order.
type Evidence struct {
	// Start is the beginning of the run (t = 0) and Until the moment the snapshot was taken.
	Start, Until time.Time
	// Paths maps path labels (PathVolume, PathStaging) to the host paths of this run.
	Paths map[string]string
	// Kubelet is the version of the kubelet the run was on (the node's, or the one the local backend models).
	Kubelet KubeletVersion
	// Events in time order.
	Events []Event
	// Stored are the objects the backend read from the volume's storage after the steps (StorageReader).
	Stored []Stored `json:"stored,omitempty"`
}

// Sort orders the events by time, keeping the order of simultaneous events.
func (ev *Evidence) Sort() {
	sort.SliceStable(ev.Events, func(i, j int) bool { return ev.Events[i].Time.Before(ev.Events[j].Time) })
}

// First returns the first event at or after t that matches f.
func (ev *Evidence) First(after time.Time, f func(Event) bool) (Event, bool) {
	for _, e := range ev.Events {
		if !e.Time.Before(after) && f(e) {
			return e, true
		}
	}
	return Event{}, false
}

// Last returns the last event matching f.
func (ev *Evidence) Last(f func(Event) bool) (Event, bool) {
	for i := len(ev.Events) - 1; i >= 0; i-- {
		if f(ev.Events[i]) {
			return ev.Events[i], true
		}
	}
	return Event{}, false
}

// Count counts the events at or after t that match f.
func (ev *Evidence) Count(after time.Time, f func(Event) bool) int {
	n := 0
	for _, e := range ev.Events {
		if !e.Time.Before(after) && f(e) {
			n++
		}
	}
	return n
}

// Since formats t relative to the start of the run.
func (ev *Evidence) Since(t time.Time) string {
	return fmt.Sprintf("t+%.2fs", t.Sub(ev.Start).Seconds())
}

// KillTime is when a step first killed a component.
func (ev *Evidence) KillTime() (time.Time, bool) {
	e, ok := ev.firstKill()
	return e.Time, ok
}

// firstKill is the first disruption a step caused: a component killed, or replaced by a new build.
func (ev *Evidence) firstKill() (Event, bool) {
	return ev.First(time.Time{}, func(e Event) bool { return e.Kind == KKilled || e.Kind == KUpgraded })
}

// PluginBackTime is when the component killed first served again after the kill.
func (ev *Evidence) PluginBackTime() (time.Time, bool) {
	k, ok := ev.firstKill()
	if !ok {
		return time.Time{}, false
	}
	e, ok := ev.First(k.Time, func(e Event) bool { return e.Kind == KReady && e.Component == k.Component })
	return e.Time, ok
}

// RestartTime is when the component killed first was started again after the kill.
func (ev *Evidence) RestartTime() (time.Time, bool) {
	k, ok := ev.firstKill()
	if !ok {
		return time.Time{}, false
	}
	e, ok := ev.First(k.Time, func(e Event) bool { return e.Kind == KStarted && e.Component == k.Component })
	return e.Time, ok
}

// VolumeRestoredTime is when stat of the volume dir first succeeded again after having failed after the kill.
func (ev *Evidence) VolumeRestoredTime() (time.Time, bool) {
	k, ok := ev.KillTime()
	if !ok {
		return time.Time{}, false
	}
	bad, ok := ev.First(k, func(e Event) bool { return e.Kind == KProbe && e.Path == PathVolume && e.Errno != "" })
	if !ok {
		return time.Time{}, false
	}
	good, ok := ev.First(bad.Time, func(e Event) bool { return e.Kind == KProbe && e.Path == PathVolume && e.Errno == "" })
	return good.Time, ok
}

// IsFailure reports an event that shows container c in trouble: a failed open/read, a non-zero exit or a
// failed start.
func IsFailure(c string) func(Event) bool {
	return func(e Event) bool {
		if e.Container != c {
			return false
		}
		switch {
		case e.IsWorkloadError():
			return true
		case e.Kind == KContainerExited && e.ExitCode != nil && *e.ExitCode != 0:
			return true
		case e.Kind == KStartFailed:
			return true
		}
		return false
	}
}

// FirstFailureAfterKill is container c's first failure after the plugin was killed.
func (ev *Evidence) FirstFailureAfterKill(c string) (Event, bool) {
	k, ok := ev.KillTime()
	if !ok {
		return Event{}, false
	}
	return ev.First(k, IsFailure(c))
}

// Recovery is container c's first good read (a writer's: acknowledged write) after its first failure after
// the kill.
func (ev *Evidence) Recovery(c string) (Event, bool) {
	f, ok := ev.FirstFailureAfterKill(c)
	if !ok {
		return Event{}, false
	}
	return ev.First(f.Time, func(e Event) bool { return e.Container == c && e.IsGoodIO() })
}

// Starts counts the successful starts of container c (restart count + 1).
func (ev *Evidence) Starts(c string) int {
	return ev.Count(time.Time{}, func(e Event) bool { return e.Container == c && e.Kind == KContainerStarted })
}

// Measures are the times a run is judged by.
type Measures struct {
	// KillToError: plugin kill → the first container's first ENOTCONN in its log (0 if none).
	KillToError time.Duration
	// FirstErrno and KillToFirstError: the first container's first failed open or read after the kill, whatever
	// its errno (a read inside a dying server gets ECONNABORTED, an aborted connection too), and when.
	FirstErrno       string
	KillToFirstError time.Duration
	// KillToRecovery: plugin kill → the first container's first good read (a writer's: acknowledged write)
	// after its failure (0 if none).
	KillToRecovery time.Duration
	// KillToRestore: plugin kill → stat of the volume dir succeeds again (0 if never).
	KillToRestore time.Duration
	// Failed: the first container failed after the kill; VolumeDied: a stat of the volume dir failed after
	// it. Without them a zero KillToRecovery or KillToRestore means there was nothing to recover from.
	Failed, VolumeDied bool
	// Stall is the longest open, read or write of any container that ended after the kill: how long a component's
	// death kept a workload waiting where it did not fail (0 without a kill).
	Stall time.Duration
	// SidecarToServe and SidecarToRead (pods with a FUSE sidecar): the sidecar's first start → it received the
	// descriptor, and → the first container's first good read; until then every access to the mount waited
	// (sidecar-late). 0 if it did not happen.
	SidecarToServe, SidecarToRead time.Duration
	// Wall is the whole run, setup and teardown included (set by the runner).
	Wall time.Duration
	// Lost is what the storage lacks of a writer's acknowledged pieces (workload.CheckDurable), when the first
	// container writes and its objects were read from the storage; zero when nothing is lost or it was not read.
	Lost workload.Loss
}

// Measure computes the measures for the pod's first container, primary.
func (ev *Evidence) Measure(primary string) Measures {
	var m Measures
	if started, served, read := ev.SidecarServes(primary); !started.IsZero() {
		if !served.IsZero() {
			m.SidecarToServe = served.Sub(started)
		}
		if !read.IsZero() {
			m.SidecarToRead = read.Sub(started)
		}
	}
	k, ok := ev.KillTime()
	if !ok {
		return m
	}
	if e, ok := ev.First(k, func(e Event) bool {
		return e.Container == primary && e.IsWorkloadError() && e.Errno == "ENOTCONN"
	}); ok {
		m.KillToError = e.Time.Sub(k)
	}
	if e, ok := ev.Recovery(primary); ok {
		m.KillToRecovery = e.Time.Sub(k)
	}
	if e, ok := ev.First(k, func(e Event) bool { return e.Container == primary && e.IsWorkloadError() }); ok {
		m.FirstErrno, m.KillToFirstError = e.Errno, e.Time.Sub(k)
	}
	_, m.Failed = ev.FirstFailureAfterKill(primary)
	if t, ok := ev.VolumeRestoredTime(); ok {
		m.KillToRestore = t.Sub(k)
	}
	_, m.VolumeDied = ev.First(k, func(e Event) bool { return e.Kind == KProbe && e.Path == PathVolume && e.Errno != "" })
	for _, e := range ev.Events {
		if e.Source == SrcWorkload && !e.Time.Before(k) && e.Latency > m.Stall {
			m.Stall = e.Latency
		}
	}
	m.Lost = ev.lost(primary)
	return m
}

// lost is what the storage lacks of writer container c's acknowledged pieces (durableLoss); zero when c wrote
// nothing, its objects were not read, or the storage differs otherwise (its check says how).
func (ev *Evidence) lost(c string) workload.Loss {
	if _, ok := ev.StoredObject(c, Container{Name: c}.WrittenObject()); !ok {
		return workload.Loss{} // not a writer, or its storage was not read: no need to go through the log
	}
	loss, _, _, why := ev.durableLoss(c)
	if why != "" {
		return workload.Loss{}
	}
	return loss
}

// SidecarServes returns the first start of the pod's FUSE sidecar, when it first received the descriptor after
// that, and container c's first good read in the run; a zero time for what did not happen.
func (ev *Evidence) SidecarServes(c string) (started, served, read time.Time) {
	isSidecar := func(k Kind) func(Event) bool {
		return func(e Event) bool { return e.Component == topology.SidecarContainer && e.Kind == k }
	}
	s, ok := ev.First(time.Time{}, isSidecar(KStarted))
	if !ok {
		return
	}
	started = s.Time
	if e, ok := ev.First(started, isSidecar(KReady)); ok {
		served = e.Time
	}
	if e, ok := ev.First(time.Time{}, func(e Event) bool { return e.Container == c && e.IsGoodRead() }); ok {
		read = e.Time
	}
	return
}

// ParseWorkloadLine turns one line of the workload's JSON log (a contract.WorkloadRecord) into an event of container c,
// instance n. A line that is not a JSON object with a time and an event becomes a KLog event stamped now, so
// that nothing the workload said is lost.
func ParseWorkloadLine(line []byte, c string, n int, now time.Time) Event {
	var r contract.WorkloadRecord
	if err := json.Unmarshal(line, &r); err != nil || r.Event == "" || r.Time.IsZero() {
		return Event{Time: now, Source: SrcWorkload, Kind: KLog, Container: c, Instance: n, Message: string(line)}
	}
	e := Event{
		Time: r.Time, Source: SrcWorkload, Kind: Kind(r.Event), Container: c, Instance: n,
		Errno: deref(r.Errno), Path: r.File, Content: deref(r.Content),
		Latency: time.Duration(deref(r.LatencyUS)) * time.Microsecond,
		Seq:     r.Seq, Offset: r.Offset, Bytes: r.Bytes, SHA256: r.SHA256, Op: r.Op,
	}
	switch e.Kind {
	case KReadError, KOpenError, KWriteError, KClose:
		e.Message = r.Error
	case KWorkloadExit:
		e.ExitCode = r.Code
		e.Message = r.Reason
	case KWorkloadStart:
		e.Message = fmt.Sprintf("keep_open=%v exit_on_error=%v interval=%s", deref(r.KeepOpen), deref(r.ExitOnError), r.Interval)
	}
	return e
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// IntPtr returns a pointer to v (for Event.ExitCode).
func IntPtr(v int) *int { return &v }
