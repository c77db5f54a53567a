package workload

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/command"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/version"
)

const usage = `Usage: dummy-fuse-workload --file PATH [flags]

Reads PATH at once and then every --read-interval, logging each open, read and error on stdout.
With --write it writes instead, as a training job does: appends a piece to PATH every --read-interval,
fsyncs every --sync-every pieces, and every --checkpoint-every pieces writes PATH.ckpt.tmp, fsyncs and
closes it and renames it to PATH.ckpt; each is logged once acknowledged, with its SHA-256.
Exit codes: 0 on SIGTERM/SIGINT, 1 on the first I/O error with --exit-on-error, 2 on a usage error.

Flags:
`

// errVersion asks Command to print the version.
var errVersion = errors.New("version requested")

// ParseArgs turns the command line into a Config. The flag package writes its own errors and the usage to
// stderr; flag.ErrHelp means --help was asked for, and a *command.UsageError is a bad command line.
func ParseArgs(args []string, stderr io.Writer) (Config, error) {
	cfg := Config{Interval: 5 * time.Second, KeepOpen: true, Format: FormatText}
	fl := flag.NewFlagSet("dummy-fuse-workload", flag.ContinueOnError)
	fl.SetOutput(stderr)
	fl.StringVar(&cfg.File, "file", "", "file to read (required)")
	fl.BoolVar(&cfg.ExitOnError, "exit-on-error", false, "exit with code 1 on the first open or read error (else keep trying)")
	fl.DurationVar(&cfg.Interval, "read-interval", cfg.Interval, "time between reads")
	fl.BoolVar(&cfg.KeepOpen, "keep-open", cfg.KeepOpen, "open once and re-read the same descriptor, even after errors; false: open, read and close every time")
	fl.BoolVar(&cfg.DirectIO, "direct-io", false, "open with O_DIRECT: every read reaches the FUSE server instead of the page cache (and shows how long the server takes)")
	fl.BoolVar(&cfg.Write, "write", false, "write PATH instead of reading it (see above)")
	fl.IntVar(&cfg.WriteSize, "write-size", 64<<10, "with --write: bytes per piece")
	fl.IntVar(&cfg.SyncEvery, "sync-every", 4, "with --write: fsync after every this many pieces (0: never)")
	fl.IntVar(&cfg.CheckpointEvery, "checkpoint-every", 8, "with --write: write a checkpoint after every this many pieces (0: never)")
	fl.Var(&cfg.Format, "log-format", "log format: text or json (one object per line)")
	showVersion := fl.Bool("version", false, "print the version and exit")
	fl.Usage = func() {
		fmt.Fprint(fl.Output(), usage)
		fl.PrintDefaults()
	}
	if err := command.Parse(fl, args); err != nil {
		return cfg, err
	}
	set := map[string]bool{}
	fl.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case *showVersion:
		return cfg, errVersion
	case fl.NArg() > 0:
		return cfg, command.Usagef("unexpected arguments %q", fl.Args())
	case cfg.File == "":
		return cfg, command.Usagef("--file is required")
	case cfg.Interval <= 0:
		return cfg, command.Usagef("--read-interval must be positive, got %s", cfg.Interval)
	case cfg.Write && (cfg.WriteSize < 1 || cfg.SyncEvery < 0 || cfg.CheckpointEvery < 0):
		return cfg, command.Usagef("--write-size must be positive and --sync-every, --checkpoint-every not negative")
	}
	writeFlags := []string{"write-size", "sync-every", "checkpoint-every"}
	if !cfg.Write {
		for _, f := range writeFlags {
			if set[f] {
				return cfg, command.Usagef("--%s is for --write", f)
			}
		}
	} else if set["keep-open"] || set["direct-io"] {
		return cfg, command.Usagef("--keep-open and --direct-io are for reading: the writer keeps its file open")
	}
	return cfg, nil
}

// Command returns the dummy-fuse-workload command (the shape of internal/command) with env's dependencies:
// it reads until ctx is done (nil: exit 0) or, with --exit-on-error, until the first I/O error (an
// *command.ExitError with code 1; the error is already in the log). Streams.Out receives the log.
func Command(env Env) command.RunFunc {
	return func(ctx context.Context, args []string, s command.Streams) error {
		cfg, err := ParseArgs(args, s.Err)
		switch {
		case errors.Is(err, errVersion):
			fmt.Fprintln(s.Out, version.Version)
			return nil
		case err != nil:
			return err
		}
		env.Out = s.Out
		if code := Run(ctx, cfg, env); code != ExitOK {
			return &command.ExitError{Code: code}
		}
		return nil
	}
}
