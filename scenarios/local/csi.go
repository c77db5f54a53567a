package local

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/csiprobe"
)

// csiClient talks CSI to the plugin over its unix socket, as kubelet does.
type csiClient struct {
	conn *grpc.ClientConn
	id   csi.IdentityClient
	node csi.NodeClient
}

func dialCSI(sock string) (*csiClient, error) {
	conn, err := grpc.NewClient("unix://"+sock,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		// The socket appears only when the (re)started plugin listens: retry quickly, not after grpc's
		// default 1 s+ reconnect back-off, so that "plugin ready" is measured, not the client's back-off.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.5, MaxDelay: 200 * time.Millisecond},
			MinConnectTimeout: time.Second,
		}))
	if err != nil {
		return nil, fmt.Errorf("CSI client for %s: %w", sock, err)
	}
	return &csiClient{conn: conn, id: csi.NewIdentityClient(conn), node: csi.NewNodeClient(conn)}, nil
}

func (c *csiClient) Close() error { return c.conn.Close() }

// ready reports whether the plugin answers Probe with ready.
func (c *csiClient) ready(ctx context.Context) (bool, error) { return csiprobe.Ready(ctx, c.id) }

// volume is the one CSI volume of a scenario, as kubelet sees it: a static PV of the driver, used by one pod.
type volume struct {
	driver, handle, pvName, podName, podNamespace, podUID string
	staging, target                                       string
}

func mountCapability() *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
}

// stageAndPublish does what kubelet does for a new pod using the volume: NodeGetCapabilities, NodeStageVolume
// (when the plugin has STAGE_UNSTAGE_VOLUME) on the staging dir kubelet created, then NodePublishVolume with
// the pod info (podInfoOnMount) on the target below the dir kubelet created. logf gets one line per call.
func (c *csiClient) stageAndPublish(ctx context.Context, v volume, mkdir func(string) error, logf func(string, ...any)) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	info, err := c.node.NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
	if err != nil {
		return fmt.Errorf("NodeGetInfo: %w", err)
	}
	logf("NodeGetInfo: node_id=%s", info.GetNodeId())
	caps, err := c.node.NodeGetCapabilities(ctx, &csi.NodeGetCapabilitiesRequest{})
	if err != nil {
		return fmt.Errorf("NodeGetCapabilities: %w", err)
	}
	stage := false
	for _, cp := range caps.GetCapabilities() {
		if cp.GetRpc().GetType() == csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME {
			stage = true
		}
	}
	logf("NodeGetCapabilities: STAGE_UNSTAGE_VOLUME=%t", stage)
	staging := ""
	if stage {
		if err := mkdir(v.staging); err != nil {
			return err
		}
		if _, err := c.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{
			VolumeId: v.handle, StagingTargetPath: v.staging, VolumeCapability: mountCapability(),
		}); err != nil {
			return fmt.Errorf("NodeStageVolume %s: %w", v.staging, err)
		}
		logf("NodeStageVolume: OK %s", v.staging)
		staging = v.staging
	}
	// kubelet creates the target's parent; the driver creates the target itself.
	if err := mkdir(filepath.Dir(v.target)); err != nil {
		return err
	}
	if _, err := c.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{
		VolumeId: v.handle, StagingTargetPath: staging, TargetPath: v.target, VolumeCapability: mountCapability(),
		VolumeContext: map[string]string{
			"csi.storage.k8s.io/pod.name":            v.podName,
			"csi.storage.k8s.io/pod.namespace":       v.podNamespace,
			"csi.storage.k8s.io/pod.uid":             v.podUID,
			"csi.storage.k8s.io/serviceAccount.name": "default",
			"csi.storage.k8s.io/ephemeral":           "false",
		},
	}); err != nil {
		return fmt.Errorf("NodePublishVolume %s: %w", v.target, err)
	}
	logf("NodePublishVolume: OK %s", v.target)
	return nil
}

// unpublishAndUnstage is kubelet's teardown of the volume after the pod is gone.
func (c *csiClient) unpublishAndUnstage(ctx context.Context, v volume, logf func(string, ...any)) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := c.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: v.handle, TargetPath: v.target}); err != nil {
		return fmt.Errorf("NodeUnpublishVolume %s: %w", v.target, err)
	}
	logf("NodeUnpublishVolume: OK %s", v.target)
	if _, err := c.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: v.handle, StagingTargetPath: v.staging}); err != nil {
		return fmt.Errorf("NodeUnstageVolume %s: %w", v.staging, err)
	}
	logf("NodeUnstageVolume: OK %s", v.staging)
	return nil
}
