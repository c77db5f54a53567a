package catalog

import (
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// keeperNoSuccessorWithin bounds the reader's error in keeper-no-successor: the plugin's default limit
// (fusemode.DefaultUnservedLimit, 30 s) and its check interval (1 s), with room for a loaded machine.
const keeperNoSuccessorWithin = 35 * time.Second

// keeperFaultScenarios are the keeper mode's double faults and its bound: a FUSE server's successor killed in
// the middle of the recovery, the plugin killed while the keeper hands its copies back, and FUSE servers that
// cannot start at all, where the plugin ends the wait with an error instead of leaving the callers hanging.
func keeperFaultScenarios() []scenarios.Scenario {
	noSuccessor := keeperSlow.row("no-successor", "no FUSE server can start (a crash loop); the plugin ends the wait",
		"Every server the keeper starts for the volume dies at once, with a read waiting (each read takes 1 s "+
			"inside a server). Without a bound the read would wait in D state for good; the plugin aborts the "+
			"connection once the read waited its limit (--unserved-abort-after, 30 s by default), so the reader "+
			"gets an error (ECONNABORTED) and exits, and the pod can be deleted.")
	noSuccessor.Steps = []scenarios.Step{warmUp, untilReadInFlight, scenarios.Kill(topology.FuseCrashLoop),
		exitsWithin(keeperNoSuccessorWithin), scenarios.Kill(topology.WorkloadPod)}
	noSuccessor.Expect = endsWait(keeperNoSuccessorWithin)
	return []scenarios.Scenario{
		readInFlight(keeperSlow.row("double-fault", "the FUSE server's successors die in the middle of the recovery",
			"Every read takes 1 s inside the server. The server is killed with a read inside it; its successor is "+
				"killed the moment the keeper starts it (while it replays the INIT and asks for the resend); the next "+
				"one is killed right after it took the connection over, with the resent read inside it. Each successor "+
				"replays the INIT and asks the kernel to resend again, so the read returns \"Hello world!\" late and "+
				"no read fails."),
			untilReadInFlight, scenarios.Kill(topology.FuseSuccessor), scenarios.Start(topology.FuseSuccessor),
			scenarios.Kill(topology.FuseServer), scenarios.Start(topology.FuseServer), watchSlowReads),
		// The keeper's loss after the plugin is back proves that the plugin that stays took its copies back.
		survives(keeperMode.row("recollect-kill", "the restarted plugin is killed while the keeper hands its copies back",
			"The plugin is killed; when it starts again, it is killed the moment the keeper has reconnected and "+
				"handed it back its copies of the connections (the plugin checks and adopts one in well under a "+
				"millisecond, so the kill lands in or right after the adoption). The keeper serves on throughout; the "+
				"plugin that stays takes its copies back, which the keeper's loss right after proves: no read fails."),
			scenarios.KillPlugin(), scenarios.Kill(topology.PluginRecollecting), scenarios.StartPlugin(), scenarios.Observe(watchReads),
			scenarios.Kill(topology.KeeperContainer), scenarios.Start(topology.KeeperContainer)),
		noSuccessor,
	}
}
