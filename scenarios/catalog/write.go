package catalog

import (
	"slices"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// The rows that write: a writable volume of a relay mode (--relay-writable, the chart's relay.writable), written
// by a training job's writer (dummy-fuse-workload --write) through the death of a component; at the end the
// runner stops the writer (on a cluster: deletes its pod) and the backend reads its file and checkpoint from the
// storage behind the server, without any mount (the objectURL of the server's spec), which must hold every byte
// the writer was told was written (scenarios.WritesKept). CI's cluster pass leaves them out (they need gcsfuse
// or a spec with objectURL, and its every-server rows are the read rows): make kube-writes records them per release.

// writer is the container of the rows that write.
const writer = "writer"

// writeInterval is the writer's: a 64 KiB piece every 20 ms, as the relay's own tests write
// (internal/testenv/writer.go), so that a fault lands among writes, fsyncs and checkpoint renames.
const writeInterval = 20 * time.Millisecond

// writesBefore are the pieces acknowledged before the first fault, writesAfter those the writer must go on to
// after the killed component is back: two checkpoints' worth, so that a checkpoint is renamed after it.
const (
	writesBefore = 6
	writesAfter  = 2 * scenarios.CheckpointEvery
)

// writeServersWhy is why they run with gcsfuse among the built-in servers.
const writeServersWhy = "the rows read what the writer wrote from the storage behind the server, without a mount, through the " +
	"objectURL of its spec: of the built-in servers only gcsfuse stores writes (in its fake GCS); a server spec with " +
	"objectURL runs them too (s3fs: docs/servers/s3fs.yaml)"

var (
	// warmUpWrites waits until the writer has written before any fault.
	warmUpWrites = scenarios.WaitFor(scenarios.Writes{C: writer, N: writesBefore}, scenarios.Dur{Fixed: 30 * time.Second})
	// writesGoOn waits until the writer has gone on after the killed component served again.
	writesGoOn = scenarios.WaitFor(scenarios.Writes{C: writer, N: writesAfter, After: scenarios.AfterPluginBack}, scenarios.Dur{Fixed: 30 * time.Second})
)

// writing is mode m writing: a writable volume and a pod of one writer, with gcsfuse or a server spec with
// objectURL.
func (m mode) writing() mode {
	m.name += "write-"
	m.base.Plugin.Writable = true
	m.base.Pod = pod(scenarios.Container{Name: writer, Write: true, ReadInterval: writeInterval})
	m.base.Servers, m.base.ServersWhy, m.base.EveryServer = []string{fuseserver.Gcsfuse}, writeServersWhy, ""
	return m
}

// keepsWrites makes s the row of faults that the writer rides out: after writes, the faults, then writes until
// the writer has gone on after the killed component is back. The writer never fails nor restarts, the volume
// dir stays alive, and the bucket holds every acknowledged byte (WritesKept).
func keepsWrites(s scenarios.Scenario, faults ...scenarios.Step) scenarios.Scenario {
	s.Steps = slices.Concat([]scenarios.Step{warmUpWrites}, faults, []scenarios.Step{writesGoOn})
	s.Expect = []scenarios.Expectation{
		{Check: scenarios.WritesKept{C: writer, Writes: writesAfter}},
		noRestarts(writer),
		{Check: scenarios.VolumeDirAlive{}},
	}
	return s
}

// The limit rows: what the relay does not promise to ride out, and exactly what it loses there. Their writer
// fsyncs every syncEvery pieces, so that the storage must keep what an fsync made durable and may lack only
// what was acknowledged after the last one; limitWarmUp lets it fsync and checkpoint before the fault. An fsync
// is a writer's longest operation (gcsfuse uploads at it): at one every few pieces, most kills would land inside
// one and nothing would be left to lose; at one every 16, most land among acknowledged pieces not yet durable.
const syncEvery = 2 * scenarios.CheckpointEvery

// connectionGone are the errnos of operations on a FUSE connection that is gone: ECONNABORTED for one in flight
// when it ended (the kernel's abort, fs/fuse/dev.c), which the relay passes on when it ends its backend wait
// on one, ENOTCONN for every one after.
var connectionGone = []string{"ENOTCONN", "ECONNABORTED"}

var (
	limitWarmUp     = scenarios.WaitFor(scenarios.Writes{C: writer, N: syncEvery + 2}, scenarios.Dur{Fixed: 30 * time.Second})
	untilWriteFails = writeFailsWithin(10 * time.Second)
)

// writeFailsWithin waits at most d for the writer's first failed operation after the kill.
func writeFailsWithin(d time.Duration) scenarios.Step {
	return scenarios.WaitFor(scenarios.FailsWithin{C: writer, Within: scenarios.Dur{Fixed: d}}, scenarios.Dur{Fixed: d})
}

// syncing is mode m writing with a writer that fsyncs every syncEvery pieces (the limit rows).
func (m mode) syncing() mode {
	m = m.writing()
	m.base.Pod = pod(scenarios.Container{Name: writer, Write: true, ReadInterval: writeInterval, SyncEvery: syncEvery})
	return m
}

// writersDie makes s the row of every holder of the connection dying at once, under writes (holdersDie for a
// writer): the writer's operations fail with ENOTCONN for good and the volume dir stays dead; the storage holds
// everything an fsync or checkpoint of the writer made durable, and lacks what it acknowledged after its last
// fsync, which only the dead server and the dead relay's journal had (KeepsDurableWrites names it).
func writersDie(s scenarios.Scenario) scenarios.Scenario {
	s = everyHolderDies(s, limitWarmUp, untilWriteFails)
	s.Expect = []scenarios.Expectation{
		{Check: scenarios.KeepsDurableWrites{C: writer, Errnos: connectionGone}},
		noRestarts(writer),
		{Check: scenarios.VolumeDir{Errno: "ENOTCONN", After: scenarios.AfterPluginBack}},
	}
	return s
}

// writeScenarios are the rows that write, in the relay and relay-keeper modes.
func writeScenarios() []scenarios.Scenario {
	r, rk := relayMode.writing(), relayKeeperMode.writing()
	noBackend := relayMode.syncing().row("no-backend", "the real server cannot come back within the relay's wait, under writes",
		"As relay-no-backend under a writer that fsyncs every 16 pieces: once the relay's backend wait (5 s here) ran out, "+
			"the writer's writes fail (ECONNABORTED for the one inside the dead server, ENOTCONN after it) and so does a stat of the volume dir; the relay keeps the journal of its open file, so when the real executable "+
			"is back and the plugin's next try serves again, the relay replays it into the new server and the writer goes on: "+
			"what is lost are the writes that failed, none the writer was told succeeded. (A close during the outage "+
			"would end the journal unkept: the relay's log names the writes and bytes it could not make durable.)")
	noBackend.Plugin.RelayBackendWait = relayNoBackendWait
	noBackend.Steps = []scenarios.Step{warmUpWrites, scenarios.Kill(topology.RelayServerGone),
		writeFailsWithin(relayNoBackendWithin), scenarios.Start(topology.RelayServerGone), writesGoOn}
	noBackend.Expect = []scenarios.Expectation{
		{Check: scenarios.FailsWithin{C: writer, Within: scenarios.Dur{Fixed: relayNoBackendWithin}}},
		{Check: scenarios.WritesKept{C: writer, Writes: writesAfter, Errnos: connectionGone}},
		noRestarts(writer),
	}
	noBackend = relayText.newBuild(noBackend)
	noBackend.Servers, noBackend.ServersWhy = r.base.Servers, r.base.ServersWhy
	return []scenarios.Scenario{
		keepsWrites(r.row("server-crash", "the real server behind the relay is killed under writes",
			"The real server (gcsfuse, s3fs) dies with a write, fsync or checkpoint of the writer's inside it (stopped for a "+
				"moment first; gcsfuse's fake GCS server too). The relay holds what the server had acknowledged but not uploaded in its "+
				"journal, waits for the new server the plugin starts and replays the journal into it, then runs the "+
				"failed requests again: the writer waits, nothing fails, and the bucket holds every acknowledged byte."),
			scenarios.Kill(topology.RelayServer), scenarios.Start(topology.RelayServer)),
		keepsWrites(r.row("crash", "the relay is killed under writes",
			"The relay dies with the writer's requests in flight. Its death closes its descriptors of the server's "+
				"files, flushes that make the live server upload what it had; the standby successor takes the "+
				"connection over with its predecessor's node table and journals, and the kernel resends what the dead "+
				"relay had read: the writer waits, nothing fails, and the bucket holds every acknowledged byte."),
			scenarios.Kill(topology.RelayProcess), scenarios.Start(topology.RelayProcess)),
		keepsWrites(rk.row("server-crash", "the keeper's real server is killed under writes",
			"As relay-write-server-crash, with the relay and the real server in the keeper: the keeper's relay replays its "+
				"journal into the server on the new backend the plugin mounts."),
			scenarios.Kill(topology.RelayServer), scenarios.Start(topology.RelayServer)),
		keepsWrites(rk.row("keeper-crash", "the keeper is killed under writes: the relay and the real server at once",
			"The keeper's death takes the relay and the real server together: what the server had acknowledged but not "+
				"uploaded survives only in the relay's journal files under the keeper's node directory. The plugin's copy "+
				"keeps the connection, the next keeper's relay takes it over and replays the journal into the new "+
				"server: the bucket holds every acknowledged byte."),
			scenarios.Kill(topology.KeeperContainer), scenarios.Start(topology.KeeperContainer)),
		keepsWrites(rk.row("plugin-restart", "the plugin restarts under writes; the keeper's relay and real server serve on",
			"The keeper holds the connection and runs the relay and the real server: the writer writes on while the plugin "+
				"is down and after it is back, and the bucket holds every acknowledged byte."),
			scenarios.KillPlugin(), scenarios.Observe(watchReads), scenarios.StartPlugin()),
		noBackend,
		writersDie(relayKeeperMode.syncing().row("all-holders", "the plugin and the keeper die together under writes",
			"The limit, under a writer that fsyncs every 16 pieces: as relay-keeper-all-holders, every holder of the "+
				"connection dies at once, and with them the real server and the relay. The writer's writes fail with "+
				"ENOTCONN for good. What an fsync or a checkpoint of the writer made durable is in the bucket. What it "+
				"acknowledged after its last fsync depends on how they die: killed at once (the local backend's SIGKILL, "+
				"as a crash or an OOM kill), the server's staging file and the relay's journal go with them and those "+
				"pieces are lost (the row names them); a deleted pod's keeper (SIGTERM first, even with --grace-period=0) "+
				"stops its relays while the real server still runs, their closes are FLUSHes it uploads at, and nothing "+
				"acknowledged is lost")),
	}
}
