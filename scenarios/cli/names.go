package cli

import (
	"slices"
	"strings"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/command"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/catalog"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/kube"
)

// flagOnlyRow returns, for a name that is a row only under a flag, the usage error that names the flag and
// shows how to use it; nil for any other name. Such rows are the driver-agnostic ones (catalog.Drivers, outside
// catalog.All: they need --driver) and the runs --sidecar-delay makes of a row that holds its sidecar back
// (catalog.WithSidecarDelay: <row>-<delay>). --list shows the former, a recorded matrix the latter, so a user
// who names one met "no scenario" although the name exists.
func flagOnlyRow(n string) error {
	if slices.Contains(catalog.DriverNames(), n) {
		needs := "--driver=<your CSI driver's name> (a driver-agnostic row: it measures a driver you installed)"
		example := "dfc-scenario --backend=kube --driver=<name> --storage-class=<class>"
		// The rows that need one more flag: the target's own check says which (kube.DriverTarget.Runnable).
		if why := (kube.DriverTarget{}).Runnable(n); why != "" {
			more, ok := strings.CutPrefix(why, n+" needs ")
			if !ok {
				more = why
			}
			needs += " and " + more
			if ok {
				example += " " + strings.Fields(more)[0]
			}
		}
		return command.Usagef("scenario %q needs %s: e.g. %s %s", n, needs, example, n)
	}
	for _, s := range catalog.All() {
		if s.Pod.Sidecar == nil || s.Pod.Sidecar.Delay <= 0 {
			continue
		}
		suffix, ok := strings.CutPrefix(n, s.Name+"-")
		if d, err := time.ParseDuration(suffix); ok && err == nil && d >= 0 {
			return command.Usagef("scenario %q is %s with its sidecar held back by %s, a run that --sidecar-delay makes: e.g. dfc-scenario --sidecar-delay=%s %s",
				n, s.Name, suffix, suffix, s.Name)
		}
	}
	return nil
}

// chartRowUnderDriver returns, for a row of this project's chart named with --driver, the usage error saying so;
// nil for any other name.
func chartRowUnderDriver(n string) error {
	if !slices.Contains(catalog.Names(), n) {
		return nil
	}
	return command.Usagef("no driver-agnostic scenario %q: it is a row of this project's chart, run it without --driver (with --driver: %s)",
		n, strings.Join(catalog.DriverNames(), ", "))
}
