package podcgroup

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

func TestIn(t *testing.T) {
	const uid = "0b6c1f3e-2d4a-4c1b-9e8f-7a6b5c4d3e2f"
	for name, tc := range map[string]struct {
		cgroups string
		want    bool
	}{
		"cgroupfs v1":              {"12:memory:/kubepods/besteffort/pod" + uid + "/4f1c\n1:name=systemd:/kubepods/besteffort/pod" + uid + "/4f1c\n0::/\n", true},
		"cgroupfs v2":              {"0::/kubepods/burstable/pod" + uid + "/cri-4f1c\n", true},
		"systemd":                  {"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0b6c1f3e_2d4a_4c1b_9e8f_7a6b5c4d3e2f.slice/cri-containerd-4f1c.scope\n", true},
		"guaranteed, systemd":      {"0::/kubepods.slice/kubepods-pod0b6c1f3e_2d4a_4c1b_9e8f_7a6b5c4d3e2f.slice/cri-containerd-4f1c.scope\n", true},
		"another pod":              {"0::/kubepods/besteffort/pod11111111-2d4a-4c1b-9e8f-7a6b5c4d3e2f/4f1c\n", false},
		"the host":                 {"0::/init.scope\n", false},
		"a prefix of the UID":      {"0::/kubepods/pod" + uid[:20] + "/x\n", false},
		"the UID in a file name":   {"0::/kubepods/besteffort/x-pod" + uid + "\n", false},
		"systemd without kubepods": {"0::/user.slice/evil-pod0b6c1f3e_2d4a_4c1b_9e8f_7a6b5c4d3e2f.slice\n", false},
	} {
		if got := In([]byte(tc.cgroups), uid); got != tc.want {
			t.Errorf("%s: In = %t, want %t", name, got, tc.want)
		}
	}
	if In([]byte("0::/kubepods/pod/x\n"), "") {
		t.Error("an empty UID matched")
	}
}

func TestCreateStartsIntoThePod(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.SkipOrFail(t, "making a cgroup needs root")
	}
	const uid = "0b6c1f3e-2d4a-4c1b-9e8f-7a6b5c4d3e2f"
	cg, err := Create(uid, "c1")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("cat", "/proc/self/cgroup")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: cg.FD()}
	out, err := cmd.Output()
	if rerr := cg.Remove(10 * time.Second); rerr != nil {
		t.Error(rerr)
	}
	if err != nil {
		t.Fatal(err)
	}
	if !In(out, uid) {
		t.Fatalf("a process started into the pod's cgroup reports %q", out)
	}
}
