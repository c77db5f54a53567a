// Package command gives every program of the project one shape, after sigs.k8s.io/kind's:
// main() → os.Exit(command.Main(...)) → Run(ctx, args, streams) error, so that a command can be tested without
// starting a process. Main is the only place that turns errors into exit codes.
package command

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Streams are a command's standard streams.
type Streams struct {
	In       io.Reader
	Out, Err io.Writer
}

// OS returns the process's standard streams.
func OS() Streams { return Streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr} }

// RunFunc is a command's body. It returns nil for success, a *UsageError for bad arguments (exit 2), an
// *ExitError for a chosen exit code, or any other error (exit 1).
type RunFunc func(ctx context.Context, args []string, s Streams) error

// UsageError is wrong command-line input: Main prints it and exits 2.
type UsageError struct {
	Err error
	// printed: the flag package already told the user (Parse), so Main only sets the exit code.
	printed bool
}

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Usagef returns a *UsageError with a formatted message.
func Usagef(format string, a ...any) error { return &UsageError{Err: fmt.Errorf(format, a...)} }

// ExitError ends the command with Code; Err (optional) is printed first. Use it for documented exit codes
// other than 0, 1 and 2 (or 1 when the message was already logged).
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit code %d", e.Code)
	}
	return e.Err.Error()
}
func (e *ExitError) Unwrap() error { return e.Err }

// Parse parses args with fs and maps its outcome: -h/--help → flag.ErrHelp (Main exits 0; the flag set
// already printed its usage), a bad flag → *UsageError (the flag set already printed why).
func Parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return flag.ErrHelp
		}
		return &UsageError{Err: err, printed: true}
	}
	return nil
}

// Main runs run with a context cancelled by SIGTERM or SIGINT and returns the exit code: 0 for nil or a help
// request, 2 for a *UsageError, an *ExitError's code, 1 for any other error (printed as "name: error").
func Main(name string, run RunFunc, args []string, s Streams) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return Code(name, run(ctx, args, s), s.Err)
}

// Code maps err to an exit code as Main does, printing it to w.
func Code(name string, err error, w io.Writer) int {
	var usage *UsageError
	var exit *ExitError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &usage):
		if !usage.printed {
			fmt.Fprintf(w, "%s: %v\nRun '%s --help' for usage.\n", name, usage.Err, name)
		}
		return 2
	case errors.As(err, &exit):
		if exit.Err != nil {
			fmt.Fprintf(w, "%s: %v\n", name, exit.Err)
		}
		return exit.Code
	}
	fmt.Fprintf(w, "%s: %v\n", name, err)
	return 1
}
