package remediate

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/restore"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/state"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/contract"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/kubeletpath"
)

const (
	node    = "node-a"
	kubelet = "/var/lib/kubelet"
	grace   = 2 * time.Minute
	limit   = 10 * time.Minute
)

// t0 is when the plugin first published the test volumes; containers start a little later.
var t0 = time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)

// fakeHealth answers like the plugin: a problem per target, or an error for targets it cannot say anything on.
type fakeHealth struct {
	problems map[string]string
	errs     map[string]error
	calls    int
}

func (f *fakeHealth) Problem(_ context.Context, _, target string) (string, error) {
	f.calls++
	return f.problems[target], f.errs[target]
}

// world is one node: the plugin's records, the API objects and the remediator's clock.
type world struct {
	t      testing.TB
	client *fake.Clientset
	// owners holds the pods' controllers (what the metadata client reads).
	owners *metadatafake.FakeMetadataClient
	health *fakeHealth
	store  *state.Store
	now    time.Time
	r      *Remediator
}

func newWorld(t testing.TB, kubeletVersion string, edit func(*Config), objs ...*corev1.Pod) *world {
	t.Helper()
	w := &world{t: t, health: &fakeHealth{problems: map[string]string{}, errs: map[string]error{}}, now: t0.Add(time.Hour)}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}, Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{KubeletVersion: kubeletVersion}}}
	w.client = fake.NewClientset(n)
	w.owners = ownersOf(t, objs...)
	for _, p := range objs {
		if _, err := w.client.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	var err error
	if w.store, err = state.Open(dir); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Client: w.client.CoreV1(), Owners: w.owners, NodeName: node, KubeletDir: kubelet, StateDir: dir, Health: w.health, Strategy: restore.Rebind,
		Grace: grace, RateLimit: limit, Now: func() time.Time { return w.now }}
	if edit != nil {
		edit(&cfg)
	}
	if w.r, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	return w
}

// ownersOf is a metadata API in which each pod's controller exists, as it does for pods that a controller made.
func ownersOf(t testing.TB, pods ...*corev1.Pod) *metadatafake.FakeMetadataClient {
	t.Helper()
	scheme := metadatafake.NewTestScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := metadatafake.NewSimpleMetadataClient(scheme)
	for _, p := range pods {
		if ref := metav1.GetControllerOf(p); ref != nil {
			o := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: ref.APIVersion, Kind: ref.Kind},
				ObjectMeta: metav1.ObjectMeta{Name: ref.Name, Namespace: p.Namespace, UID: ref.UID}}
			if err := c.Tracker().Add(o); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
		}
	}
	return c
}

// published records that the plugin (last) mounted volume vol for pod's volume specName at mountedAt.
func (w *world) published(pod *corev1.Pod, specName, vol string, mountedAt time.Time) string {
	w.t.Helper()
	target := kubeletpath.Target(kubelet, string(pod.UID), specName)
	if err := w.store.PutPublish(state.Publish{VolumeID: vol, StagingPath: kubeletpath.Staging(kubelet, "d", vol), TargetPath: target, FuseMode: "child", Time: mountedAt}); err != nil {
		w.t.Fatal(err)
	}
	return target
}

func (w *world) pass() {
	w.t.Helper()
	if err := w.r.Pass(context.Background()); err != nil {
		w.t.Fatalf("pass: %v", err)
	}
}

func (w *world) podExists(p *corev1.Pod) bool {
	_, err := w.client.CoreV1().Pods(p.Namespace).Get(context.Background(), p.Name, metav1.GetOptions{})
	return err == nil
}

func (w *world) events(p *corev1.Pod) []corev1.Event {
	w.t.Helper()
	l, err := w.client.CoreV1().Events(p.Namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	var out []corev1.Event
	for _, e := range l.Items {
		if e.InvolvedObject.UID == p.UID {
			out = append(out, e)
		}
	}
	return out
}

type podOpt func(*corev1.Pod)

func ownedBy(apiVersion, kind string) podOpt {
	return func(p *corev1.Pod) {
		yes := true
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: "owner", UID: "owner-uid", Controller: &yes}}
	}
}

// startedAt makes the reader container run since at.
func startedAt(at time.Time) podOpt {
	return func(p *corev1.Pod) {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "reader", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(at)}}}}
	}
}

