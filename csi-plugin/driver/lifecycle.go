package driver

import (
	"context"
	"errors"
	"io/fs"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/moby/sys/mountinfo"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/fusemode"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/restore"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/state"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/kubeletpath"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
)

// This file is a volume's lifecycle on the host: staging (a FUSE server on the staging path), publishing (bind
// mounts of it), their repair when a server died, and their teardown. The RPC handlers (nodeserver.go) and the
// restore (restorer.go) check arguments and take the volume's lock, then come here. The functions return gRPC
// status errors: the answer the CO gets, and a message the restore logs.

// stopTimeout bounds a graceful stop of a FUSE server before it is killed.
const stopTimeout = 10 * time.Second

// action says what stage or publish did to make a mount answer: logged, and reported by the restore.
type action string

const (
	actionMounted   action = "mounted"   // stage: a new FUSE server on a path with nothing mounted
	actionRemounted action = "remounted" // stage: a dead mount unmounted and replaced by a new FUSE server
	actionBound     action = "bound"     // publish: a new bind mount on a path with nothing mounted
	actionRebound   action = "rebound"   // publish: a dead target unmounted and bound again
	actionStacked   action = "stacked"   // publish: a new bind mount on top of the dead target (restore.Stack)
	actionKept      action = "healthy"   // stage or publish: the mount answered already, nothing was done
)

// health is what a probe found at a mount point.
type health int

const (
	healthAnswers health = iota // a dummy-fuse filesystem answers
	healthDead                  // a mount whose FUSE server is gone (mounts.IsDead)
	healthHung                  // no answer within Config.ProbeTimeout: a server that is alive but stuck
	healthOther                 // anything else: nothing FUSE mounted, another filesystem, another error
)

// probe asks the mount at path whether it is an answering dummy-fuse filesystem, within Config.ProbeTimeout.
// The error says why not (nil with healthAnswers).
func (d *Driver) probe(path string) (health, error) {
	err := d.prober.Answers(path, fusemode.ServedFile)
	switch {
	case err == nil:
		return healthAnswers, nil
	case mounts.IsDead(err):
		return healthDead, err
	case errors.Is(err, mounts.ErrTimeout):
		return healthHung, err
	}
	return healthOther, err
}

// mountLookup returns the mounts stacked on a path, bottom first: mounts.MountsAt reads the mount table for a CSI
// call, a restore looks every path up in one snapshot of it (tableLookup), which keeps it linear in volumes.
type mountLookup func(path string) ([]*mountinfo.Info, error)

// layers counts the mounts stacked on path.
func (look mountLookup) layers(path string) (int, error) {
	ms, err := look(path)
	return len(ms), err
}

