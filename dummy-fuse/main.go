// Command dummy-fuse mounts a read-only hello-world FUSE filesystem (dummy-file.txt = "Hello world!\n") and
// serves it in the foreground until SIGTERM or SIGINT, which unmount it. It can also take over a connection
// whose server died while another process kept its /dev/fuse descriptor (--takeover).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/dummy-fuse/dummyfs"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/dummy-fuse/relayfs"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/command"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/handover"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/version"
)

func main() { os.Exit(command.Main("dummy-fuse", run, os.Args[1:], command.OS())) }

const usage = `Usage: dummy-fuse [flags] MOUNTPOINT
       dummy-fuse [flags] --session /dev/fd/N

Mounts a read-only FUSE filesystem holding dummy-file.txt ("Hello world!\n") at MOUNTPOINT and serves it
until SIGTERM or SIGINT. MOUNTPOINT may be /dev/fd/N: a /dev/fuse descriptor already mounted by a parent.

Handover: with --save-init FILE the server writes what a successor needs once the kernel's INIT is
answered. If the server dies while another process keeps a copy of the /dev/fuse descriptor, the mount
stays and its callers wait; "dummy-fuse --takeover FILE /dev/fd/N" given that descriptor serves them on,
after asking the kernel to resend the requests the dead server had read.

Keeper: with --session /dev/fd/N (a sequenced-packet unix socket inherited from a keeper, "csi-plugin
keeper") the server serves every connection the keeper hands it over that socket, new or taken over, in this
one process, until the keeper closes the session or SIGTERM; connections stay mounted when it exits.

Relay: with --relay-backend DIR the server relays DIR, the mount of a real FUSE server, read-only instead
of serving dummy-file.txt. When that server dies, requests wait (--backend-wait) until a server is mounted
at DIR again and then succeed; --save-init and --takeover work as above, given the --node-table the
predecessor wrote. With --relay-writable it forwards writes as well and replays what a dead server had
only staged (see the README).

Flags:
`

// run is the whole command: nil after a clean stop; a mount or handover failure is an error (exit 1).
func run(ctx context.Context, args []string, s command.Streams) error {
	opts := dummyfs.DefaultOptions()
	var h dummyfs.Handover
	fl := flag.NewFlagSet("dummy-fuse", flag.ContinueOnError)
	fl.SetOutput(s.Err)
	fl.BoolVar(&opts.Debug, "debug", false, "log every FUSE request and reply to stderr")
	fl.BoolVar(&opts.DirectIO, "direct-io", false, "bypass the page cache: every read reaches the server (and fails at once when it is gone)")
	fl.DurationVar(&opts.AttrTimeout, "attr-timeout", opts.AttrTimeout, "how long the kernel caches attributes")
	fl.DurationVar(&opts.EntryTimeout, "entry-timeout", opts.EntryTimeout, "how long the kernel caches name lookups")
	fl.StringVar(&opts.FsName, "fsname", opts.FsName, "mount source shown in the mount table")
	fl.BoolVar(&opts.AllowOther, "allow-other", opts.AllowOther, "let other users (e.g. containers running as non-root) access the mount")
	fl.DurationVar(&opts.ReadLatency, "read-latency", 0, "delay every read request by this long, like a remote backend")
	fl.IntVar(&opts.Workers, "workers", dummyfs.DefaultWorkers, "requests handled at once (threads reading /dev/fuse)")
	fl.StringVar(&h.SaveInit, "save-init", "", "write the handover record (the kernel's INIT and our reply) to this file, or /dev/fd/N, once mounted")
	takeover := fl.String("takeover", "", "take over the initialised connection MOUNTPOINT=/dev/fd/N, given the record its previous server saved with --save-init")
	standby := fl.Bool("standby", false, "with --takeover: start now, but take over only once a byte arrives on stdin (exit 0 at its end): a successor forked while its predecessor still serves")
	session := fl.String("session", "", "serve the connections a keeper hands over on this inherited session socket (/dev/fd/N) instead of a MOUNTPOINT")
	var relay relayfs.Options
	fl.StringVar(&relay.Backend, "relay-backend", "", "relay this directory (a real FUSE server's mount) read-only instead of serving dummy-file.txt")
	fl.DurationVar(&relay.BackendWait, "backend-wait", relayfs.DefaultBackendWait, "with --relay-backend: how long requests wait for a dead backend to serve again before they fail")
	relayNodeDir := fl.String("relay-node-dir", "", "with --session: relay every connection to the backend root its keeper hands over (the relay-keeper mode), journaling node tables in this directory")
	fl.BoolVar(&relay.Writable, "relay-writable", false, "with --relay-backend or --relay-node-dir: forward writes too (create, write, truncate, rename, unlink, mkdir, fsync...), journaling each file's writes until the backend says it is durable; the mount is read-write with default_permissions")
	fl.StringVar(&relay.SpillDir, "spill-dir", "", "with --relay-writable: where the journals keep written data (default: $TMPDIR or /tmp)")
	fl.StringVar(&relay.NodeTable, "node-table", "", "with --relay-backend: the file journaling the relay's node IDs, which a successor (--takeover) needs")
	showVersion := fl.Bool("version", false, "print the version and exit")
	fl.Usage = func() {
		fmt.Fprint(fl.Output(), usage)
		fl.PrintDefaults()
	}

	if err := command.Parse(fl, args); err != nil {
		if err == flag.ErrHelp {
			fl.SetOutput(s.Out)
			fl.Usage()
		}
		return err
	}
	set := map[string]bool{}
	fl.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case *showVersion:
		fmt.Fprintln(s.Out, version.Version)
		return nil
	case *session != "" && (fl.NArg() != 0 || *takeover != "" || h.SaveInit != ""):
		return command.Usagef("--session takes no MOUNTPOINT, --takeover or --save-init: the keeper hands over every connection with its record")
	case *session != "" && !dummyfs.IsMagicMountpoint(*session):
		return command.Usagef("--session needs the inherited socket as /dev/fd/N, got %s", *session)
	case *session == "" && fl.NArg() != 1:
		return command.Usagef("expected exactly one MOUNTPOINT, got %d arguments", fl.NArg())
	case opts.Workers < 1:
		return command.Usagef("--workers must be at least 1, got %d", opts.Workers)
	case opts.ReadLatency < 0:
		return command.Usagef("--read-latency must not be negative, got %s", opts.ReadLatency)
	case *takeover != "" && !dummyfs.IsMagicMountpoint(fl.Arg(0)):
		return command.Usagef("--takeover needs MOUNTPOINT /dev/fd/N (the inherited connection), got %s", fl.Arg(0))
	case *standby && *takeover == "":
		return command.Usagef("--standby waits to take over: it needs --takeover")
	case *relayNodeDir != "" && *session == "":
		return command.Usagef("--relay-node-dir relays the connections of a --session")
	case relay.Backend == "" && *relayNodeDir == "" && set["backend-wait"], relay.Backend == "" && set["node-table"]:
		return command.Usagef("--node-table and --backend-wait need --relay-backend")
	case relay.Backend != "" && (*session != "" || opts.ReadLatency != 0):
		return command.Usagef("--relay-backend serves one MOUNTPOINT (no --session yet) and reads at the backend's pace (no --read-latency)")
	case relay.Backend == "" && *relayNodeDir == "" && (relay.Writable || set["spill-dir"]):
		return command.Usagef("--relay-writable and --spill-dir need --relay-backend or --relay-node-dir")
	case set["spill-dir"] && !relay.Writable:
		return command.Usagef("--spill-dir is for --relay-writable")
	case relay.Backend != "" && relay.BackendWait <= 0:
		return command.Usagef("--backend-wait must be positive, got %s", relay.BackendWait)
	case relay.Backend != "" && *takeover != "" && relay.NodeTable == "":
		return command.Usagef("--takeover of a relay needs the --node-table its predecessor wrote: without it no node ID the kernel holds means anything")
	}
	if *session != "" {
		tuneGC()
		if *relayNodeDir != "" {
			relay.DirectIO, relay.AttrTimeout, relay.EntryTimeout, relay.Log = opts.DirectIO, opts.AttrTimeout, opts.EntryTimeout, s.Err
			fss, err := relayfs.NewSessions(*relayNodeDir, relay)
			if err != nil {
				return err
			}
			return serveSession(ctx, *session, opts, fss, s.Err)
		}
		return serveSession(ctx, *session, opts, nil, s.Err)
	}
	if *standby {
		// A process forked while it holds files on a FUSE mount closes its copies at exec, and each close waits
		// for the mount's server (FLUSH): forked after its predecessor died, a successor could wait for itself.
		// Forked in advance, it reads the record and the node table only once told to go.
		if ok, err := waitToGo(s.In); err != nil || !ok {
			return err
		}
	}
	if *takeover != "" {
		rec, err := dummyfs.ReadInitRecord(*takeover)
		if err != nil {
			return err
		}
		h.Record = rec
	}

	tuneGC()
	if relay.Backend != "" {
		opts.Writable = relay.Writable
		return runRelay(ctx, fl.Arg(0), opts, relay, h, s.Err)
	}
	return dummyfs.Run(ctx, fl.Arg(0), opts, h, s.Err)
}