// pod is a running pod on the node whose container "reader" mounts the inline CSI volume "data".
func pod(name string, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Volumes:    []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "dummy-fuse-csi"}}}},
			Containers: []corev1.Container{{Name: "reader", VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	startedAt(t0.Add(time.Second))(p)
	for _, o := range opts {
		o(p)
	}
	return p
}

// repaired: the plugin re-mounted the target 10 minutes ago, after the container had started.
var repaired = t0.Add(50 * time.Minute)

func TestControllerOwnedPodIsDeleted(t *testing.T) {
	for _, owner := range []struct{ apiVersion, kind string }{{"apps/v1", "ReplicaSet"}, {"apps/v1", "StatefulSet"}, {"apps/v1", "DaemonSet"}, {"batch/v1", "Job"}} {
		t.Run(owner.kind, func(t *testing.T) {
			p := pod("web", ownedBy(owner.apiVersion, owner.kind))
			w := newWorld(t, "v1.36.3", nil, p)
			w.published(p, "data", "vol-1", repaired)
			w.pass()
			if w.podExists(p) {
				t.Fatal("the pod is still there")
			}
			ev := w.events(p)
			if len(ev) != 1 || ev[0].Reason != contract.ReasonDeleted || ev[0].Type != corev1.EventTypeNormal || !strings.Contains(ev[0].Message, "container reader") {
				t.Fatalf("events %+v; want one Normal %s naming the container", ev, contract.ReasonDeleted)
			}
		})
	}
}

func TestBarePodGetsAnEventAndStays(t *testing.T) {
	for name, opt := range map[string]podOpt{
		"bare":       func(*corev1.Pod) {},
		"deployment": ownedBy("apps/v1", "Deployment"),        // pods are never owned by one directly
		"foreign":    ownedBy("example.com/v1", "ReplicaSet"), // not the apps ReplicaSet
	} {
		t.Run(name, func(t *testing.T) {
			p := pod("bare", opt)
			w := newWorld(t, "v1.36.3", nil, p)
			w.published(p, "data", "vol-1", repaired)
			w.pass()
			if !w.podExists(p) {
				t.Fatal("a pod that nothing recreates was deleted")
			}
			ev := w.events(p)
			if len(ev) != 1 || ev[0].Reason != contract.ReasonLeftAlone || ev[0].Type != corev1.EventTypeWarning ||
				!strings.Contains(ev[0].Message, "Left alone") || !strings.Contains(ev[0].Message, "still holds the mount of volume vol-1") {
				t.Fatalf("events %+v; want one Warning %s saying why", ev, contract.ReasonLeftAlone)
			}
		})
	}
}

// TestOwnerMustExist: a pod's controller reference is only a claim, written by whoever created the pod; the
// remediator deletes the pod only when that controller exists (same UID) and is not being deleted itself, as the
// garbage collector and the controllers judge an owner.
func TestOwnerMustExist(t *testing.T) {
	rs := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "replicasets"}
	for name, tc := range map[string]struct {
		owner func(w *world, o *metav1.PartialObjectMetadata) // changes the owner in the API
		why   string                                          // what the event must say
	}{
		"missing": {owner: func(w *world, o *metav1.PartialObjectMetadata) {
			if err := w.owners.Tracker().Delete(rs, o.Namespace, o.Name); err != nil {
				w.t.Fatal(err)
			}
		}, why: "does not exist"},
		"other UID": {owner: func(w *world, o *metav1.PartialObjectMetadata) {
			o.UID = "another-owner-uid"
			if err := w.owners.Tracker().Update(rs, o, o.Namespace); err != nil {
				w.t.Fatal(err)
			}
		}, why: "does not exist"},
		"being deleted": {owner: func(w *world, o *metav1.PartialObjectMetadata) {
			now := metav1.NewTime(t0)
			o.DeletionTimestamp = &now
			if err := w.owners.Tracker().Update(rs, o, o.Namespace); err != nil {
				w.t.Fatal(err)
			}
		}, why: "is being deleted"},
	} {
		t.Run(name, func(t *testing.T) {
			p := pod("web", ownedBy("apps/v1", "ReplicaSet"))
			w := newWorld(t, "v1.36.3", nil, p)
			obj, err := w.owners.Tracker().Get(rs, p.Namespace, "owner")
			if err != nil {
				t.Fatal(err)
			}
			tc.owner(w, obj.(*metav1.PartialObjectMetadata).DeepCopy())
			w.published(p, "data", "vol-1", repaired)
			w.pass()
			if !w.podExists(p) {
				t.Fatal("deleted a pod whose controller will not recreate it")
			}
			ev := w.events(p)
			if len(ev) != 1 || ev[0].Reason != contract.ReasonLeftAlone || !strings.Contains(ev[0].Message, "ReplicaSet/owner "+tc.why) {
				t.Fatalf("events %+v; want one %s saying that ReplicaSet/owner %s", ev, contract.ReasonLeftAlone, tc.why)
			}
		})
	}
}

