package driver

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/state"
)

// TestHugeFieldsAreClippedInLogs: a megabyte in a request field (volume ID, path, volume context) is refused or
// ignored, and neither the answer nor the log (even at -v=5, where requests are logged) repeats it.
func TestHugeFieldsAreClippedInLogs(t *testing.T) {
	var buf bytes.Buffer
	klog.SetOutput(&buf)
	klog.LogToStderr(false)
	defer func() { klog.LogToStderr(true); klog.SetOutput(os.Stderr) }()
	setV(t, "5")
	h := newHarness(t, false, nil)

	huge := strings.Repeat("x", 1<<20)
	tgt := filepath.Join(h.root, "pods", "p", "mount")
	for _, req := range []any{
		&csi.NodePublishVolumeRequest{VolumeId: huge, StagingTargetPath: "/s", TargetPath: tgt, VolumeCapability: mountCap()},
		&csi.NodePublishVolumeRequest{VolumeId: "v", StagingTargetPath: "/s", TargetPath: "/" + huge, VolumeCapability: mountCap()},
		&csi.NodePublishVolumeRequest{VolumeId: "v", StagingTargetPath: "/s", TargetPath: tgt, VolumeCapability: mountCap(), VolumeContext: map[string]string{"k": huge}},
		&csi.NodeStageVolumeRequest{VolumeId: "v", StagingTargetPath: "/" + huge, VolumeCapability: mountCap()},
		&csi.NodeUnpublishVolumeRequest{VolumeId: "v", TargetPath: "/" + huge},
		&csi.NodeGetVolumeStatsRequest{VolumeId: huge, VolumePath: tgt},
	} {
		err := h.call(req)
		if err == nil || len(status.Convert(err).Message()) > 2*maxLogged+200 {
			t.Errorf("%T: answer of %d bytes (%v); want a short error", req, len(status.Convert(err).Message()), status.Code(err))
		}
	}
	klog.Flush()
	out := buf.String()
	if strings.Contains(out, strings.Repeat("x", maxLogLine+1)) {
		t.Errorf("the log repeats a huge field (%d bytes of log)", len(out))
	}
	if !strings.Contains(out, "GRPC request:") || !strings.Contains(out, "clipped") {
		t.Errorf("no clipped request in the log at -v=5:\n%.2000s", out)
	}
	if len(out) > 200<<10 {
		t.Errorf("%d bytes of log for 6 calls", len(out))
	}
}

// FuzzRequestValidation feeds arbitrary volume IDs, paths and capabilities to the validators: they never panic,
// what they accept can name a single record file and be a mount point, and what they refuse is refused with
// InvalidArgument and a short message.
func FuzzRequestValidation(f *testing.F) {
	for _, s := range []struct {
		id, path, fsType string
		mode             int32
	}{
		{"vol-1", "/var/lib/kubelet/pods/p/volumes/kubernetes.io~csi/pv/mount", "", 1},
		{"..", "/a/../b", "ext4", 99},
		{"a/b", "relative/path", "", -1},
		{"nul\x00", "/nul\x00", "", 0},
		{strings.Repeat("x", 129), "/" + strings.Repeat("y", 256), strings.Repeat("z", 300), 7},
		{"csi-0123abcd", "//double//slash/", "fuse", 5},
		{".", "/", "", 2},
	} {
		f.Add(s.id, s.path, s.fsType, s.mode)
	}
	f.Fuzz(func(t *testing.T, id, path, fsType string, mode int32) {
		short := func(err error) {
			t.Helper()
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("refused with %v, want InvalidArgument", err)
			}
			if n := len(status.Convert(err).Message()); n > 4*maxLogged+200 { // quoting may escape each byte as \xNN
				t.Fatalf("message of %d bytes", n)
			}
		}
		if err := validateVolumeID(id); err != nil {
			short(err)
		} else if state.ValidateFileName(id) != nil || strings.ContainsAny(id, "/\x00") || id == "." || id == ".." || len(id) > 128 {
			t.Fatalf("accepted volume ID %q", id)
		}
		if err := validatePath("target_path", path); err != nil {
			short(err)
		} else if !filepath.IsAbs(path) || filepath.Clean(path) != path || path == "/" || strings.ContainsRune(path, 0) || len(path) > state.MaxPathLen {
			t.Fatalf("accepted path %q", path)
		}
		c := &csi.VolumeCapability{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: fsType}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_Mode(mode)},
		}
		if err := validateCapability(c); err != nil {
			short(err)
		} else if _, defined := csi.VolumeCapability_AccessMode_Mode_name[mode]; !defined || mode == 0 {
			t.Fatalf("accepted access mode %d", mode)
		} else if !compatible(capabilityOf(c), capabilityOf(c)) {
			t.Fatalf("capability %v incompatible with itself", c)
		}
	})
}

// TestStartupSurvivesSpecialFilesInState: a FIFO among the records (whose open would block for ever) and other
// unusable entries are skipped with a log line; the temp file of a write cut off by a kill is removed; Probe
// becomes ready.
func TestStartupSurvivesSpecialFilesInState(t *testing.T) {
	var tmp, fifo string
	h := newHarness(t, false, func(c *Config) {
		st, err := state.Open(c.StateDir)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.PutStage(state.Stage{VolumeID: "good", StagingPath: "/staging/good"}); err != nil {
			t.Fatal(err)
		}
		fifo = filepath.Join(c.StateDir, "staged", "fifo.json")
		if err := mkfifo(fifo); err != nil {
			t.Fatal(err)
		}
		tmp = filepath.Join(c.StateDir, "published", strings.Repeat("a", 64)+".json.tmp4711")
		if err := os.WriteFile(tmp, []byte(`{"volumeID":"good","targ`), 0o600); err != nil {
			t.Fatal(err)
		}
		unclean := filepath.Join(c.StateDir, "staged", "unclean.json")
		if err := os.WriteFile(unclean, []byte(`{"volumeID":"unclean","stagingPath":"/a/../etc"}`), 0o600); err != nil {
			t.Fatal(err)
		}
	}) // newHarness fails the test unless Probe becomes ready
	if _, err := os.Lstat(tmp); !os.IsNotExist(err) {
		t.Errorf("temp file of an interrupted write left: %v", err)
	}
	if _, err := os.Lstat(fifo); err != nil {
		t.Errorf("the FIFO (not the plugin's) was removed: %v", err)
	}
	if _, ok := h.d.lookup("good"); !ok {
		t.Error("the good record was not loaded")
	}
	if _, ok := h.d.lookup("unclean"); ok {
		t.Error("a record with an unclean path was loaded")
	}
}

func mkfifo(path string) error { return syscall.Mkfifo(path, 0o600) }
