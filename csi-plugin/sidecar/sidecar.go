// Package sidecar is `csi-plugin sidecar`: the unprivileged container that the sidecar FUSE mode puts in the
// workload's pod. It connects to the socket the plugin serves for one volume, receives the /dev/fuse descriptor
// of the mount the plugin made, and runs a FUSE server on it (as /dev/fd/3: dummy-fuse by default, gcsfuse or
// squashfuse with --fuse-server), as the GCS FUSE CSI driver's sidecar
// runs gcsfuse on /dev/fd/3 (pkg/sidecar_mounter in GoogleCloudPlatform/gcs-fuse-csi-driver). It needs neither
// root nor any capability: the mount exists already, the server only reads and writes the descriptor.
package sidecar

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/fusemode"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/keeper"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/command"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/contract"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fdpass"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/fuseserver"
)

// Config is the sidecar's command line.
type Config struct {
	// Socket is where the plugin serves the volume's descriptor: <SidecarVolume mount>/<volume name>/socket.
	Socket string
	// Server is the FUSE server to run (--fuse-server and its settings); DirectIO is its --direct-io.
	Server fuseserver.Spec
	// Delay holds the sidecar back before it connects.
	Delay time.Duration
	// Wait bounds the wait for the socket to accept a connection; ReceiveTimeout the wait for the descriptor.
	Wait, ReceiveTimeout time.Duration
}

// ParseArgs parses the subcommand's arguments (without "sidecar"); errors are *command.UsageError, and -h is
// flag.ErrHelp. The manifests' tests use it to check the sidecar containers' args.
func ParseArgs(args []string, stderr io.Writer) (Config, error) {
	var c Config
	fl := flag.NewFlagSet("csi-plugin sidecar", flag.ContinueOnError)
	fl.SetOutput(stderr)
	fl.StringVar(&c.Socket, "socket", "", "socket the plugin serves the volume's descriptor on: <"+fusemode.SidecarVolume+" volume>/<volume name>/"+fusemode.SocketName+" (required)")
	c.Server.Flags(fl)
	fl.DurationVar(&c.Delay, "delay", 0, "wait this long before connecting (holds the sidecar back, to show that the mount blocks until it serves)")
	fl.DurationVar(&c.Wait, "wait", 5*time.Minute, "give up when the socket does not accept a connection within this time")
	fl.DurationVar(&c.ReceiveTimeout, "receive-timeout", 10*time.Second, "give up when the plugin sends no descriptor within this time after connecting")
	fl.BoolVar(&c.Server.DirectIO, "direct-io", false, "pass --direct-io to dummy-fuse")
	if err := command.Parse(fl, args); err != nil {
		return c, err
	}
	switch {
	case fl.NArg() != 0:
		return c, command.Usagef("unexpected arguments: %q", fl.Args())
	case c.Socket == "":
		return c, command.Usagef("--socket is required")
	case c.Delay < 0 || c.Wait <= 0 || c.ReceiveTimeout <= 0:
		return c, command.Usagef("--delay must not be negative, --wait and --receive-timeout must be positive")
	}
	return c, nil
}

