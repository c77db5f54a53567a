package kube

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
)

const drv = "blackbox.example.com"

func dsPodOf(name, ns, node, ds string, labels map[string]string, ctr corev1.Container, vols ...corev1.Volume) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name), Labels: labels},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{ctr}, Volumes: vols},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if ds != "" {
		yes := true
		p.OwnerReferences = []metav1.OwnerReference{{Kind: "DaemonSet", Name: ds, Controller: &yes}}
	}
	return p
}

func csiNode(node string, drivers ...string) *storagev1.CSINode {
	n := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: node}}
	for _, d := range drivers {
		n.Spec.Drivers = append(n.Spec.Drivers, storagev1.CSINodeDriver{Name: d, NodeID: node})
	}
	return n
}

func TestFindPluginPod(t *testing.T) {
	registrar := corev1.Container{Name: "registrar", Args: []string{"--csi-address=/csi/csi.sock", "--kubelet-registration-path=/var/lib/kubelet/plugins/" + drv + "/csi.sock"}}
	byFlag := corev1.Container{Name: "plugin", Args: []string{"--drivername=" + drv}}
	byEnv := corev1.Container{Name: "plugin", Env: []corev1.EnvVar{{Name: "CSI_DRIVER_NAME", Value: drv}}}
	other := corev1.Container{Name: "plugin", Args: []string{"--kubelet-registration-path=/var/lib/kubelet/plugins/other.example.com/csi.sock"}}
	// A pod that only mounts the driver's dir (a keeper, a helper) loses against one that names it.
	helperVol := corev1.Volume{Name: "dir", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/lib/kubelet/plugins/" + drv}}}
	lookalike := corev1.Container{Name: "plugin", Args: []string{"--drivername=x" + drv, "--dir=/var/lib/" + drv + "-old/"}}
	cases := []struct {
		name     string
		objs     []runtime.Object
		selector string
		want     string // pod name, or an error's text
		err      bool
	}{
		{name: "registrar", objs: []runtime.Object{csiNode("n1", drv), dsPodOf("reg", "csi", "n1", "node", nil, registrar), dsPodOf("o", "csi", "n1", "onode", nil, other)}, want: "reg"},
		{name: "flag", objs: []runtime.Object{csiNode("n1", drv), dsPodOf("flag", "csi", "n1", "node", nil, byFlag)}, want: "flag"},
		{name: "env", objs: []runtime.Object{csiNode("n1", drv), dsPodOf("env", "csi", "n1", "node", nil, byEnv)}, want: "env"},
		{name: "arguments win over a hostPath", objs: []runtime.Object{csiNode("n1", drv), dsPodOf("flag", "csi", "n1", "node", nil, byFlag),
			dsPodOf("helper", "csi", "n1", "keeper", nil, corev1.Container{Name: "k"}, helperVol)}, want: "flag"},
		{name: "hostPath alone", objs: []runtime.Object{csiNode("n1", drv), dsPodOf("helper", "csi", "n1", "keeper", nil, corev1.Container{Name: "k"}, helperVol)}, want: "helper"},
		{name: "other node", objs: []runtime.Object{csiNode("n1", drv), dsPodOf("flag", "csi", "n2", "node", nil, byFlag)}, want: "no running DaemonSet pod on node n1 names driver", err: true},
		{name: "not a DaemonSet's", objs: []runtime.Object{csiNode("n1", drv), dsPodOf("flag", "csi", "n1", "", nil, byFlag)}, want: "give --plugin-selector", err: true},
		{name: "look-alike names", objs: []runtime.Object{csiNode("n1", drv), dsPodOf("x", "csi", "n1", "node", nil, lookalike)}, want: "no running DaemonSet pod", err: true},
		{name: "two candidates", objs: []runtime.Object{csiNode("n1", drv), dsPodOf("a", "csi", "n1", "node", nil, byFlag), dsPodOf("b", "csi2", "n1", "node2", nil, byEnv)}, want: "2 pods on node n1 could be", err: true},
		{name: "selector", selector: "app=plugin", objs: []runtime.Object{csiNode("n1", drv), dsPodOf("a", "csi", "n1", "node", map[string]string{"app": "plugin"}, other), dsPodOf("b", "csi", "n1", "node", nil, byFlag)}, want: "a"},
		{name: "selector matches none", selector: "app=none", objs: []runtime.Object{csiNode("n1", drv), dsPodOf("b", "csi", "n1", "node", nil, byFlag)}, want: `matches --plugin-selector "app=none"`, err: true},
		{name: "not registered", objs: []runtime.Object{csiNode("n1", "other.example.com"), dsPodOf("flag", "csi", "n1", "node", nil, byFlag)}, want: "not registered on node n1 (CSINode lists: other.example.com)", err: true},
		{name: "no CSINode", objs: []runtime.Object{dsPodOf("flag", "csi", "n1", "node", nil, byFlag)}, want: "node n1 has no CSINode", err: true},
		// The run's own remediator (csi-remediate --driver=<driver>) names the driver and is no plugin.
		{name: "the run's own pods", objs: []runtime.Object{csiNode("n1", drv), dsPodOf("flag", "csi", "n1", "node", nil, byFlag),
			dsPodOf("remediator", "run-ns", "n1", "remediator", nil, corev1.Container{Name: "remediator", Args: []string{"--driver=" + drv}})}, want: "flag"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pp, err := findPluginPod(context.Background(), fake.NewClientset(tc.objs...), drv, "n1", tc.selector, "run-ns")
			switch {
			case tc.err && err == nil:
				t.Fatalf("found %s/%s (%s), want an error with %q", pp.pod.Namespace, pp.pod.Name, pp.why, tc.want)
			case tc.err && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("error %q, want %q in it", err, tc.want)
			case !tc.err && err != nil:
				t.Fatalf("%v, want pod %s", err, tc.want)
			case !tc.err && (pp.pod.Name != tc.want || pp.why == "" || pp.ds == ""):
				t.Fatalf("found %s of %q (%s), want %s", pp.pod.Name, pp.ds, pp.why, tc.want)
			}
		})
	}
}