// TestNoDecisionWithoutTheOwner: when the owner cannot be read, the pass fails for that pod and nothing is done
// (nor counted against the rate limit).
func TestNoDecisionWithoutTheOwner(t *testing.T) {
	p := pod("web", ownedBy("apps/v1", "ReplicaSet"))
	w := newWorld(t, "v1.36.3", nil, p)
	w.published(p, "data", "vol-1", repaired)
	w.owners.PrependReactor("get", "replicasets", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("apiserver is restarting")
	})
	if err := w.r.Pass(context.Background()); err == nil || !strings.Contains(err.Error(), "ReplicaSet/owner") {
		t.Fatalf("pass: %v, want an error naming the owner it could not read", err)
	}
	if !w.podExists(p) || len(w.events(p)) != 0 {
		t.Fatal("acted without reading the owner")
	}
	w.owners.ReactionChain = w.owners.ReactionChain[1:]
	w.pass()
	if w.podExists(p) {
		t.Fatal("not deleted once the owner could be read")
	}
}

func TestRateLimit(t *testing.T) {
	p := pod("bare")
	w := newWorld(t, "v1.36.3", nil, p)
	w.published(p, "data", "vol-1", repaired)
	w.pass()
	w.now = w.now.Add(limit - time.Second)
	w.pass()
	if n := len(w.events(p)); n != 1 {
		t.Fatalf("%d events within the rate limit, want 1", n)
	}
	w.now = w.now.Add(2 * time.Second)
	w.pass()
	if n := len(w.events(p)); n != 2 {
		t.Fatalf("%d events after the rate limit, want 2", n)
	}
}

func TestGracePeriod(t *testing.T) {
	p := pod("web", ownedBy("apps/v1", "ReplicaSet"))
	w := newWorld(t, "v1.36.3", nil, p)
	w.published(p, "data", "vol-1", w.now.Add(-grace+time.Second)) // re-mounted just under the grace period ago
	w.pass()
	if !w.podExists(p) || len(w.events(p)) != 0 {
		t.Fatal("acted within the grace period")
	}
	w.now = w.now.Add(time.Second)
	w.pass()
	if w.podExists(p) {
		t.Fatal("not deleted once the grace period was over")
	}
}

func TestDryRunChangesNothing(t *testing.T) {
	owned, bare := pod("web", ownedBy("apps/v1", "ReplicaSet")), pod("bare")
	w := newWorld(t, "v1.36.3", func(c *Config) { c.DryRun = true }, owned, bare)
	w.published(owned, "data", "vol-1", repaired)
	w.published(bare, "data", "vol-2", repaired)
	w.pass()
	if !w.podExists(owned) || !w.podExists(bare) || len(w.events(owned))+len(w.events(bare)) != 0 {
		t.Fatal("a dry run deleted a pod or recorded an event")
	}
	for _, a := range w.client.Actions() {
		if a.GetVerb() != "get" && a.GetVerb() != "list" && a.GetVerb() != "create" || a.GetVerb() == "create" && a.GetResource().Resource != "pods" {
			t.Errorf("dry run made a %s of %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
}

func TestHealthyPodsAreLeftAlone(t *testing.T) {
	hostToContainer := corev1.MountPropagationHostToContainer
	for name, tc := range map[string]struct {
		p        *corev1.Pod
		strategy restore.Strategy
	}{
		// The container started after the plugin's last mount of the target: it has the good mount.
		"started after the mount": {p: pod("web", ownedBy("apps/v1", "ReplicaSet"), startedAt(repaired.Add(time.Second))), strategy: restore.Rebind},
		// The stack strategy's new mount reaches a container whose mount propagates from the host.
		"stack with HostToContainer": {p: pod("web", ownedBy("apps/v1", "ReplicaSet"), func(p *corev1.Pod) {
			p.Spec.Containers[0].VolumeMounts[0].MountPropagation = &hostToContainer
		}), strategy: restore.Stack},
		// Another volume of the pod was re-mounted; the container does not mount it.
		"container without the volume": {p: pod("web", ownedBy("apps/v1", "ReplicaSet"), func(p *corev1.Pod) {
			p.Spec.Containers[0].VolumeMounts = nil
		}), strategy: restore.Rebind},
	} {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t, "v1.36.3", func(c *Config) { c.Strategy = tc.strategy }, tc.p)
			w.published(tc.p, "data", "vol-1", repaired)
			w.pass()
			if !w.podExists(tc.p) || len(w.events(tc.p)) != 0 {
				t.Fatalf("acted on a pod that sees a healthy volume")
			}
			if w.health.calls == 0 {
				t.Fatal("the plugin was never asked")
			}
		})
	}
}

