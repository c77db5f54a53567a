package cli

import (
	"slices"
	"strings"
	"testing"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/catalog"
)

// TestFlagOnlyRows: a row that exists only under a flag, named without it, is a usage error that names the
// flag and shows how to use it, not "no scenario" (the row is in --list).
func TestFlagOnlyRows(t *testing.T) {
	cases := []struct {
		args []string
		want string // the first line of stderr
	}{
		{args: []string{"driver-pod-delete"},
			want: `dfc-scenario: scenario "driver-pod-delete" needs --driver=<your CSI driver's name> (a driver-agnostic row: it measures a driver you installed): e.g. dfc-scenario --backend=kube --driver=<name> --storage-class=<class> driver-pod-delete`},
		{args: []string{"--backend=kube", "driver-rollout"},
			want: `dfc-scenario: scenario "driver-rollout" needs --driver=<your CSI driver's name> (a driver-agnostic row: it measures a driver you installed): e.g. dfc-scenario --backend=kube --driver=<name> --storage-class=<class> driver-rollout`},
		{args: []string{"driver-process-kill"},
			want: `dfc-scenario: scenario "driver-process-kill" needs --driver=<your CSI driver's name> (a driver-agnostic row: it measures a driver you installed) and --fuse-process=NAME (the process in the node plugin pod to kill): e.g. dfc-scenario --backend=kube --driver=<name> --storage-class=<class> --fuse-process=NAME driver-process-kill`},
		{args: []string{"--check", "restart", "driver-mount-pod-delete"},
			want: `dfc-scenario: scenario "driver-mount-pod-delete" needs --driver=<your CSI driver's name> (a driver-agnostic row: it measures a driver you installed) and --mount-pod-selector=SELECTOR (the driver's mount pod on the node): e.g. dfc-scenario --backend=kube --driver=<name> --storage-class=<class> --mount-pod-selector=SELECTOR driver-mount-pod-delete`},
		{args: []string{"sidecar-late-3s"},
			want: `dfc-scenario: scenario "sidecar-late-3s" is sidecar-late with its sidecar held back by 3s, a run that --sidecar-delay makes: e.g. dfc-scenario --sidecar-delay=3s sidecar-late`},
		{args: []string{"--backend=kube", "--driver=x", "--storage-class=a", "restart"},
			want: `dfc-scenario: no driver-agnostic scenario "restart": it is a row of this project's chart, run it without --driver (with --driver: driver-pod-delete, driver-rollout, driver-process-kill, driver-mount-pod-delete, driver-remediate)`},
		// Unknown names keep their "did you mean", the driver rows among the candidates.
		{args: []string{"driver-pod-delet"}, want: `dfc-scenario: no scenario "driver-pod-delet"; did you mean driver-pod-delete?`},
		{args: []string{"nope"}, want: `dfc-scenario: no scenario "nope" (dfc-scenario --list shows them)`},
		{args: []string{"sidecar-late-soon"}, want: `dfc-scenario: no scenario "sidecar-late-soon"; did you mean sidecar-late?`},
	}
	for _, tc := range cases {
		code, stdout, stderr := runOn(t, okMachine(), tc.args...)
		first, _, _ := strings.Cut(stderr, "\n")
		if code != 2 || first != tc.want || stdout != "" {
			t.Errorf("%q: exit %d, stderr %q; want exit 2, first line %q", tc.args, code, stderr, tc.want)
		}
	}
}

// TestListedNamesAreKnown: every row --list shows (the catalog's and the driver-agnostic ones, TestListFits)
// is a name the command knows: named alone it runs, or is refused for what it needs (a flag, another backend),
// never with "no scenario".
func TestListedNamesAreKnown(t *testing.T) {
	for _, name := range slices.Concat(catalog.Names(), catalog.DriverNames()) {
		_, _, stderr := runOn(t, okMachine(), "--check", name)
		if strings.Contains(stderr, "no scenario") || strings.Contains(stderr, "no driver-agnostic scenario") {
			t.Errorf("--list shows %s, but naming it gives %q", name, stderr)
		}
	}
}
