package driver

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/version"
)

// identityServer implements the CSI Identity service.
type identityServer struct {
	csi.UnimplementedIdentityServer
	d *Driver
}

var _ csi.IdentityServer = identityServer{}

func (i identityServer) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: i.d.cfg.DriverName, VendorVersion: version.Version}, nil
}

func (i identityServer) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	resp := &csi.GetPluginCapabilitiesResponse{}
	if i.d.cfg.ControllerServer != nil {
		resp.Capabilities = append(resp.Capabilities, &csi.PluginCapability{
			Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{
				Type: csi.PluginCapability_Service_CONTROLLER_SERVICE,
			}},
		})
	}
	return resp, nil
}

// Probe reports ready only once start-up, including the restore of recorded mounts, has finished.
func (i identityServer) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(i.d.Ready())}, nil
}
