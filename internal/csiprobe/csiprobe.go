// Package csiprobe asks a CSI plugin whether it is ready, as a container orchestrator does.
package csiprobe

import (
	"context"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// Timeout bounds one Probe call, so a plugin that accepts the connection but never answers is retried.
const Timeout = time.Second

// Ready calls Probe once and reports whether the plugin is ready. Per the CSI spec an unset ready field means
// ready; an error means the plugin could not be asked (not serving yet, or gone).
func Ready(ctx context.Context, id csi.IdentityClient) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	resp, err := id.Probe(ctx, &csi.ProbeRequest{})
	if err != nil {
		return false, err
	}
	return resp.GetReady() == nil || resp.GetReady().GetValue(), nil
}