// stage makes a FUSE mount of volume id answer at path: an answering mount is kept (idempotency), a dead one is
// lazily unmounted and replaced, a missing one is started. It returns what it did. The caller holds the volume's
// lock. NodeStageVolume, NodePublishVolume (the repair of a dead staging mount, and the staging of an inline
// ephemeral volume) and the restore all come here.
func (d *Driver) stage(ctx context.Context, id, path string, readOnly, ephemeral bool, capability *state.Capability, look mountLookup) (action, error) {
	if other := d.volumeOfPath(path); other != "" && other != id {
		return "", status.Errorf(codes.AlreadyExists, "staging_target_path %q is in use by volume %q", path, other)
	}
	known, isKnown := d.lookup(id)
	if isKnown && known.stagingPath != path {
		return "", status.Errorf(codes.AlreadyExists, "volume %q is already staged at %q", id, known.stagingPath)
	}
	if isKnown && known.ephemeral != ephemeral {
		return "", status.Errorf(codes.AlreadyExists, "volume %q is already staged as %s volume", id, lifecycle(known.ephemeral))
	}
	if isKnown && !compatible(known.cap, capability) {
		return "", status.Errorf(codes.AlreadyExists, "volume %q is already staged with %s, not %s", id, describe(known.cap), describe(capability))
	}
	if capability == nil {
		capability = known.cap
	}
	mp, err := d.prepare("staging_target_path", path, isKnown, known.createdDir, codes.FailedPrecondition, look)
	if err != nil {
		return "", err
	}
	createdDir, layers := mp.createdDir, mp.layers
	act := actionMounted
	if layers > 0 {
		h, perr := healthDead, error(errInterrupted)
		if !known.pending {
			h, perr = d.probe(path)
		}
		switch h {
		case healthAnswers:
			return actionKept, nil
		case healthDead:
			// The idempotency trap: the mount is in the table (IsLikelyNotMountPoint says "mounted") but its
			// server is gone. Answering OK here would hand kubelet a dead volume.
			klog.InfoS("Staging mount is dead, mounting it again", "volumeID", id, "stagingPath", path, "err", perr)
			if known.server != nil {
				sctx, cancel := context.WithTimeout(ctx, stopTimeout)
				_ = known.server.Stop(sctx) // normally gone already; make sure before starting another
				cancel()
			}
			for i := 0; i < layers; i++ {
				if err := mounts.UnmountLazy(path); err != nil && !errors.Is(err, unix.EINVAL) {
					return "", status.Errorf(codes.Internal, "unmounting dead staging mount: %v", err)
				}
			}
			act = actionRemounted
		case healthHung:
			return "", probeStatus("staging mount", perr)
		default:
			return "", status.Errorf(codes.FailedPrecondition, "staging_target_path %q holds a mount that is not a dummy-fuse filesystem: %v", path, perr)
		}
	}
	rec := state.Stage{VolumeID: id, StagingPath: path, ReadOnly: readOnly, FuseMode: d.mode.Name(), CreatedDir: createdDir, Ephemeral: ephemeral, Capability: capability}
	var srv fusemode.Server
	if d.place.stagingMounted() { // otherwise the stage is only a record: the mode mounts the targets itself
		if !isKnown {
			if err := d.recordStageIntent(rec); err != nil {
				d.undoDir(path, createdDir)
				return "", err
			}
		}
		if srv, err = d.mode.Start(ctx, fusemode.Request{VolumeID: id, Mountpoint: path}); err != nil {
			d.undoDir(path, createdDir && !isKnown)
			d.dropStageIntent(rec, !isKnown)
			return "", modeStatus("starting the FUSE server", err)
		}
		rec.Init = srv.InitRecord() // the new connection's handover record, in a mode that keeps connections alive
		d.hookMounted(path)
	}
	v := &volume{id: id, stagingPath: path, readOnly: readOnly, createdDir: createdDir, ephemeral: ephemeral, cap: capability, server: srv}
	if !isKnown || known.pending || known.createdDir != createdDir || known.readOnly != readOnly || known.cap == nil || rec.Init != nil {
		rec.Time = time.Now().UTC()
		if err := d.putStage(rec); err != nil {
			_ = d.stopAndUnmount(ctx, id, srv, path)
			return "", err
		}
	}
	d.setStaged(v)
	klog.V(2).InfoS("Staged volume", "volumeID", id, "stagingPath", path, "ephemeral", ephemeral, "action", act, "pid", pidOf(srv))
	return act, nil
}

// lifecycle names a volume's CSI lifecycle mode for messages.
func lifecycle(ephemeral bool) string {
	if ephemeral {
		return "an inline ephemeral"
	}
	return "a persistent"
}

func pidOf(s fusemode.Server) int {
	if s == nil {
		return 0
	}
	return s.PID()
}

// stopAndUnmount unmounts everything stacked on path, then stops srv (when known) by its PID. Unmounting first
// lets dummy-fuse end on its own (the kernel closes the connection); a SIGTERM first would make it unmount and
// then wait for a connection that bind mounts elsewhere may keep open.
func (d *Driver) stopAndUnmount(ctx context.Context, id string, srv fusemode.Server, path string) error {
	_, uerr := mounts.UnmountAll(path)
	if srv != nil {
		select {
		case <-srv.Done():
		case <-time.After(time.Second):
		}
		sctx, cancel := context.WithTimeout(ctx, stopTimeout)
		err := srv.Stop(sctx)
		cancel()
		if err != nil {
			klog.ErrorS(err, "Stopping the FUSE server", "volumeID", id)
		}
	}
	return uerr
}

