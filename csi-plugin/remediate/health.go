package remediate

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// PluginHealth asks the plugin through its CSI socket, with the RPC kubelet v1.37 uses: NodeGetVolumeHealth
// checks the volume's staging mount and the target, each within the plugin's probe timeout, so a stuck FUSE
// server is an answer ("not responding"), not a hang. Timeout bounds the call anyway (a plugin that is itself
// stuck or restarting).
type PluginHealth struct {
	Node    csi.NodeClient
	Timeout time.Duration
}

// Problem implements Health.
func (h PluginHealth) Problem(ctx context.Context, volumeID, target string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, h.Timeout)
	defer cancel()
	resp, err := h.Node.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{VolumeId: volumeID, VolumePublishPath: target})
	if err != nil {
		return "", fmt.Errorf("NodeGetVolumeHealth of volume %s at %s: %w", volumeID, target, err)
	}
	var parts []string
	for _, e := range resp.GetVolumeHealth().GetHealthStatuses() {
		parts = append(parts, fmt.Sprintf("%s %s: %s", e.GetStatus(), e.GetReason(), e.GetMessage()))
	}
	return strings.Join(parts, "; "), nil
}
