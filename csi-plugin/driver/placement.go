package driver

import (
	"context"
	"errors"
	"fmt"
	"os"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/fusemode"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/state"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
)

// placement is how the plugin makes a staged volume reach its targets, chosen once in New from the mode's
// fusemode.Placement: bind mounts of the staging mount (bindMounts), or a mount of its own on each target that the
// mode makes (targetMounts, targets.go).
type placement interface {
	// stagingMounted says whether the staging path holds the volume's FUSE mount (the mode's Start serves it);
	// without one, staging only records the volume.
	stagingMounted() bool
	// publish mounts r.target for volume r.id. The caller holds the volume's and the paths' locks and has
	// checked the request against the records.
	publish(ctx context.Context, r publishRequest) (action, error)
	// restore makes recorded target rec answer again at start-up, or says why it is left as it is.
	restore(ctx context.Context, table *mounts.Table, rec state.Publish) (string, error)
}

func newPlacement(d *Driver) placement {
	if d.mode.Placement() == fusemode.OnTargets {
		return targetMounts{d}
	}
	return bindMounts{d}
}

// publishRequest is a checked NodePublishVolume.
type publishRequest struct {
	id, staging, target string
	readOnly            bool
	capability          *state.Capability
	volumeContext       map[string]string
}

// bindMounts is the placement of a mode that serves the staging path (fusemode.OnStagingPath): every target is a
// bind mount of the staging mount, repaired by the restore strategy when it died (lifecycle.go's publish).
type bindMounts struct{ d *Driver }

func (bindMounts) stagingMounted() bool { return true }

func (p bindMounts) publish(_ context.Context, r publishRequest) (action, error) {
	return p.d.publish(r.id, r.staging, r.target, r.readOnly, r.capability, mounts.MountsAt)
}

func (p bindMounts) restore(_ context.Context, table *mounts.Table, rec state.Publish) (string, error) {
	if h, err := p.d.probe(rec.StagingPath); h != healthAnswers {
		return "", fmt.Errorf("staging mount does not answer: %w", err)
	}
	act, err := p.d.publish(rec.VolumeID, rec.StagingPath, rec.TargetPath, rec.ReadOnly, nil, tableLookup(table))
	if err != nil {
		return "", errors.New(status.Convert(err).Message())
	}
	return string(act), nil
}

// mountpoint is what prepare found at a path the plugin is about to mount on.
type mountpoint struct {
	layers     int  // mounts stacked on it, all the plugin's own
	createdDir bool // the plugin created the directory (now, or as its record says)
}

// prepare is the prologue of every mount the plugin makes on a path (staging, publish). It counts the mounts
// stacked on path and refuses them (with code unowned) unless the records give path to the caller (mine): a mount
// this plugin has no record of may be anyone's (another volume's, the host's) and is never adopted. With nothing
// mounted, path must be an empty directory, created when missing (createdDir says whether the plugin created
// it, now or as its record says: it removes only those). A mount point is not touched: it may not answer.
func (d *Driver) prepare(field, path string, mine, createdDir bool, unowned codes.Code, look mountLookup) (mountpoint, error) {
	layers, err := look.layers(path)
	if err != nil {
		return mountpoint{}, status.Errorf(codes.Internal, "%v", err)
	}
	if layers > 0 && !mine {
		return mountpoint{}, status.Errorf(unowned, "%s %q holds a mount that this plugin has no record of", field, path)
	}
	if layers > 0 {
		return mountpoint{layers: layers, createdDir: createdDir}, nil
	}
	exists, err := d.prober.Exists(path)
	if err != nil {
		return mountpoint{}, probeStatus("checking "+field, err)
	}
	if !exists {
		if err := os.MkdirAll(path, 0o750); err != nil {
			return mountpoint{}, status.Errorf(codes.Internal, "creating %s: %v", field, err)
		}
		return mountpoint{createdDir: true}, nil
	}
	return mountpoint{createdDir: createdDir}, d.wantEmptyDir(field, path)
}

// modeStatus turns a mode's error into the answer the CO gets: Unavailable for fusemode.ErrRetry (a peer not
// there yet: the CO retries), InvalidArgument for fusemode.ErrInvalid, Internal otherwise.
func modeStatus(what string, err error) error {
	code := codes.Internal
	switch {
	case errors.Is(err, fusemode.ErrRetry):
		code = codes.Unavailable
	case errors.Is(err, fusemode.ErrInvalid):
		code = codes.InvalidArgument
	}
	return status.Errorf(code, "%s: %v", what, err)
}
