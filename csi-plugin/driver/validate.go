package driver

import (
	"fmt"
	"slices"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/state"
)

// The validators return InvalidArgument errors that name the request field, so that a CO's event tells the user
// what to fix. Values they quote are clipped: a request is untrusted, and its fields end up in the log.

func validateVolumeID(id string) error {
	if id == "" {
		return status.Error(codes.InvalidArgument, "volume_id is required")
	}
	// The ID names the stage record file and appears in log lines: it must not be able to escape a directory.
	if err := state.ValidateFileName(id); err != nil {
		return status.Errorf(codes.InvalidArgument, "volume_id %q: %v", clip(id), err)
	}
	return nil
}

func validatePath(field, p string) error {
	if p == "" {
		return status.Errorf(codes.InvalidArgument, "%s is required", field)
	}
	if err := state.ValidatePath(p); err != nil {
		return status.Errorf(codes.InvalidArgument, "%s %q %v", field, clip(p), err)
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
	if _, ok := csi.VolumeCapability_AccessMode_Mode_name[int32(c.GetAccessMode().GetMode())]; !ok {
		return status.Errorf(codes.InvalidArgument, "volume_capability.access_mode %d is not defined by the CSI spec", c.GetAccessMode().GetMode())
	}
	m := c.GetMount()
	if len(m.GetFsType()) > maxLogged {
		return status.Errorf(codes.InvalidArgument, "volume_capability.mount.fs_type is %d bytes long", len(m.GetFsType()))
	}
	for _, f := range m.GetMountFlags() {
		if len(f) > maxLogged {
			return status.Errorf(codes.InvalidArgument, "volume_capability.mount.mount_flags has a flag of %d bytes", len(f))
		}
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

// capabilityOf returns what the plugin records of a (validated) capability.
func capabilityOf(c *csi.VolumeCapability) *state.Capability {
	return &state.Capability{
		AccessMode: c.GetAccessMode().GetMode().String(),
		FsType:     c.GetMount().GetFsType(),
		MountFlags: slices.Clone(c.GetMount().GetMountFlags()),
	}
}

// compatible reports whether a repeated call's capability matches the recorded one. A record of an older
// version has none: anything matches it.
func compatible(recorded, asked *state.Capability) bool {
	if recorded == nil || asked == nil {
		return true
	}
	return recorded.AccessMode == asked.AccessMode && recorded.FsType == asked.FsType && slices.Equal(recorded.MountFlags, asked.MountFlags)
}

func describe(c *state.Capability) string {
	if c == nil {
		return "an unrecorded capability"
	}
	return fmt.Sprintf("access mode %s, fs type %q, mount flags %q", c.AccessMode, c.FsType, c.MountFlags)
}

// maxLogged is how much of one untrusted value a message or log line quotes.
const maxLogged = 256

// clip shortens s for a message or a log line, saying how long it was.
func clip(s string) string {
	if len(s) <= maxLogged {
		return s
	}
	return fmt.Sprintf("%s…(%d bytes)", s[:maxLogged], len(s))
}

// maxLogLine is how much of a whole request, response or error a log line shows.
const maxLogLine = 8 << 10

// clipLine shortens a whole logged request, response or error.
func clipLine(s string) string {
	if len(s) <= maxLogLine {
		return s
	}
	return fmt.Sprintf("%s…(clipped, %d bytes)", s[:maxLogLine], len(s))
}

// clipErr is clip for an error's text.
func clipErr(err error) string { return clip(fmt.Sprint(err)) }
