package kube

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
)

func TestVolumeHealthConfig(t *testing.T) {
	for _, tc := range []struct {
		configz string
		gate    bool
		period  time.Duration
	}{
		{`{"kubeletconfig":{"featureGates":{"CSIVolumeHealth":true},"volumeStatsAggPeriod":"2s"}}`, true, 2 * time.Second},
		{`{"kubeletconfig":{"featureGates":{"Other":true}}}`, false, time.Minute},
		{`{"kubeletconfig":{}}`, false, time.Minute},
	} {
		gate, period, err := volumeHealthConfig([]byte(tc.configz))
		if err != nil || gate != tc.gate || period != tc.period {
			t.Errorf("%s: %t %s %v, want %t %s", tc.configz, gate, period, err, tc.gate, tc.period)
		}
	}
	if _, _, err := volumeHealthConfig([]byte("not json")); err == nil {
		t.Error("no error for a bad answer")
	}
}

// TestObserveVolumeHealth: a change of the claim's volume's conditions is recorded once; other volumes and
// repeats are not, and a pod seen healthy first records nothing.
func TestObserveVolumeHealth(t *testing.T) {
	b := New(Options{})
	b.rec = &scenarios.Recorder{}
	b.n = names{pvc: "claim"}
	pod := func(uid string, conds ...corev1.VolumeHealthCondition) *corev1.Pod {
		p := &corev1.Pod{}
		p.UID = types.UID(uid)
		p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "claim"}}}}
		p.Status.VolumeHealth = []corev1.PodVolumeHealth{{Name: "data", HealthConditions: conds}, {Name: "other", HealthConditions: []corev1.VolumeHealthCondition{{Status: "Degraded"}}}}
		return p
	}
	dead := corev1.VolumeHealthCondition{Status: corev1.VolumeHealthInaccessible, Reason: "FuseServerGone", Message: "not answering"}
	b.observeVolumeHealth(pod("a"))
	b.observeVolumeHealth(pod("a", dead))
	b.observeVolumeHealth(pod("a", dead))
	b.observeVolumeHealth(pod("a"))
	var got []string
	for _, e := range b.rec.Snapshot().Events {
		if e.Kind == scenarios.KVolumeHealth {
			got = append(got, e.Message)
		}
	}
	want := []string{"Inaccessible FuseServerGone: not answering", ""}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("recorded %q, want %q", got, want)
	}
}

// TestVolumeHealthRunnable: a kubelet without the gate or with another period makes health-report not
// runnable (not a failure), with the command that makes it runnable.
func TestVolumeHealthRunnable(t *testing.T) {
	if err := volumeHealthRunnable("n1", true, scenarios.HealthPeriod); err != nil {
		t.Errorf("gate on, period %s: %v", scenarios.HealthPeriod, err)
	}
	for _, tc := range []struct {
		gate   bool
		period time.Duration
	}{{false, scenarios.HealthPeriod}, {true, time.Minute}, {false, time.Minute}} {
		err := volumeHealthRunnable("n1", tc.gate, tc.period)
		var nr *scenarios.NotRunnableError
		if !errors.As(err, &nr) {
			t.Errorf("gate %t period %s: %v, want a *scenarios.NotRunnableError", tc.gate, tc.period, err)
			continue
		}
		if !strings.Contains(nr.Why, "node n1") || !strings.Contains(nr.Fix, "make cluster-up") {
			t.Errorf("gate %t period %s: %q", tc.gate, tc.period, err)
		}
		o := &scenarios.Outcome{Err: fmt.Errorf("setup: %w", err)}
		if o.Passed() || o.Result() != "NOT RUNNABLE" {
			t.Errorf("an outcome with %v: passed %t, result %s; want not passed, NOT RUNNABLE", err, o.Passed(), o.Result())
		}
	}
}