// TestSetnsRepairTellsApart: under the setns strategy, a running container that started before the repair
// was re-bound inside when the record says the pass after the repair replaced every dead copy it found; the
// pod is left alone then, and deleted as under rebind when the pass failed on a copy or did not run.
func TestSetnsRepairTellsApart(t *testing.T) {
	for name, tc := range map[string]struct {
		reattached  *state.Reattached
		wantDeleted bool
	}{
		"every copy re-bound":           {reattached: &state.Reattached{Namespaces: 1, Replaced: 2}},
		"one copy not re-bound":         {reattached: &state.Reattached{Namespaces: 1, Replaced: 1, Failed: 1, Error: "1 of 2 dead mounts in running containers not replaced"}, wantDeleted: true},
		"the pass could not list /proc": {reattached: &state.Reattached{Error: "listing processes: permission denied"}, wantDeleted: true},
		"no pass recorded":              {wantDeleted: true},
	} {
		t.Run(name, func(t *testing.T) {
			p := pod("web", ownedBy("apps/v1", "ReplicaSet"))
			w := newWorld(t, "v1.37.2", func(c *Config) { c.Strategy = restore.Setns }, p)
			target := kubeletpath.Target(kubelet, string(p.UID), "data")
			if err := w.store.PutPublish(state.Publish{VolumeID: "vol-1", StagingPath: kubeletpath.Staging(kubelet, "d", "vol-1"), TargetPath: target,
				FuseMode: "child", Time: repaired, Reattached: tc.reattached}); err != nil {
				t.Fatal(err)
			}
			w.pass()
			if w.health.calls == 0 {
				t.Fatal("the plugin was never asked")
			}
			if deleted := !w.podExists(p); deleted != tc.wantDeleted {
				t.Fatalf("deleted %v, want %v (events %+v)", deleted, tc.wantDeleted, w.events(p))
			}
		})
	}
}

// TestSetnsSubPathOnOldKubelet: on a kubelet without the subPath fix, a subPath container that setns re-bound
// while it ran is left alone; once it restarted onto kubelet's dead subPath bind (which setns does not touch),
// the pod is deleted.
func TestSetnsSubPathOnOldKubelet(t *testing.T) {
	subPath := func(p *corev1.Pod) { p.Spec.Containers[0].VolumeMounts[0].SubPath = "sub" }
	stuck := func(p *corev1.Pod) {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "reader", RestartCount: 1,
			State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError"}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{StartedAt: metav1.NewTime(t0.Add(time.Second))}}}}
	}
	for name, tc := range map[string]struct {
		p           *corev1.Pod
		wantDeleted bool
	}{
		"running, re-bound":           {p: pod("web", ownedBy("apps/v1", "StatefulSet"), subPath)},
		"restarted onto the old bind": {p: pod("web", ownedBy("apps/v1", "StatefulSet"), subPath, stuck), wantDeleted: true},
	} {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t, "v1.36.3", func(c *Config) { c.Strategy = restore.Setns }, tc.p)
			target := kubeletpath.Target(kubelet, string(tc.p.UID), "data")
			if err := w.store.PutPublish(state.Publish{VolumeID: "vol-1", StagingPath: kubeletpath.Staging(kubelet, "d", "vol-1"), TargetPath: target,
				FuseMode: "child", Time: repaired, Reattached: &state.Reattached{Namespaces: 1, Replaced: 2}}); err != nil {
				t.Fatal(err)
			}
			w.pass()
			if deleted := !w.podExists(tc.p); deleted != tc.wantDeleted {
				t.Fatalf("deleted %v, want %v (events %+v)", deleted, tc.wantDeleted, w.events(tc.p))
			}
		})
	}
}

