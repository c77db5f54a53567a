package remediate

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/state"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/contract"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/kubeletpath"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// The other drivers of these tests: one the remediator is told to look after, one it is not.
const (
	s3Driver  = "s3.csi.example.com"
	nfsDriver = "nfs.csi.example.com"
)

// mountedBy writes kubelet's record of pod's CSI volume specName, mounted by driver, as kubelet does before it
// asks the driver to publish, and returns the volume's publish target.
func mountedBy(t testing.TB, root string, pod *corev1.Pod, specName, driver, handle string) string {
	t.Helper()
	dir := filepath.Join(kubeletpath.CSIVolumes(root, string(pod.UID)), specName)
	if err := os.MkdirAll(filepath.Join(dir, "mount"), 0o750); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(map[string]string{"driverName": driver, "volumeHandle": handle, "specVolID": specName,
		"nodeName": node, "volumeLifecycleMode": "Persistent", "attachmentID": "csi-" + handle})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, kubeletpath.VolumeDataFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return kubeletpath.Target(root, string(pod.UID), specName)
}

// driversWorld is a node where the remediator looks after s3Driver's volumes only (no plugin records).
func driversWorld(t *testing.T, pods ...*corev1.Pod) (*world, string, *fakeHealth) {
	root := t.TempDir()
	mountHealth := &fakeHealth{problems: map[string]string{}, errs: map[string]error{}}
	w := newWorld(t, "v1.37.2", func(c *Config) {
		c.StateDir, c.Health, c.KubeletDir = "", nil, root
		c.Drivers, c.Mounts = []string{s3Driver}, mountHealth
	}, pods...)
	return w, root, mountHealth
}

// TestAnotherDriversDeadVolume: the remediator told to look after another driver finds that driver's volumes of
// the node's pods from kubelet's records, asks the mount health source about those only, and applies its rules to
// them: a controller's pod is deleted after the grace period, a bare pod gets a Warning event and stays; a volume
// of a driver it was not told about is never looked at, however dead.
func TestAnotherDriversDeadVolume(t *testing.T) {
	owned := pod("web", ownedBy("apps/v1", "ReplicaSet"))
	bare := pod("bare")
	other := pod("nfs", ownedBy("apps/v1", "ReplicaSet"))
	live := pod("live", ownedBy("apps/v1", "ReplicaSet"))
	w, root, health := driversWorld(t, owned, bare, other, live)
	dead := map[string]string{}
	for _, p := range []*corev1.Pod{owned, bare} {
		target := mountedBy(t, root, p, "pv-"+p.Name, s3Driver, "bucket/"+p.Name)
		health.problems[target] = "FuseServerGone: the FUSE mount of volume bucket/" + p.Name + " answers transport endpoint is not connected"
		dead[p.Name] = target
	}
	nfsTarget := mountedBy(t, root, other, "pv-nfs", nfsDriver, "share")
	health.problems[nfsTarget] = "would be dead, were it looked at"
	mountedBy(t, root, live, "pv-live", s3Driver, "bucket/live")

	w.pass()
	if health.calls != 3 {
		t.Errorf("the mount health source was asked %d times, want 3 (the three volumes of %s)", health.calls, s3Driver)
	}
	if !w.podExists(owned) || len(w.events(bare)) != 0 {
		t.Fatal("acted at first sight, before the grace period")
	}
	w.now = w.now.Add(grace)
	w.pass()
	if w.podExists(owned) {
		t.Errorf("pod %s, whose volume of %s is dead, was not deleted after the grace period", owned.Name, s3Driver)
	}
	evs := w.events(bare)
	if len(evs) != 1 || evs[0].Reason != contract.ReasonLeftAlone || !strings.Contains(evs[0].Message, dead["bare"]) {
		t.Errorf("bare pod's events = %+v, want one %s naming its target %s", evs, contract.ReasonLeftAlone, dead["bare"])
	}
	if !w.podExists(other) || len(w.events(other)) != 0 {
		t.Errorf("pod %s, whose volume is %s's, was touched", other.Name, nfsDriver)
	}
	if !w.podExists(live) || len(w.events(live)) != 0 {
		t.Errorf("pod %s, whose volume answers, was touched", live.Name)
	}
}