// unstage unmounts the staging mount of volume id at path, stops its FUSE server, removes the directory when the
// plugin created it (or owns it: the ephemeral directory), deletes the record and forgets the volume. The caller
// holds the volume's lock and has checked that path is not another volume's. NodeUnstageVolume and the
// unpublish of an inline ephemeral volume's last target both come here.
func (d *Driver) unstage(ctx context.Context, id, path string) error {
	v, known := d.lookup(id)
	if err := d.stopAndUnmount(ctx, id, v.server, path); err != nil {
		return status.Errorf(codes.Internal, "unmounting staging_target_path: %v", err)
	}
	if (known && v.createdDir) || path == d.ephemeralStagingPath(id) {
		// rmdir, not remove: only ever an empty directory, never a file.
		if err := unix.Rmdir(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return status.Errorf(codes.Internal, "removing staging_target_path: %v", err)
		}
	}
	if d.store != nil {
		if err := d.store.DeleteStage(id); err != nil {
			return status.Errorf(codes.Internal, "%v", err)
		}
	}
	d.forgetStaged(id)
	klog.V(2).InfoS("Unstaged volume", "volumeID", id, "stagingPath", path, "ephemeral", v.ephemeral)
	return nil
}

// dropUnusedEphemeral unstages inline ephemeral volume id when no target uses it: after a publish that failed
// for good, kubelet considers the volume not mounted and will not unpublish it, so nothing else would stop its
// FUSE server. The caller holds the volume's lock.
func (d *Driver) dropUnusedEphemeral(ctx context.Context, id string) {
	v, ok := d.lookup(id)
	if !ok || !v.ephemeral || len(v.targets) > 0 {
		return
	}
	if err := d.unstage(ctx, id, v.stagingPath); err != nil {
		klog.ErrorS(err, "Unstaging unused ephemeral volume", "volumeID", id, "stagingPath", v.stagingPath)
	}
}

// ensureStagingAnswers checks the staging mount of a known volume before binding it; a dead (or vanished) one is
// repaired from what the plugin knows about the volume (ceph-csi does the same from its saved record).
func (d *Driver) ensureStagingAnswers(ctx context.Context, id, staging string) error {
	if !d.place.stagingMounted() {
		return nil // nothing is mounted on the staging path: the targets get their own mounts
	}
	h, err := d.probe(staging)
	switch {
	case h == healthAnswers:
		return nil
	case h == healthDead, errors.Is(err, mounts.ErrNotFUSE):
		klog.InfoS("Staging mount is dead or gone, repairing it before publishing", "volumeID", id, "stagingPath", staging, "err", err)
		v, _ := d.lookup(id)
		_, err := d.stage(ctx, id, staging, v.readOnly, v.ephemeral, nil, mounts.MountsAt)
		return err
	case h == healthHung:
		return probeStatus("staging mount", err)
	}
	return status.Errorf(codes.FailedPrecondition, "volume %q is not staged at %q: %v", id, staging, err)
}

// claimTarget checks that targetPath may be published for volume id: it is neither another volume's path nor
// this volume's staging path. It returns the volume's record of the target (mine: there is one) and the
// capability to record, the recorded one when the caller has none.
func (d *Driver) claimTarget(id, targetPath string, capability *state.Capability) (rec target, mine bool, _ *state.Capability, _ error) {
	if other := d.volumeOfPath(targetPath); other != "" && other != id {
		return target{}, false, nil, status.Errorf(codes.AlreadyExists, "target_path %q is in use by volume %q", targetPath, other)
	}
	known, _ := d.lookup(id)
	if known.stagingPath == targetPath {
		return target{}, false, nil, status.Errorf(codes.InvalidArgument, "target_path %q is the staging path of volume %q", targetPath, id)
	}
	rec, mine = known.targets[targetPath]
	if capability == nil {
		capability = rec.cap
	}
	return rec, mine, capability, nil
}