func TestDriverTargetValidate(t *testing.T) {
	ok := DriverTarget{Name: drv, StorageClass: "sc", ReadPath: "a/b.txt"}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := map[string]DriverTarget{
		"name is required":     {StorageClass: "sc", ReadPath: "f"},
		"exactly one of":       {Name: drv, ReadPath: "f"},
		"inside it":            {Name: drv, PVFile: "p", ReadPath: "a/../../b"},
		"--mount-pod-selector": {Name: drv, PVFile: "p", ReadPath: "f", MountPodSelector: "=="},
		"at most 15":           {Name: drv, PVFile: "p", ReadPath: "f", FuseProcess: "a-very-long-process-name"},
	}
	for want, tgt := range bad {
		if err := tgt.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: %v, want an error with %q", tgt, err, want)
		}
	}
}

func TestReadFrom(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{
		{Name: "kept", Args: []string{"--file=/mnt/dummy-file.txt", "--keep-open=true"}, VolumeMounts: []corev1.VolumeMount{{MountPath: "/mnt"}}},
		{Name: "sub", Args: []string{"--file=/mnt/dummy-file.txt"}, VolumeMounts: []corev1.VolumeMount{{MountPath: "/mnt/dummy-file.txt", SubPath: "dummy-file.txt"}}},
	}}}
	readFrom(pod, "data/./b.txt")
	kept, sub := pod.Spec.Containers[0], pod.Spec.Containers[1]
	if !slices.Equal(kept.Args, []string{"--file=/mnt/data/b.txt", "--keep-open=true"}) {
		t.Errorf("kept: args %q", kept.Args)
	}
	if m := sub.VolumeMounts[0]; m.SubPath != "data/b.txt" || m.MountPath != "/mnt/b.txt" || !slices.Equal(sub.Args, []string{"--file=/mnt/b.txt"}) {
		t.Errorf("sub: mount %+v, args %q", m, sub.Args)
	}
}

func TestReadPV(t *testing.T) {
	if pv, err := readPV(filepath.Join("testdata", "blackbox-pv.yaml"), "blackbox.dummy-fuse-csi"); err != nil || pv.Spec.CSI.VolumeHandle != "blackbox-volume" {
		t.Fatalf("testdata PV: %v, %+v", err, pv)
	}
	if _, err := readPV(filepath.Join("testdata", "blackbox-pv.yaml"), drv); err == nil || !strings.Contains(err.Error(), "not --driver") {
		t.Errorf("another driver's PV: %v", err)
	}
	dir := t.TempDir()
	for name, body := range map[string]string{
		"kind":   "apiVersion: v1\nkind: Pod\n",
		"no csi": "apiVersion: v1\nkind: PersistentVolume\nspec:\n  hostPath: {path: /x}\n",
		"typo":   "apiVersion: v1\nkind: PersistentVolume\nspec:\n  csii: {}\n",
	} {
		f := filepath.Join(dir, strings.ReplaceAll(name, " ", "_"))
		if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := readPV(f, drv); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestPodProcesses(t *testing.T) {
	proc := t.TempDir()
	uid := "0acc3652-1111-2222-3333-444455556666"
	mk := func(pid, comm, cgroup string) {
		d := filepath.Join(proc, pid)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		_ = os.WriteFile(filepath.Join(d, "comm"), []byte(comm+"\n"), 0o644)
		_ = os.WriteFile(filepath.Join(d, "cgroup"), []byte(cgroup), 0o644)
	}
	mk("10", "gcsfuse", "0::/kubepods/burstable/pod"+uid+"/abc\n")
	mk("11", "gcsfuse", "0::/kubepods.slice/kubepods-pod"+strings.ReplaceAll(uid, "-", "_")+".slice/cri-containerd-x.scope\n")
	mk("12", "gcsfuse", "0::/kubepods/burstable/podffffffff-0000/abc\n") // another pod's
	mk("13", "csi-plugin", "0::/kubepods/burstable/pod"+uid+"/abc\n")    // another name
	mk("self", "gcsfuse", "")
	pids, err := podProcesses(proc, uid, "gcsfuse")
	slices.Sort(pids)
	if err != nil || !slices.Equal(pids, []int{10, 11}) {
		t.Fatalf("podProcesses = %v, %v; want [10 11]", pids, err)
	}
}

func TestParseAttributes(t *testing.T) {
	got, err := ParseAttributes("bucket=b,mountOptions=a=b")
	if err != nil || len(got) != 2 || got["bucket"] != "b" || got["mountOptions"] != "a=b" {
		t.Fatalf("%v %v", got, err)
	}
	for _, bad := range []string{"a", "=1", "a=1,a=2"} {
		if _, err := ParseAttributes(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestFirstFile(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"b/z.txt", "b/a/y.txt", "c.txt"} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("c.txt", filepath.Join(dir, "a-link")); err != nil {
		t.Fatal(err)
	}
	if got, err := firstFile(context.Background(), dir); err != nil || got != "b/a/y.txt" {
		t.Errorf("firstFile = %q, %v; want b/a/y.txt (lexical order, symlinks skipped)", got, err)
	}
	empty := t.TempDir()
	if err := os.Mkdir(filepath.Join(empty, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := firstFile(context.Background(), empty); err == nil || !strings.Contains(err.Error(), "no regular file") {
		t.Errorf("empty volume: %v", err)
	}
}