// TestAnotherDriversUnusableRecords: a record kubelet has not finished (or that is not kubelet's) is skipped, and so
// is an answer the mount health source could not give: the remediator never acts on what it does not know.
func TestAnotherDriversUnusableRecords(t *testing.T) {
	unknown := pod("unknown", ownedBy("apps/v1", "ReplicaSet"))
	garbled := pod("garbled", ownedBy("apps/v1", "ReplicaSet"))
	w, root, health := driversWorld(t, unknown, garbled)
	target := mountedBy(t, root, unknown, "pv-unknown", s3Driver, "bucket/unknown")
	health.errs[target] = errors.New("not a FUSE mount")
	dir := filepath.Join(kubeletpath.CSIVolumes(root, string(garbled.UID)), "pv-garbled")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, kubeletpath.VolumeDataFile), []byte(`{"driverName":`), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		w.pass()
		w.now = w.now.Add(grace)
	}
	if !w.podExists(unknown) || !w.podExists(garbled) {
		t.Error("a pod was deleted without evidence")
	}
	if health.calls != 2 {
		t.Errorf("asked %d times, want 2 (only the readable record, once per pass)", health.calls)
	}
}

// TestOwnTargetIsThePlugins: a target the plugin recorded is the plugin's to answer for, even when the remediator
// is also told to look after the driver kubelet's record names (the plugin's own name, or a second release).
func TestOwnTargetIsThePlugins(t *testing.T) {
	p := pod("web", ownedBy("apps/v1", "ReplicaSet"))
	root := t.TempDir()
	mountHealth := &fakeHealth{problems: map[string]string{}, errs: map[string]error{}}
	w := newWorld(t, "v1.37.2", func(c *Config) {
		c.KubeletDir, c.Drivers, c.Mounts = root, []string{"dummy-fuse-csi"}, mountHealth
	}, p)
	target := mountedBy(t, root, p, "data", "dummy-fuse-csi", "vol-1")
	if err := w.store.PutPublish(state.Publish{VolumeID: "vol-1", StagingPath: kubeletpath.Staging(root, "dummy-fuse-csi", "vol-1"), TargetPath: target, FuseMode: "child", Time: t0}); err != nil {
		t.Fatal(err)
	}
	w.pass()
	if mountHealth.calls != 0 || w.health.calls != 1 {
		t.Errorf("asked the mounts %d and the plugin %d times about %s, want 0 and 1", mountHealth.calls, w.health.calls, target)
	}
}