// publish makes target a bind mount of the (answering) staging mount: an answering target is kept, a dead one is
// repaired by the restore strategy, a missing one is created. Only a target that is free or recorded as this
// volume's is touched. The caller holds the volume's and the paths' locks. NodePublishVolume, the repair of
// sibling targets and the restore all come here.
func (d *Driver) publish(id, staging, targetPath string, readOnly bool, capability *state.Capability, look mountLookup) (action, error) {
	rec, mine, capability, err := d.claimTarget(id, targetPath, capability)
	if err != nil {
		return "", err
	}
	strategy := d.cfg.RestoreStrategy
	mp, err := d.prepare("target_path", targetPath, mine, rec.createdDir, codes.AlreadyExists, look)
	if err != nil {
		return "", err
	}
	createdDir, layers := mp.createdDir, mp.layers
	act := actionBound
	var deadDev uint64 // restore.Setns: the dead connection of this target, to be replaced in running containers
	if layers > 0 && rec.pending {
		// An interrupted publish's bind mount: nobody was told it exists, so it is replaced.
		if _, err := mounts.UnmountAll(targetPath); err != nil {
			return "", status.Errorf(codes.Internal, "unmounting what an interrupted publish mounted: %v", err)
		}
	} else if layers > 0 {
		switch h, perr := d.probe(targetPath); h {
		case healthAnswers:
			same, err := sameMount(look, staging, targetPath)
			if err != nil {
				return "", status.Errorf(codes.Internal, "%v", err)
			}
			if !same {
				return "", status.Errorf(codes.AlreadyExists, "target_path %q holds another mount", targetPath)
			}
			act = actionKept
		case healthDead:
			klog.InfoS("Target mount is dead, repairing it", "volumeID", id, "targetPath", targetPath, "strategy", strategy, "err", perr)
			if strategy == restore.Stack {
				// Stack on the bottom mount only: the dead layers that earlier restores stacked above it serve no
				// one (see restore.Stack), and without this every crash would add one.
				for i := 1; i < layers; i++ {
					if err := mounts.UnmountLazy(targetPath); err != nil {
						return "", status.Errorf(codes.Internal, "unmounting a dead stacked layer: %v", err)
					}
				}
				act = actionStacked
			} else {
				if strategy == restore.Setns {
					if top, err := mounts.Top(targetPath); err == nil && top != nil {
						deadDev = unix.Mkdev(uint32(top.Major), uint32(top.Minor))
					}
				}
				if _, err := mounts.UnmountAll(targetPath); err != nil {
					return "", status.Errorf(codes.Internal, "unmounting dead target: %v", err)
				}
				act = actionRebound
			}
		case healthHung:
			return "", probeStatus("target mount", perr)
		default:
			return "", status.Errorf(codes.AlreadyExists, "target_path %q holds a mount that is not this volume: %v", targetPath, perr)
		}
	}
	r := state.Publish{VolumeID: id, StagingPath: staging, TargetPath: targetPath, ReadOnly: readOnly, FuseMode: d.mode.Name(), CreatedDir: createdDir, Capability: capability}
	if act != actionKept {
		if !mine {
			if err := d.recordIntent(r); err != nil {
				d.undoDir(targetPath, createdDir)
				return "", err
			}
		}
		if err := mounts.Bind(staging, targetPath, readOnly); err != nil {
			d.undoDir(targetPath, createdDir && !mine)
			d.dropIntent(r, !mine)
			return "", status.Errorf(codes.Internal, "%v", err)
		}
		if h, err := d.probe(targetPath); h != healthAnswers {
			_ = mounts.UnmountLazy(targetPath)
			d.undoDir(targetPath, createdDir && !mine)
			d.dropIntent(r, !mine)
			return "", status.Errorf(codes.Internal, "the new bind mount does not answer: %v", err)
		}
		d.hookMounted(targetPath)
		if deadDev != 0 {
			// Only the containers of the target's pod (kubelet names it in the path): another pod of the volume
			// is re-bound by the repair of its own target.
			var res restore.Reattached
			err := errors.New("the target path names no pod")
			if _, podUID, _, ok := kubeletpath.SplitTarget(targetPath); ok {
				res, err = restore.Reattach(deadDev, staging, podUID)
			}
			if err != nil {
				res.Error = err.Error()
			}
			r.Reattached = &res // the remediator's evidence that running containers have the new mount
			klog.InfoS("Re-bound the target inside running containers", "volumeID", id, "targetPath", targetPath,
				"namespaces", res.Namespaces, "replaced", res.Replaced, "failed", res.Failed, "err", err)
		}
	}
	t := target{readOnly: readOnly, createdDir: createdDir, cap: capability}
	// A new mount renews the record's time: the remediator (csi-plugin/remediate) compares it with container
	// start times, since a container started before a repair still holds the dead mount.
	if act != actionKept || !mine || rec.pending || rec.readOnly != readOnly || rec.createdDir != createdDir || rec.cap == nil {
		r.Time = time.Now().UTC()
		if err := d.putPublish(r); err != nil {
			if act != actionKept {
				_ = mounts.UnmountLazy(targetPath)
			}
			return "", err
		}
	}
	d.setPublished(id, targetPath, t)
	return act, nil
}