// Run is the subcommand. It returns when the FUSE server exits (its exit code becomes the command's) or, after
// SIGTERM/SIGINT, once the server stopped (nil, also when none was started yet).
func Run(ctx context.Context, args []string, streams command.Streams) error {
	c, err := ParseArgs(args, streams.Err)
	if err != nil {
		return err
	}
	socket := c.Socket
	server, err := fuseserver.New(c.Server)
	if err != nil {
		return err
	}
	kind := server.Kind()
	// The first line says when the container started (the sidecar's own clock, see logf).
	if c.Delay > 0 {
		logf(streams.Err, "started: connecting to %s in %s", socket, c.Delay)
	} else {
		logf(streams.Err, "started: connecting to %s", socket)
	}
	select {
	case <-ctx.Done():
		return nil
	case <-time.After(c.Delay):
	}
	dev, cfg, err := receive(ctx, socket, c.Wait, c.ReceiveTimeout)
	if errors.Is(err, unix.EPROTOTYPE) {
		// A session socket: the plugin keeps its copy of the connection (--sidecar-keep-fd). Be its keeper for
		// this volume: the connection comes over the session, new or to take over, and a successor of this
		// container gets it again. It lives and dies with its FUSE server, as without the kept copy.
		if !kind.TakesOver {
			return fmt.Errorf("the plugin keeps its copy of the connection (%s is a session socket), which needs a FUSE server that takes a live connection over, and %s cannot: %s", socket, kind.Name, kind.WhyNot)
		}
		logf(streams.Err, "the plugin keeps its copy of the connection (%s is a session socket): serving it as its keeper", socket)
		var args []string
		if c.Server.DirectIO {
			args = append(args, "--direct-io")
		}
		k, err := keeper.New(keeper.Config{PluginSocket: socket, DummyFusePath: server.Path(), ServerArgs: args, VolumesPerServer: 1, Role: "sidecar", ExitWithServer: true}, streams.Err)
		if err != nil {
			return err
		}
		return serverExit(k.Run(ctx))
	}
	if err != nil {
		if ctx.Err() != nil {
			// SIGTERM while waiting for the plugin (the pod is deleted): a clean stop, as after serving.
			logf(streams.Err, "stopped before the plugin handed over a connection")
			return nil
		}
		return err
	}
	logf(streams.Err, "%s of volume %s (readOnly=%v) from %s", contract.SidecarReceived, cfg.VolumeID, cfg.ReadOnly, socket)

	cmdArgs, err := server.FDArgs()
	if err != nil {
		dev.Close()
		return fmt.Errorf("%s cannot serve the connection: %w", server.Name(), err)
	}
	cmd := fuseserver.Command(server, cmdArgs)
	cmd.ExtraFiles = []*os.File{dev} // fd 3 (fuseserver.FD) in the server
	cmd.Stdout, cmd.Stderr = streams.Out, streams.Err
	// The server dies with this process, as it would with the container: the kernel sends the parent-death
	// signal when the forking thread exits (golang/go#27505), so that thread stays locked until the end.
	runtime.LockOSThread()
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	dev.Close() // the server holds the connection now; this process keeps no copy
	if err != nil {
		return fmt.Errorf("starting %s: %w", server.Name(), err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = cmd.Process.Signal(syscall.SIGTERM)
		err = <-done
	}
	if err != nil {
		err = fmt.Errorf("%s: %w", server.Name(), err)
	}
	return serverExit(err)
}

// logf writes one line stamped with this process's clock (RFC 3339, UTC, nanoseconds): whoever reads the log
// later (a scenario backend tailing it every few milliseconds) learns when it happened, not when it was seen.
func logf(w io.Writer, format string, a ...any) {
	fmt.Fprintf(w, "%s csi-plugin sidecar: %s\n", time.Now().UTC().Format(time.RFC3339Nano), fmt.Sprintf(format, a...))
}

// receive connects to socket within wait and receives the descriptor within recvTimeout.
func receive(ctx context.Context, socket string, wait, recvTimeout time.Duration) (*os.File, fusemode.Handover, error) {
	var cfg fusemode.Handover
	dctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	conn, err := fdpass.Dial(dctx, "unix", socket, 100*time.Millisecond)
	if err != nil {
		return nil, cfg, err
	}
	defer conn.Close()
	dev, err := fdpass.Receive(conn, &cfg, time.Now().Add(recvTimeout))
	if err != nil {
		return nil, cfg, fmt.Errorf("%s: %w", socket, err)
	}
	return dev, cfg, nil
}

// serverExit makes the death of the FUSE server the command's exit status (137 after SIGKILL, as a shell
// reports it), in both ways the sidecar runs it: the container ends as its server did.
func serverExit(err error) error {
	var e *exec.ExitError
	if !errors.As(err, &e) {
		return err
	}
	code := 1
	if ws, ok := e.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		code = 128 + int(ws.Signal())
	} else if c := e.ExitCode(); c > 0 {
		code = c
	}
	return &command.ExitError{Code: code, Err: err}
}
