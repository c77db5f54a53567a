package remediate

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
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

// MountHealth tells, for another driver's volume, a dead FUSE mount from a live one by itself: a statfs of the
// target through Prober, which reaches the FUSE server (the kernel caches no answer to it), so a server that is
// gone answers ENOTCONN at once and one that is stuck leaves the call unanswered past the prober's timeout. No
// caller ever waits longer than that timeout, and calls to a stuck mount do not pile up (mounts.Prober).
//
// It needs to see the targets' mounts (kubelet's directory with HostToContainer propagation) and to be let into
// them: a FUSE mount made without allow_other lets in only the user that mounted it, and answers anyone else's
// statfs with its filesystem type alone, which looks live. CSI drivers mount as root, the user the remediator
// runs as.
type MountHealth struct {
	Prober *mounts.Prober
}

// Problem implements Health.
func (h MountHealth) Problem(_ context.Context, volumeID, target string) (string, error) {
	st, err := h.Prober.Statfs(target)
	switch {
	case err == nil && st.Type == mounts.FUSESuperMagic:
		return "", nil
	case err == nil:
		return "", fmt.Errorf("%s is not a FUSE mount (f_type %#x): the remediator judges FUSE mounts only", target, st.Type)
	case errors.Is(err, mounts.ErrTimeout):
		return fmt.Sprintf("FuseServerNotResponding: the FUSE server of volume %s does not answer statfs within %s", volumeID, h.Prober.Timeout()), nil
	case mounts.IsDead(err):
		return fmt.Sprintf("FuseServerGone: the FUSE mount of volume %s answers %v", volumeID, errors.Unwrap(err)), nil
	}
	return "", fmt.Errorf("statfs of the target of volume %s: %w", volumeID, err)
}