// wantEmptyDir refuses to mount on anything but an empty directory: mounting on a file fails or hides it, and
// mounting on a directory with entries hides them (and unpublishing could never remove the directory).
func (d *Driver) wantEmptyDir(field, path string) error {
	empty, err := d.prober.IsEmptyDir(path)
	if err != nil {
		return probeStatus("checking "+field, err)
	}
	if !empty {
		return status.Errorf(codes.FailedPrecondition, "%s %q is not an empty directory", field, path)
	}
	return nil
}

// probeStatus turns the error of a bounded filesystem call into a status: Unavailable when the filesystem did not
// answer in time (the CO retries), Internal otherwise.
func probeStatus(what string, err error) error {
	if errors.Is(err, mounts.ErrTimeout) {
		return status.Errorf(codes.Unavailable, "%s is not responding: %v", what, err)
	}
	return status.Errorf(codes.Internal, "%s: %v", what, err)
}

// unpublish unmounts every layer stacked on path (the "stack" strategy leaves a dead mount under the live one),
// removes the directory when the plugin created it, deletes the record and forgets the target; it returns how many
// mounts it unmounted. The caller holds the volume's lock and has found path in the volume's records (rec).
func (d *Driver) unpublish(id, path string, rec target) (int, error) {
	d.mode.Release(path) // what the mode keeps for a target of its own (a descriptor still waiting for its server)
	layers, err := mounts.UnmountAll(path)
	if err != nil {
		return 0, status.Errorf(codes.Internal, "unmounting target_path: %v", err)
	}
	if rec.createdDir {
		// rmdir, not remove: only ever the empty directory the plugin made, never a file.
		if err := unix.Rmdir(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			klog.ErrorS(err, "Leaving the target directory the plugin created", "volumeID", id, "targetPath", path)
		}
	}
	if d.store != nil {
		if err := d.store.DeletePublish(path); err != nil {
			return 0, status.Errorf(codes.Internal, "%v", err)
		}
	}
	d.forgetPublished(id, path)
	return layers, nil
}

// unstageEphemeral unstages volume id if it is an inline ephemeral volume that no target uses any more. A volume
// the plugin has no record of (no --state-dir, and restarted) is recognised by its directory in the ephemeral
// directory, which only the plugin writes to. The caller holds the volume's lock.
func (d *Driver) unstageEphemeral(ctx context.Context, id string) error {
	v, known := d.lookup(id)
	path := v.stagingPath
	switch {
	case known && (!v.ephemeral || len(v.targets) > 0):
		return nil
	case !known:
		path = d.ephemeralStagingPath(id)
		exists, err := d.prober.Exists(path)
		if err != nil {
			return probeStatus("checking the ephemeral staging path", err)
		}
		if !exists || d.stagedAt(path, id) != "" {
			return nil
		}
	}
	return d.unstage(ctx, id, path)
}

// repairSiblings re-binds the other targets of volume id that stopped answering. Under shared mount propagation
// (kubelet's directories on a real node) the targets of one volume are peers: the mount that the "stack"
// strategy put on top of one target was propagated to all of them, and unmounting it from one target
// propagated that unmount to the others, leaving them on their dead mount again.
func (d *Driver) repairSiblings(id string) {
	v, ok := d.lookup(id)
	if !ok {
		return
	}
	if h, _ := d.probe(v.stagingPath); h != healthAnswers {
		return
	}
	for path, t := range v.targets {
		if h, _ := d.probe(path); h != healthDead {
			continue
		}
		klog.InfoS("Target lost its mount through mount propagation, repairing it", "volumeID", id, "targetPath", path)
		if _, err := d.publish(id, v.stagingPath, path, t.readOnly, t.cap, mounts.MountsAt); err != nil {
			klog.ErrorS(err, "Repairing target", "volumeID", id, "targetPath", path)
		}
	}
}
