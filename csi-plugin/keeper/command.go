package keeper

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/fusemode"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/command"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/contract"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/version"
)

const usage = `Usage: csi-plugin keeper [flags]
       csi-plugin keeper status [--status-file FILE]
       csi-plugin keeper crash [--status-file FILE] --volume VOLUME_ID [--successor | --loop DURATION]

The keeper of the plugin's keeper placement (--fuse-mode=keeper): it connects to the plugin's keeper socket,
keeps a copy of every FUSE connection the plugin mounts, and runs the FUSE servers that answer them
(dummy-fuse --session). It needs no privilege. Any one of the plugin, the keeper and a FUSE server can die
while the mounts live on: their callers wait and get their answers from the successor.

"status" prints the keeper's status file (which server process serves which volume); "crash" sends SIGKILL to
the FUSE server of a volume, as a crash would (run it in the keeper's container: the PIDs are its own); with
--successor also to the server the keeper starts next, the moment it is named (a death in the middle of the
recovery); with --loop to every server the keeper starts for the volume, as if none could start, until the
connection is over (the plugin aborts it after its --unserved-abort-after) or DURATION has passed.

Flags:
`

// DefaultStatusFile is where the keeper writes its status unless told otherwise.
const DefaultStatusFile = "/run/dummy-fuse-csi-keeper/status.json"

// Command is `csi-plugin keeper`.
func Command(ctx context.Context, args []string, streams command.Streams) error {
	if len(args) > 0 {
		switch args[0] {
		case "status":
			return statusCommand(args[1:], streams)
		case "crash":
			return crashCommand(args[1:], streams)
		}
	}
	var (
		cfg         Config
		directIO    bool
		readLatency time.Duration
		showVersion bool
		relayDir    string
		backendWait time.Duration
	)
	fl := flag.NewFlagSet("csi-plugin keeper", flag.ContinueOnError)
	fl.SetOutput(streams.Err)
	fl.StringVar(&cfg.PluginSocket, "plugin-socket", "/csi/keeper.sock", "the plugin's keeper socket (its --keeper-socket)")
	fl.StringVar(&cfg.DummyFusePath, "dummy-fuse-path", "", "FUSE server executable (default: dummy-fuse beside this executable, else in $PATH)")
	fl.IntVar(&cfg.VolumesPerServer, "volumes-per-server", 64, "connections one FUSE server process answers (1: a process per volume, isolating volumes from each other's crashes; more save about 1 MiB per volume)")
	fl.BoolVar(&directIO, "fuse-direct-io", false, "pass --direct-io to the FUSE servers: every read reaches a server")
	fl.DurationVar(&readLatency, "read-latency", 0, "pass --read-latency to the FUSE servers: every read takes this long, like a remote backend")
	fl.StringVar(&cfg.SecretFile, "secret-file", "", "the plugin's per-node secret (default: "+fusemode.KeeperSecretName+" beside --plugin-socket)")
	fl.StringVar(&cfg.StatusFile, "status-file", DefaultStatusFile, "write which server serves which volume here after every change (empty: nowhere)")
	fl.StringVar(&relayDir, "relay-node-dir", "", "the plugin's relay-keeper mode: the servers relay each connection to the backend root the plugin hands over, journaling node tables in this directory (one that outlives the keeper, so that a successor takes the relays over)")
	writable := fl.Bool("relay-writable", false, "with --relay-node-dir: relays forward writes (the plugin's --relay-writable), keeping their journals' data under the node directory")
	fl.DurationVar(&backendWait, "relay-backend-wait", 30*time.Second, "with --relay-node-dir: how long a relay lets requests wait for a dead backend before they fail")
	var real fuseserver.Spec
	fl.StringVar(&real.Name, "relay-server", "", "with --relay-node-dir: the real FUSE server to run on each backend the plugin hands over ("+strings.Join(fuseserver.Names(), ", ")+"); empty: the plugin runs it")
	fl.StringVar(&real.Path, "relay-server-path", "", "with --relay-server: its executable (default: its name beside this executable, else in $PATH)")
	fl.Func("relay-server-opt", "with --relay-server: a setting of it as key=value, repeatable: "+fuseserver.OptsHelp(), real.SetOpt)
	fl.Func("relay-server-arg", "with --relay-server: an argument given to it before its own, repeatable (a flag of its next build: the keeper's rolling update changes it without a failed read)", real.AddExtra)
	fl.BoolVar(&showVersion, "version", false, "print the version and exit")
	fl.Usage = func() {
		fmt.Fprint(fl.Output(), usage)
		fl.PrintDefaults()
	}
	if err := command.Parse(fl, args); err != nil {
		return err
	}
	switch {
	case showVersion:
		_, err := fmt.Fprintln(streams.Out, version.Version)
		return err
	case fl.NArg() != 0:
		return command.Usagef("unexpected arguments: %q", fl.Args())
	case readLatency < 0:
		return command.Usagef("--read-latency must not be negative")
	case cfg.VolumesPerServer < 1:
		return command.Usagef("--volumes-per-server must be at least 1")
	case relayDir != "" && (readLatency != 0 || !filepath.IsAbs(relayDir) || backendWait <= 0):
		return command.Usagef("--relay-node-dir must be absolute, relays read at the backend's pace (no --read-latency) and --relay-backend-wait must be positive")
	}
	if cfg.DummyFusePath == "" {
		cfg.DummyFusePath = fuseserver.Find(fuseserver.DummyFuse)
	}
	if cfg.SecretFile == "" {
		cfg.SecretFile = filepath.Join(filepath.Dir(cfg.PluginSocket), fusemode.KeeperSecretName)
	}
	if directIO {
		cfg.ServerArgs = append(cfg.ServerArgs, "--direct-io")
	}
	if real.Name != "" {
		if relayDir == "" {
			return command.Usagef("--relay-server runs the real server of a relay: it needs --relay-node-dir")
		}
		cfg.RealServer = &real
		cfg.HandoffDir = filepath.Join(relayDir, "fusermount")
	}
	if *writable && relayDir == "" {
		return command.Usagef("--relay-writable is for relays: it needs --relay-node-dir")
	}
	if relayDir != "" {
		cfg.Relay = true
		cfg.ServerArgs = append(cfg.ServerArgs, "--relay-node-dir="+relayDir, "--backend-wait="+backendWait.String())
		if *writable {
			cfg.ServerArgs = append(cfg.ServerArgs, "--relay-writable", "--spill-dir="+filepath.Join(relayDir, "spill"))
		}
	}
	if readLatency > 0 {
		cfg.ServerArgs = append(cfg.ServerArgs, "--read-latency="+readLatency.String())
	}
	k, err := New(cfg, streams.Err)
	if err != nil {
		return err
	}
	return k.Run(ctx)
}