func TestNewRefusesNothingToLookAfter(t *testing.T) {
	base := Config{Client: fake.NewClientset().CoreV1(), Owners: ownersOf(t), NodeName: node}
	for name, edit := range map[string]func(*Config){
		"nothing":              func(*Config) {},
		"drivers, no mounts":   func(c *Config) { c.Drivers = []string{s3Driver} },
		"state, no health":     func(c *Config) { c.StateDir = "/x" },
		"an empty driver name": func(c *Config) { c.Drivers, c.Mounts = []string{""}, &fakeHealth{} },
	} {
		c := base
		edit(&c)
		if _, err := New(c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	c := base
	c.Drivers, c.Mounts = []string{s3Driver}, &fakeHealth{}
	if _, err := New(c); err != nil {
		t.Errorf("drivers only: refused: %v", err)
	}
}

// TestMountHealthOnRealMounts: MountHealth tells a live FUSE mount, one whose server is gone and one whose server
// is stuck apart by itself, and answers each within its timeout; a directory with nothing mounted is no answer.
func TestMountHealthOnRealMounts(t *testing.T) {
	testenv.RequireFUSE(t)
	lab := testenv.NewLab(t)
	server, err := fuseserver.New(fuseserver.Spec{Path: bins.Path(t, "dummy-fuse")})
	if err != nil {
		t.Fatal(err)
	}
	start := func(name string) (*testenv.Proc, string) {
		dir := lab.Dir()
		p := lab.Start(name, fuseserver.Command(server, server.MountArgs(dir)))
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := mounts.WaitAnswering(ctx, dir, fuseserver.ServedFile, p.Done()); err != nil {
			t.Fatalf("%s never served %s: %v\n%s", name, dir, err, p.Tail())
		}
		return p, dir
	}
	_, live := start("live")
	gone, goneDir := start("gone")
	stuck, stuckDir := start("stuck")
	gone.Kill()
	gone.Wait(20 * time.Second)
	stuck.Signal(syscall.SIGSTOP)
	t.Cleanup(func() { stuck.Signal(syscall.SIGCONT) })

	const timeout = 500 * time.Millisecond
	prober := mounts.NewProber(timeout, 1)
	defer prober.Close()
	h := MountHealth{Prober: prober}
	for _, tc := range []struct{ name, dir, want, wantErr string }{
		{name: "live", dir: live},
		{name: "gone", dir: goneDir, want: "FuseServerGone"},
		{name: "stuck", dir: stuckDir, want: "FuseServerNotResponding"},
		{name: "nothing mounted", dir: t.TempDir(), wantErr: "not a FUSE mount"},
	} {
		began := time.Now()
		got, err := h.Problem(context.Background(), "vol-"+tc.name, tc.dir)
		if took := time.Since(began); took > timeout+2*time.Second {
			t.Errorf("%s: answered after %s, past the timeout %s", tc.name, took, timeout)
		}
		switch {
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.wantErr)
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want == "" && got != "" || tc.want != "" && !strings.HasPrefix(got, tc.want):
			t.Errorf("%s: problem %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestDeletionThatDidNotHeal: when the pod that replaced a deleted one gets the same volume dead (a driver that
// hands new pods its dead staging mount), the remediator stops deleting and says why in a Warning event, instead
// of churning pods; once a target of the volume answers again, a later death is remediated as before.
func TestDeletionThatDidNotHeal(t *testing.T) {
	first := pod("web-1", ownedBy("apps/v1", "ReplicaSet"))
	w, root, health := driversWorld(t, first)
	dead := "FuseServerGone: the FUSE mount of volume bucket/data answers transport endpoint is not connected"
	target := mountedBy(t, root, first, "pv-data", s3Driver, "bucket/data")
	health.problems[target] = dead
	w.pass()
	w.now = w.now.Add(grace)
	w.pass()
	if w.podExists(first) {
		t.Fatal("the first pod with the dead volume was not deleted")
	}

	// Its successor, created a moment later (the API's creation time is to the second, before the deletion).
	successor := func(name string) (*corev1.Pod, string) {
		p := pod(name, ownedBy("apps/v1", "ReplicaSet"))
		p.CreationTimestamp = metav1.NewTime(w.now.Add(-500 * time.Millisecond).Truncate(time.Second))
		startedAt(w.now.Add(time.Second))(p)
		if _, err := w.client.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return p, mountedBy(t, root, p, "pv-data", s3Driver, "bucket/data")
	}
	second, target2 := successor("web-2")
	health.problems[target2] = dead
	w.now = w.now.Add(time.Second)
	w.pass()
	w.now = w.now.Add(grace)
	w.pass()
	if !w.podExists(second) {
		t.Fatal("the successor, dead like its predecessor, was deleted too: the remediator churns pods")
	}
	evs := w.events(second)
	if len(evs) != 1 || evs[0].Type != corev1.EventTypeWarning || evs[0].Reason != contract.ReasonLeftAlone || !strings.Contains(evs[0].Message, "deleting pods does not heal it") {
		t.Fatalf("successor's events %+v, want one Warning %s saying that deleting pods does not heal the volume", evs, contract.ReasonLeftAlone)
	}

	// The volume answers again (someone fixed the node), then dies anew: remediated as a new death.
	delete(health.problems, target2)
	w.now = w.now.Add(time.Minute)
	w.pass()
	health.problems[target2] = dead
	w.now = w.now.Add(limit) // past the rate limit of the successor's warning
	w.pass()
	w.now = w.now.Add(grace)
	w.pass()
	if w.podExists(second) {
		t.Error("after the volume had answered again, its next death was not remediated")
	}
}
