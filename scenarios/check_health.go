package scenarios

import (
	"fmt"
	"time"
)

// HealthPeriod is kubelet's volumeStatsAggPeriod in the VolumeHealth rows: how often it asks the plugin about
// the volume's health (default 1 min; the from-source cluster sets it with VOLUME_STATS_AGG_PERIOD).
const HealthPeriod = 2 * time.Second

// VolumeHealthManagerIn is the first kubelet that reports volume health with its volume health manager
// (NodeGetVolumeHealth → pod.status.volumeHealth) instead of an event from NodeGetVolumeStats
// (pkg/kubelet/volumemanager/volumehealth/).
const VolumeHealthManagerIn = "v1.37.0"

// ReasonVolumeConditionAbnormal is the reason of kubelet's Warning event for an abnormal VolumeCondition, up to
// v1.36 (pkg/kubelet/server/stats/volume_stat_calculator.go).
const ReasonVolumeConditionAbnormal = "VolumeConditionAbnormal"

// HealthReported holds when kubelet reports the dead volume within Within of the anchor After, and reported
// nothing before the kill, while the volume was healthy: with Status, a condition in pod.status.volumeHealth
// (kubelet v1.37); without, a VolumeConditionAbnormal Warning event on the pod (kubelet up to v1.36). Only the
// plugin can answer kubelet's question, so the anchor is when it serves again, not the kill.
type HealthReported struct {
	Status bool
	After  Anchor
	Within Dur
}

func (c HealthReported) how() string {
	if c.Status {
		return "a condition in pod.status.volumeHealth"
	}
	return "a " + ReasonVolumeConditionAbnormal + " Warning event on the pod"
}

func (c HealthReported) report(e Event) bool {
	if c.Status {
		return e.Kind == KVolumeHealth && e.Message != ""
	}
	return e.Kind == KPodEvent && e.Source == SrcKubelet && e.Detail == ReasonVolumeConditionAbnormal
}

func (c HealthReported) Describe() string {
	return fmt.Sprintf("kubelet reports the dead volume within %s %s (%s), and nothing while it was healthy", c.Within, c.After.phrase(), c.how())
}

func (c HealthReported) Label() string { return "until kubelet reports the volume" }

func (c HealthReported) Containers() []string { return nil }

func (c HealthReported) Eval(ev *Evidence, t Timing) Result {
	kill, ok := ev.KillTime()
	if !ok {
		return Result{Why: "no kill in the evidence"}
	}
	if e, ok := ev.First(time.Time{}, c.report); ok && e.Time.Before(kill) {
		return Result{Why: "reported while the volume was healthy: " + cite(ev, e) + ": " + e.Message}
	}
	from, why := c.After.resolve(ev)
	if why != "" {
		return Result{Why: why}
	}
	e, ok := ev.First(kill, c.report)
	if !ok {
		return Result{Why: "no report: " + c.how() + " never appeared after the kill"}
	}
	if d := e.Time.Sub(from); d > c.Within.Resolve(t) {
		return Result{Why: fmt.Sprintf("reported %.2fs %s, later than %s: %s", d.Seconds(), c.After.phrase(), c.Within.Explain(t), e.Message)}
	}
	return Result{OK: true, Why: fmt.Sprintf("%s at %s: %s", c.how(), at(ev, e.Time), e.Message)}
}

// PodEvent holds when an event with Reason is recorded on the workload pod after the kill (None: when none is).
type PodEvent struct {
	Reason string
	None   bool
}

func (c PodEvent) Describe() string {
	if c.None {
		return fmt.Sprintf("no %s event on the pod after the kill", c.Reason)
	}
	return fmt.Sprintf("a %s event is recorded on the pod after the kill", c.Reason)
}

func (c PodEvent) Label() string { return "until the " + c.Reason + " event" }

func (c PodEvent) Containers() []string { return nil }

func (c PodEvent) Eval(ev *Evidence, _ Timing) Result {
	kill, ok := ev.KillTime()
	if !ok {
		return Result{Why: "no kill in the evidence"}
	}
	e, found := ev.First(kill, func(e Event) bool { return e.Kind == KPodEvent && e.Detail == c.Reason })
	switch {
	case found && c.None:
		return Result{Why: fmt.Sprintf("%s by the %s at %s: %s", c.Reason, e.Source, at(ev, e.Time), e.Message)}
	case found:
		return Result{OK: true, Why: fmt.Sprintf("%s by the %s at %s: %s", c.Reason, e.Source, at(ev, e.Time), e.Message)}
	case c.None:
		return Result{OK: true, Why: fmt.Sprintf("no %s event in %.2fs after the kill", c.Reason, ev.Until.Sub(kill).Seconds())}
	}
	return Result{Why: fmt.Sprintf("no %s event after the kill", c.Reason)}
}
