// Command cricleanup stops and removes every pod sandbox and container of a CRI runtime (the cluster's own
// containerd), so that the runtime itself tears down pod networking (CNI DEL: veth, IP lease, iptables
// masquerade rules), network namespaces and container mounts before hack/cluster/down.sh stops it.
// It talks CRI directly so it works whether or not the API server and kubelet are still alive.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "cricleanup:", err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	fl := flag.NewFlagSet("cricleanup", flag.ContinueOnError)
	endpoint := fl.String("endpoint", "", "CRI socket, e.g. unix:///run/dummy-fuse-csi/containerd/containerd.sock (required)")
	timeout := fl.Duration("timeout", 2*time.Minute, "give up after this long")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if *endpoint == "" || fl.NArg() != 0 {
		return fmt.Errorf("usage: cricleanup --endpoint unix:///path/to.sock [--timeout 2m]")
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	conn, err := grpc.NewClient(*endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("connect %s: %w", *endpoint, err)
	}
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	return cleanup(ctx, rt, out)
}

func cleanup(ctx context.Context, rt runtimeapi.RuntimeServiceClient, out io.Writer) error {
	sandboxes, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return fmt.Errorf("list pod sandboxes: %w", err)
	}
	for _, sb := range sandboxes.GetItems() {
		name := sb.GetMetadata().GetNamespace() + "/" + sb.GetMetadata().GetName()
		// StopPodSandbox kills the sandbox's containers and runs CNI DEL; RemovePodSandbox drops them.
		if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.GetId()}); err != nil {
			return fmt.Errorf("stop pod sandbox %s (%s): %w", name, sb.GetId(), err)
		}
		if _, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.GetId()}); err != nil {
			return fmt.Errorf("remove pod sandbox %s (%s): %w", name, sb.GetId(), err)
		}
		fmt.Fprintf(out, "removed pod sandbox %s\n", name)
	}
	// Containers whose sandbox is already gone (normally none).
	containers, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return fmt.Errorf("list containers: %w", err)
	}
	for _, c := range containers.GetContainers() {
		if _, err := rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: c.GetId()}); err != nil {
			return fmt.Errorf("stop container %s: %w", c.GetId(), err)
		}
		if _, err := rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: c.GetId()}); err != nil {
			return fmt.Errorf("remove container %s: %w", c.GetId(), err)
		}
		fmt.Fprintf(out, "removed container %s\n", c.GetMetadata().GetName())
	}
	fmt.Fprintf(out, "%d pod sandboxes and %d stray containers removed\n", len(sandboxes.GetItems()), len(containers.GetContainers()))
	return nil
}
