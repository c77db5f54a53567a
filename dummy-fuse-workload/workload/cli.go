package workload

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/version"
)

const usage = `Usage: dummy-fuse-workload --file PATH [flags]

Reads PATH at once and then every --read-interval, logging each open, read and error on stdout.
Exit codes: 0 on SIGTERM/SIGINT, 1 on the first I/O error with --exit-on-error, 2 on a usage error.

Flags:
`

// errVersion asks Main to print the version.
var errVersion = errors.New("version requested")

// ParseArgs turns the command line into a Config. Flag errors and usage go to stderr; flag.ErrHelp means
// --help was asked for.
func ParseArgs(args []string, stderr io.Writer) (Config, error) {
	cfg := Config{Interval: 5 * time.Second, KeepOpen: true, Format: FormatText}
	fl := flag.NewFlagSet("dummy-fuse-workload", flag.ContinueOnError)
	fl.SetOutput(stderr)
	fl.StringVar(&cfg.File, "file", "", "file to read (required)")
	fl.BoolVar(&cfg.ExitOnError, "exit-on-error", false, "exit with code 1 on the first open or read error (else keep trying)")
	fl.DurationVar(&cfg.Interval, "read-interval", cfg.Interval, "time between reads")
	fl.BoolVar(&cfg.KeepOpen, "keep-open", cfg.KeepOpen, "open once and re-read the same descriptor, even after errors; false: open, read and close every time")
	fl.Var(&cfg.Format, "log-format", "log format: text or json (one object per line)")
	showVersion := fl.Bool("version", false, "print the version and exit")
	fl.Usage = func() {
		fmt.Fprint(fl.Output(), usage)
		fl.PrintDefaults()
	}
	if err := fl.Parse(args); err != nil {
		return cfg, err
	}
	if *showVersion {
		return cfg, errVersion
	}
	var err error
	switch {
	case fl.NArg() > 0:
		err = fmt.Errorf("unexpected arguments %q", fl.Args())
	case cfg.File == "":
		err = errors.New("--file is required")
	case cfg.Interval <= 0:
		err = fmt.Errorf("--read-interval must be positive, got %s", cfg.Interval)
	}
	if err != nil {
		fmt.Fprintf(stderr, "dummy-fuse-workload: %v\n", err)
		fl.Usage()
	}
	return cfg, err
}

// Main is the whole command: it parses args and runs until ctx is done. It returns the exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, env Env) int {
	cfg, err := ParseArgs(args, stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return ExitOK
	case errors.Is(err, errVersion):
		fmt.Fprintln(stdout, version.Version)
		return ExitOK
	case err != nil:
		return ExitUsage
	}
	env.Out = stdout
	return Run(ctx, cfg, env)
}
