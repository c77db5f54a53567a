package kube

// The relay mode's parts (chart fuseMode relay): the real FUSE server behind the relay and the relay itself, both
// children of the plugin container (csi-plugin/fusemode/relay.go). They are killed from inside that container by
// `csi-plugin server-crash`, picked by their command line (the relay runs dummy-fuse --relay-backend, its standby
// adds --standby, the real server has neither), and their restarts are read from the plugin's own log.

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/scenarios/topology"
)

// relayWait bounds how long a step waits for the plugin to start a relay or a server again.
const relayWait = 30 * time.Second

// The arguments that tell the plugin's children apart (csi-plugin/fusemode/relay.go's command lines).
const (
	relayArg   = "--relay-backend" // the relay and its standby
	standbyArg = "--standby"       // the standby only
)

// What the plugin logs of its relay mode's processes (csi-plugin/fusemode/relay.go's watch), with what="relay"
// or what="server", the volume's ID and the process's pid.
const (
	relayLogExited  = "Relay mode: process exited, starting it again"
	relayLogStarted = "Relay mode: process started again"
)

// klogKV matches the key=value pairs of a structured klog line, a value quoted or not.
var klogKV = regexp.MustCompile(`(\w+)=("(?:[^"\\]|\\.)*"|\S+)`)

// parseKlog splits the message of a structured klog line (klogMessage's) into its text and its key=value pairs.
func parseKlog(msg string) (string, map[string]string) {
	q, err := strconv.QuotedPrefix(msg)
	if err != nil {
		return "", nil
	}
	text, _ := strconv.Unquote(q)
	kv := map[string]string{}
	for _, m := range klogKV.FindAllStringSubmatch(msg[len(q):], -1) {
		v := m[2]
		if u, err := strconv.Unquote(v); err == nil {
			v = u
		}
		kv[m[1]] = v
	}
	return text, kv
}

// onRelayLine turns the plugin's log lines about the run's volume's relay and real server into their events:
// an exit as KExited, a start again as KReady (the relay: it serves the connection; the server: it runs on a new
// backend mount).
func (p *relayPart) pluginLine(pp *dsPod, msg string, t time.Time) {
	b := p.b
	text, kv := parseKlog(msg)
	if (text != relayLogExited && text != relayLogStarted) || kv["volumeID"] != b.n.volumeHandle {
		return
	}
	c := topology.RelayServer
	if kv["what"] == "relay" {
		c = topology.RelayProcess
	}
	kind, detail := scenarios.KReady, fmt.Sprintf("pid %s, after a pause of %s", kv["pid"], kv["after"])
	if text == relayLogExited {
		kind, detail = scenarios.KExited, fmt.Sprintf("pid %s: %s", kv["pid"], kv["err"])
	}
	b.nodeEvent(pp, c, kind, t, fmt.Sprintf("pod %s: %s %s", pp.name, kv["what"], detail), "")
}

// relayKill runs server-crash in the running plugin pod with args (which pick the process) and records the kill of
// c with what, before the SIGKILL: a kill recorded after it could follow the process's restart.
func (b *Backend) relayKill(ctx context.Context, c topology.Component, what string, args ...string) error {
	pp, _ := b.runningPod(b.plugins)
	if pp == nil {
		return fmt.Errorf("no running plugin pod on node %s", b.node)
	}
	b.rec.Add(scenarios.Event{Source: scenarios.SrcComponent, Component: c, Kind: scenarios.KKilled,
		Message: fmt.Sprintf("exec csi-plugin %s %q in pod %s: SIGKILL of the %s", serverCrash, args, pp.name, what)})
	return b.serverCrash(ctx, pp.name, args...)
}

// relayServerPart is the real FUSE server behind the relay. Its kill is a crash under load, as the local backend's:
// the server is stopped (SIGSTOP), three read intervals pass for a read to reach it and wait, then SIGKILL. Unlike
// the local backend, gcsfuse itself is stopped, not its fake GCS server: that one is PID 1 of a container of its
// own, which nothing in that container can signal and nothing outside its PID namespace sees.
type relayServerPart struct {
	noPart
	b *Backend
}

func newRelayServerPart(b *Backend, _ *scenarios.Env) (part, error) {
	return &relayServerPart{b: b}, nil
}

func (p *relayServerPart) kill(ctx context.Context) error {
	b := p.b
	pp, _ := b.runningPod(b.plugins)
	if pp == nil {
		return fmt.Errorf("no running plugin pod on node %s", b.node)
	}
	if err := b.serverCrash(ctx, pp.name, "--stop", "--without-arg="+relayArg); err != nil {
		return err
	}
	wait := 3 * b.Timing().ReadInterval
	b.progress("real FUSE server stopped; SIGKILL in %s, with a read waiting on it", wait)
	if err := scenarios.Sleep(ctx, wait); err != nil {
		return err
	}
	return b.relayKill(ctx, topology.RelayServer, fmt.Sprintf("real FUSE server (%s), stopped for %s with a read waiting on it", b.sc.Plugin.Server(), wait),
		"--without-arg="+relayArg)
}

// start waits until the plugin logged the server started again: nobody else starts it.
func (p *relayServerPart) start(ctx context.Context) error {
	return p.b.rec.AwaitReady(ctx, topology.RelayServer, relayWait)
}

// relayPart is the relay serving the staging path (not its standby, which takes over when it dies).
type relayPart struct {
	noPart
	b *Backend
}

func newRelayPart(b *Backend, _ *scenarios.Env) (part, error) {
	return &relayPart{b: b}, nil
}

func (p *relayPart) kill(ctx context.Context) error {
	return p.b.relayKill(ctx, topology.RelayProcess, "relay", "--with-arg="+relayArg, "--without-arg="+standbyArg)
}

// start waits until the plugin logged that a successor serves the connection.
func (p *relayPart) start(ctx context.Context) error {
	return p.b.rec.AwaitReady(ctx, topology.RelayProcess, relayWait)
}