func TestUnhealthyTargetAfterGrace(t *testing.T) {
	p := pod("web", ownedBy("apps/v1", "ReplicaSet"))
	w := newWorld(t, "v1.37.2", nil, p)
	target := w.published(p, "data", "vol-1", t0)
	w.health.problems[target] = "INACCESSIBLE FuseServerGone: FUSE mount of volume vol-1 is not answering"
	w.pass() // first seen unhealthy now
	if !w.podExists(p) {
		t.Fatal("deleted at first sight")
	}
	// Healthy again in between: the clock restarts.
	w.now = w.now.Add(time.Minute)
	delete(w.health.problems, target)
	w.pass()
	w.health.problems[target] = "INACCESSIBLE FuseServerGone: gone"
	w.now = w.now.Add(time.Minute)
	w.pass()
	w.now = w.now.Add(grace - time.Second)
	w.pass()
	if !w.podExists(p) {
		t.Fatal("deleted before the target was unhealthy for the grace period")
	}
	w.now = w.now.Add(time.Second)
	w.pass()
	if w.podExists(p) {
		t.Fatal("not deleted after the target was unhealthy for the grace period")
	}
}

func TestNoDecisionWithoutAnAnswer(t *testing.T) {
	p := pod("web", ownedBy("apps/v1", "ReplicaSet"))
	w := newWorld(t, "v1.36.3", nil, p)
	target := w.published(p, "data", "vol-1", repaired)
	w.health.errs[target] = errors.New("connection refused")
	w.pass()
	if !w.podExists(p) || len(w.events(p)) != 0 {
		t.Fatal("acted without the plugin's answer")
	}
}

func TestSubPathOnOldKubelet(t *testing.T) {
	// The container restarted after the repair but is stuck: its subPath bind is the old one.
	waiting := func(p *corev1.Pod) {
		p.Spec.Containers[0].VolumeMounts[0].SubPath = "sub"
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "reader", RestartCount: 3,
			State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError"}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{StartedAt: metav1.NewTime(t0.Add(time.Second))}}}}
	}
	for kubeletVersion, wantDeleted := range map[string]bool{"v1.33.13": true, "v1.36.3": true, "v1.37.2": false, "bogus": false} {
		t.Run(kubeletVersion, func(t *testing.T) {
			p := pod("web", ownedBy("apps/v1", "StatefulSet"), waiting)
			w := newWorld(t, kubeletVersion, nil, p)
			w.published(p, "data", "vol-1", repaired)
			w.pass()
			if deleted := !w.podExists(p); deleted != wantDeleted {
				t.Fatalf("kubelet %s: deleted %v, want %v", kubeletVersion, deleted, wantDeleted)
			}
		})
	}
}

func TestClaimVolumes(t *testing.T) {
	p := pod("web", ownedBy("apps/v1", "ReplicaSet"), func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{
			{Name: "other", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "claim-other"}}},
			{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "claim-data"}}},
		}
	})
	w := newWorld(t, "v1.36.3", nil, p)
	for claim, pv := range map[string]string{"claim-other": "pv-other", "claim-data": "pv-data"} {
		c := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: claim, Namespace: "ns"}, Spec: corev1.PersistentVolumeClaimSpec{VolumeName: pv}}
		if _, err := w.client.CoreV1().PersistentVolumeClaims("ns").Create(context.Background(), c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// pv-other was re-mounted, but the container mounts only "data" (pv-data): nothing to do.
	w.published(p, "pv-other", "vol-other", repaired)
	w.published(p, "pv-data", "vol-data", t0)
	w.pass()
	if !w.podExists(p) {
		t.Fatal("deleted for a volume its container does not mount")
	}
	w.published(p, "pv-data", "vol-data", repaired)
	w.pass()
	if w.podExists(p) {
		t.Fatal("not deleted for its re-mounted claim")
	}
}

func TestNewRefusesIncompleteConfig(t *testing.T) {
	good := Config{Client: fake.NewClientset().CoreV1(), Owners: ownersOf(t), NodeName: node, StateDir: "/x", Health: &fakeHealth{}}
	for name, edit := range map[string]func(*Config){
		"no node":        func(c *Config) { c.NodeName = "" },
		"no state":       func(c *Config) { c.StateDir = "" },
		"no client":      func(c *Config) { c.Client = nil },
		"no owners":      func(c *Config) { c.Owners = nil },
		"negative grace": func(c *Config) { c.Grace = -time.Second },
	} {
		c := good
		edit(&c)
		if _, err := New(c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := New(good); err != nil {
		t.Errorf("complete config refused: %v", err)
	}
}
