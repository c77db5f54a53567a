package driver

import (
	"path/filepath"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/state"
)

// The validators return InvalidArgument errors that name the request field, so that a CO's event tells the user
// what to fix.

func validateVolumeID(id string) error {
	if id == "" {
		return status.Error(codes.InvalidArgument, "volume_id is required")
	}
	// The ID names the stage record file and appears in log lines: it must not be able to escape a directory.
	if err := state.ValidateFileName(id); err != nil {
		return status.Errorf(codes.InvalidArgument, "volume_id %q: %v", id, err)
	}
	return nil
}

func validatePath(field, p string) error {
	switch {
	case p == "":
		return status.Errorf(codes.InvalidArgument, "%s is required", field)
	case strings.ContainsRune(p, 0):
		return status.Errorf(codes.InvalidArgument, "%s must not contain NUL", field)
	case !filepath.IsAbs(p):
		return status.Errorf(codes.InvalidArgument, "%s %q must be an absolute path", field, p)
	case filepath.Clean(p) != p:
		return status.Errorf(codes.InvalidArgument, "%s %q must be a clean path (no '..', '.', '//' or trailing '/')", field, p)
	case p == "/":
		return status.Errorf(codes.InvalidArgument, "%s must not be /", field)
	}
	return nil
}

func validateCapability(c *csi.VolumeCapability) error {
	switch {
	case c == nil:
		return status.Error(codes.InvalidArgument, "volume_capability is required")
	case c.GetBlock() != nil:
		return status.Error(codes.InvalidArgument, "volume_capability: block access type is not supported (dummy-fuse is a filesystem)")
	case c.GetMount() == nil:
		return status.Error(codes.InvalidArgument, "volume_capability: access_type must be mount")
	case c.GetAccessMode() == nil || c.GetAccessMode().GetMode() == csi.VolumeCapability_AccessMode_UNKNOWN:
		return status.Error(codes.InvalidArgument, "volume_capability.access_mode is required")
	}
	return nil
}

// readOnlyMode reports whether the access mode only allows reading.
func readOnlyMode(c *csi.VolumeCapability) bool {
	switch c.GetAccessMode().GetMode() {
	case csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY, csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY:
		return true
	}
	return false
}
