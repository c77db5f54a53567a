package kube

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
)

// A run's teardown waits for the namespace's pods, not for the namespace controller: podsLeft says NotFound
// only once no pod is left, whatever its phase.
func TestPodsLeft(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plugin", Namespace: "ns"},
		Status: corev1.PodStatus{Phase: corev1.PodSucceeded}})
	if err := podsLeft(ctx, cs.CoreV1().Pods("ns")); err != nil {
		t.Fatalf("podsLeft with a pod = %v, want nil (not gone yet)", err)
	}
	if err := cs.CoreV1().Pods("ns").Delete(ctx, "plugin", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := podsLeft(ctx, cs.CoreV1().Pods("ns")); !apierrors.IsNotFound(err) {
		t.Fatalf("podsLeft without pods = %v, want NotFound", err)
	}
}

// The next run leaves an earlier run's terminating namespace without pods to its controller, and removes the
// leftovers of one that still holds a pod (a crashed run's).
func TestRemoveStaleLeavesFinishedTeardowns(t *testing.T) {
	ctx := context.Background()
	now := metav1.Now()
	ns := func(name string) *corev1.Namespace {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{managedByLabel: managedBy},
			DeletionTimestamp: &now, Finalizers: []string{"kubernetes"}}}
	}
	cs := fake.NewClientset(ns("done"))
	b := &Backend{cs: cs, rec: &scenarios.Recorder{}}
	if err := b.removeStale(ctx); err != nil {
		t.Fatalf("removeStale with a finished teardown's namespace = %v, want nil", err)
	}
	if acts := cs.Actions(); len(acts) != 3 { // list namespaces, list its pods, get the CSIDriver
		t.Errorf("removeStale acted on the finished teardown's namespace: %v", acts)
	}
}