func statusCommand(args []string, streams command.Streams) error {
	fl := flag.NewFlagSet("csi-plugin keeper status", flag.ContinueOnError)
	fl.SetOutput(streams.Err)
	file := fl.String("status-file", DefaultStatusFile, "the keeper's status file")
	if err := command.Parse(fl, args); err != nil {
		return err
	}
	if fl.NArg() != 0 {
		return command.Usagef("unexpected arguments: %q", fl.Args())
	}
	st, err := ReadStatus(*file)
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(streams.Out, "%s\n", b)
	return err
}

func crashCommand(args []string, streams command.Streams) error {
	fl := flag.NewFlagSet("csi-plugin keeper crash", flag.ContinueOnError)
	fl.SetOutput(streams.Err)
	file := fl.String("status-file", DefaultStatusFile, "the keeper's status file")
	volume := fl.String("volume", "", "the volume whose FUSE server to kill (required)")
	successor := fl.Bool("successor", false, "kill the server's successor too, the moment the keeper names it")
	loop := fl.Duration("loop", 0, "kill every server the keeper starts for the volume, until its connection is over or this long")
	if err := command.Parse(fl, args); err != nil {
		return err
	}
	switch {
	case fl.NArg() != 0 || *volume == "":
		return command.Usagef("crash needs --volume and no arguments")
	case *successor && *loop != 0:
		return command.Usagef("--successor and --loop exclude each other")
	case *loop < 0:
		return command.Usagef("--loop must not be negative")
	}
	var msg string
	switch {
	case *successor:
		first, next, err := CrashSuccessor(*file, *volume, 30*time.Second)
		if err != nil {
			return err
		}
		msg = fmt.Sprintf(contract.KeeperCrashSuccessorFormat, first, *volume, next)
	case *loop > 0:
		killed, err := CrashLoop(*file, *volume, *loop)
		if err != nil {
			return err
		}
		msg = fmt.Sprintf("SIGKILL sent to %d FUSE servers of volume %s in a row (pids %v)", len(killed), *volume, killed)
	default:
		pid, err := Crash(*file, *volume)
		if err != nil {
			return err
		}
		msg = "SIGKILL sent to FUSE server pid " + strconv.Itoa(pid) + " of volume " + *volume
	}
	_, err := fmt.Fprintln(streams.Out, msg)
	return err
}