// runRelay serves the relay of relay.Backend at mountpoint as dummyfs.Run serves dummy-file.txt.
func runRelay(ctx context.Context, mountpoint string, opts dummyfs.Options, relay relayfs.Options, h dummyfs.Handover, logw io.Writer) error {
	relay.DirectIO, relay.AttrTimeout, relay.EntryTimeout, relay.Log = opts.DirectIO, opts.AttrTimeout, opts.EntryTimeout, logw
	fs, err := relayfs.Open(relay)
	if err != nil {
		return err
	}
	defer fs.Close()
	opts.FS = fs
	return dummyfs.Run(ctx, mountpoint, opts, h, logw)
}

// serveSession serves the connections of the keeper session inherited as path (/dev/fd/N).
func serveSession(ctx context.Context, path string, opts dummyfs.Options, fss dummyfs.SessionFS, logw io.Writer) error {
	n, _ := strconv.Atoi(strings.TrimPrefix(path, "/dev/fd/"))
	conn, err := handover.FromFile(os.NewFile(uintptr(n), path))
	if err != nil {
		return fmt.Errorf("--session %s: %w", path, err)
	}
	defer conn.Close()
	return dummyfs.ServeSessionWith(ctx, conn, opts, fss, logw)
}

// tuneGC trades a little GC work for memory: go-fuse allocates about 1 KiB of garbage per request
// (HandleRequest's request), and with the default GOGC=100 the heap grows to the runtime's 4 MiB minimum
// goal under load; GOGC=25 lowers that goal to 1 MiB at a few tenths of a microsecond of CPU per request
// (make bench). Many dummy-fuse processes (one per volume) run on a node. A GOGC in the environment wins.
func tuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(25)
	}
}

// waitToGo blocks until a byte arrives on in (true) or it ends (false: whoever would have sent it is gone).
func waitToGo(in io.Reader) (bool, error) {
	if in == nil {
		return false, errors.New("--standby needs stdin")
	}
	n, err := in.Read(make([]byte, 1))
	switch {
	case n == 1:
		return true, nil
	case err == io.EOF:
		return false, nil
	}
	return false, fmt.Errorf("--standby: reading stdin: %w", err)
}
