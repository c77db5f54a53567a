package kubeletpath

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLayout(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		// sha256("vol-1"), as kubelet computes it for the staging dir.
		{Staging("/var/lib/kubelet", "dummy-fuse-csi", "vol-1"),
			"/var/lib/kubelet/plugins/kubernetes.io/csi/dummy-fuse-csi/d2e8363faaac7ae76def3b14091d8eb5755f6b92e9531627aeec833a8731cc49/globalmount"},
		{Target("/r", "uid-1", "pv-1"), "/r/pods/uid-1/volumes/kubernetes.io~csi/pv-1/mount"},
		{SubPath("/r", "uid-1", "data", "reader", 0), "/r/pods/uid-1/volume-subpaths/data/reader/0"},
		{SubPaths("/r", "uid-1"), "/r/pods/uid-1/volume-subpaths"},
	} {
		if tc.got != tc.want {
			t.Errorf("got  %s\nwant %s", tc.got, tc.want)
		}
	}
}

func TestParseTarget(t *testing.T) {
	if uid, name, ok := ParseTarget("/r", Target("/r", "uid-1", "pv-1")); !ok || uid != "uid-1" || name != "pv-1" {
		t.Errorf("ParseTarget(Target) = %q, %q, %v", uid, name, ok)
	}
	for _, p := range []string{
		"/r/pods/uid-1/volumes/kubernetes.io~csi/pv-1",
		"/r/pods/uid-1/volumes/kubernetes.io~nfs/pv-1/mount",
		"/other/pods/uid-1/volumes/kubernetes.io~csi/pv-1/mount",
		"/r/pods/../pods/volumes/kubernetes.io~csi/pv-1/mount",
		Staging("/r", "d", "v"),
	} {
		if uid, name, ok := ParseTarget("/r", p); ok {
			t.Errorf("ParseTarget(%s) = %q, %q; want not a target", p, uid, name)
		}
	}
}

func TestSplitTarget(t *testing.T) {
	target := Target("/var/lib/kubelet", "uid-1", "pv-a")
	root, uid, spec, ok := SplitTarget(target)
	if !ok || root != "/var/lib/kubelet" || uid != "uid-1" || spec != "pv-a" {
		t.Errorf("SplitTarget(%q) = %q, %q, %q, %v", target, root, uid, spec, ok)
	}
	for _, bad := range []string{
		"/var/lib/kubelet/pods/uid-1/volumes/kubernetes.io~csi/pv-a",
		"/var/lib/kubelet/pods/uid-1/volumes/kubernetes.io~nfs/pv-a/mount",
		"/var/lib/kubelet/pod/uid-1/volumes/kubernetes.io~csi/pv-a/mount",
		"pods/uid-1/volumes/kubernetes.io~csi/pv-a/mount",
		"/pods/uid-1/volumes/kubernetes.io~csi/pv-a/mount/x",
		"/r/pods/../pods/volumes/kubernetes.io~csi/pv-1/mount",
		"/",
	} {
		if _, _, _, ok := SplitTarget(bad); ok {
			t.Errorf("SplitTarget(%q) accepted", bad)
		}
	}
}

func TestReadVolumeData(t *testing.T) {
	root := t.TempDir()
	write := func(spec, content string) {
		t.Helper()
		dir := filepath.Join(CSIVolumes(root, "uid-1"), spec)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, VolumeDataFile), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// As kubelet v1.37 writes it (json.Encoder of a map, keys sorted, a trailing newline).
	write("pv-1", `{"attachmentID":"csi-0a1b","driverName":"ru.yandex.s3.csi","nodeName":"node-1","specVolID":"pv-1","volumeHandle":"bucket/prefix","volumeLifecycleMode":"Persistent"}`+"\n")
	write("no-driver", `{"specVolID":"no-driver"}`)
	write("garbage", `not json`)
	write("huge", `{"driverName":"`+strings.Repeat("x", maxVolumeData)+`"}`)

	got, err := ReadVolumeData(root, "uid-1", "pv-1")
	want := VolumeData{Driver: "ru.yandex.s3.csi", VolumeHandle: "bucket/prefix", SpecName: "pv-1", LifecycleMode: "Persistent"}
	if err != nil || got != want {
		t.Errorf("ReadVolumeData = %+v, %v; want %+v", got, err, want)
	}
	for spec, wantErr := range map[string]string{
		"no-driver": "names no driver", "garbage": "invalid character", "huge": "larger than", "absent": "no such file",
	} {
		if _, err := ReadVolumeData(root, "uid-1", spec); err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("ReadVolumeData(%s) = %v, want an error containing %q", spec, err, wantErr)
		}
	}
}
