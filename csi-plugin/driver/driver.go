// Package driver is the dummy-fuse CSI node plugin: Identity and Node services on one gRPC server, FUSE servers
// placed by a fusemode.Mode, mount records in a state.Store, and the restore of those records at start-up.
package driver

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"k8s.io/klog/v2"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/fusemode"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/restore"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/csi-plugin/state"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/contract"
	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/mounts"
)

// DefaultDriverName is the CSI driver name unless --drivername says otherwise.
const DefaultDriverName = "dummy-fuse-csi"

// probesPerMount bounds the filesystem calls that may be outstanding on a FUSE connection that stopped answering
// (its staging mount and every bind of it count together): each keeps an OS thread blocked in the kernel until the
// FUSE server answers (see mounts.Prober).
const probesPerMount = 4

// Config is everything the plugin is started with; main fills it from flags.
type Config struct {
	// Endpoint is the CSI socket: unix:///path, unix:/path or a bare path.
	Endpoint   string
	NodeID     string
	DriverName string
	// StateDir holds the mount records; empty means none are kept (and nothing can be restored).
	StateDir string
	// EphemeralDir is where the plugin stages inline ephemeral volumes itself, one directory per volume ID
	// (kubelet calls no NodeStageVolume for them). Empty means "ephemeral" beside the CSI socket.
	EphemeralDir string
	// RestoreMounts replays the records at start-up, before Probe reports ready.
	RestoreMounts bool
	// RestoreStrategy says how a dead published target is repaired, at restore and in NodePublish.
	RestoreStrategy restore.Strategy
	// RestoreWorkers bounds the volumes restored in parallel (default GOMAXPROCS*8: the work is mostly
	// waiting for processes to start and mounts to answer).
	RestoreWorkers int
	// FuseMode names where FUSE servers live (fusemode.Names()); Mode, when set, is used instead (tests).
	FuseMode string
	Mode     fusemode.Mode
	// FuseOptions configure the mode (dummy-fuse path, --direct-io, start timeout).
	FuseOptions fusemode.Options
	// HealthPort serves HTTP /healthz (200 once Probe is ready) on this port; 0 disables it.
	HealthPort int
	// KubeletRegistrationPath and RegistrationDir enable the built-in kubelet plugin registration: a
	// Registration service on <RegistrationDir>/<DriverName>-reg.sock that tells kubelet to reach the plugin at
	// KubeletRegistrationPath (the CSI socket as seen from the host).
	KubeletRegistrationPath string
	RegistrationDir         string
	// ControllerServer is registered and advertised when set. The plugin is node-only; tests plug in a minimal
	// controller so that csi-sanity's node tests that create volumes can run.
	ControllerServer csi.ControllerServer
	// ProbeTimeout bounds each check of a mount (statfs) so that a hung FUSE server cannot hang a call (default 5s).
	ProbeTimeout time.Duration

	// mounted, when set (tests), is called after each new mount, before its outcome is recorded: a test stops
	// the call there as a kill of the plugin would.
	mounted func(path string)
}

// KeeperSocketName is the keeper mode's session socket, beside the CSI socket unless configured otherwise.
const KeeperSocketName = contract.KeeperSocket

// RelayDirName is the relay mode's directory (backend mounts, node tables), beside the CSI socket unless
// configured otherwise: the plugin's own, not shared with the node's mount tree.
const RelayDirName = "relay"

// Driver is the plugin. Create it with New, then call Run once.
type Driver struct {
	cfg     Config
	socket  string
	mode    fusemode.Mode
	place   placement    // how a volume reaches its targets, from the mode's placement
	ownMode bool         // created by New, so closed by Run (an injected mode belongs to its creator)
	store   *state.Store // nil without a state directory
	ready   atomic.Bool
	locks   *volumeLocks
	prober  *mounts.Prober // every filesystem call that may reach a FUSE server goes through it
	callID  atomic.Uint64
	mu      sync.Mutex
	volumes map[string]*volume // by volume ID
}

// volume is what the plugin knows about one staged volume.
type volume struct {
	id          string
	stagingPath string
	readOnly    bool
	createdDir  bool
	ephemeral   bool              // an inline ephemeral volume, staged by the plugin itself
	cap         *state.Capability // what it was staged with; nil in records of older versions
	server      fusemode.Server   // nil when the mount was found alive rather than started by this process
	targets     map[string]target // by published target path
	pending     bool              // its record is an intent an interrupted stage left (intent.go)
}

// target is what the plugin knows about one published target of a volume.
type target struct {
	readOnly   bool
	createdDir bool              // the plugin created the directory, so unpublishing removes it
	cap        *state.Capability // nil in records of older versions
	pending    bool              // its record is an intent an interrupted publish left (intent.go)
}

var driverNameRE = regexp.MustCompile(`^[a-zA-Z0-9]([a-zA-Z0-9._-]{0,61}[a-zA-Z0-9])?$`)

// ConfigError is a Config that New refuses: a mistake of whoever filled it in (a flag), as opposed to a failure
// of the machine (the state directory cannot be created, dummy-fuse is missing).
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// New validates cfg, opens the state directory and creates the FUSE mode. An invalid cfg is a *ConfigError.
func New(cfg Config) (*Driver, error) {
	cfg, socket, err := cfg.complete()
	if err != nil {
		return nil, &ConfigError{Err: err}
	}
	d := &Driver{cfg: cfg, socket: socket, locks: newVolumeLocks(), volumes: map[string]*volume{},
		prober: mounts.NewProber(cfg.ProbeTimeout, probesPerMount)}
	if cfg.StateDir != "" {
		if d.store, err = state.Open(cfg.StateDir); err != nil {
			return nil, err
		}
	}
	d.mode = cfg.Mode
	if d.mode == nil {
		if d.mode, err = fusemode.New(cfg.FuseMode, cfg.FuseOptions); err != nil {
			return nil, err
		}
		d.ownMode = true
	}
	d.place = newPlacement(d)
	return d, nil
}

// complete checks cfg without touching the machine and fills in the defaults; it also returns the socket path.
func (cfg Config) complete() (Config, string, error) {
	if cfg.DriverName == "" {
		cfg.DriverName = DefaultDriverName
	}
	if !driverNameRE.MatchString(cfg.DriverName) {
		return cfg, "", fmt.Errorf("driver name %q: must be at most 63 characters of [a-zA-Z0-9._-], starting and ending alphanumeric", cfg.DriverName)
	}
	if cfg.NodeID == "" {
		return cfg, "", errors.New("node ID is required")
	}
	socket, err := ParseEndpoint(cfg.Endpoint)
	if err != nil {
		return cfg, "", err
	}
	if cfg.EphemeralDir == "" {
		cfg.EphemeralDir = filepath.Join(filepath.Dir(socket), "ephemeral")
	}
	// Absolute and clean: staging paths under it are recorded and validated like any other.
	if cfg.EphemeralDir, err = filepath.Abs(cfg.EphemeralDir); err != nil {
		return cfg, "", fmt.Errorf("ephemeral directory: %w", err)
	}
	if cfg.RestoreStrategy == "" {
		cfg.RestoreStrategy = restore.Rebind
	}
	if _, err := restore.ParseStrategy(string(cfg.RestoreStrategy)); err != nil {
		return cfg, "", err
	}
	if cfg.RestoreMounts && cfg.StateDir == "" {
		return cfg, "", errors.New("restoring mounts needs a state directory")
	}
	if cfg.RestoreWorkers <= 0 {
		cfg.RestoreWorkers = runtime.GOMAXPROCS(0) * 8
	}
	if cfg.HealthPort < 0 || cfg.HealthPort > 65535 {
		return cfg, "", fmt.Errorf("health port %d out of range", cfg.HealthPort)
	}
	if (cfg.KubeletRegistrationPath == "") != (cfg.RegistrationDir == "") {
		return cfg, "", errors.New("kubelet registration needs both the kubelet registration path and the registration directory")
	}
	if cfg.KubeletRegistrationPath != "" && !filepath.IsAbs(cfg.KubeletRegistrationPath) {
		return cfg, "", fmt.Errorf("kubelet registration path %q must be absolute", cfg.KubeletRegistrationPath)
	}
	if cfg.ProbeTimeout <= 0 {
		cfg.ProbeTimeout = 5 * time.Second
	}
	if cfg.FuseOptions.KeeperSocket == "" {
		cfg.FuseOptions.KeeperSocket = filepath.Join(filepath.Dir(socket), KeeperSocketName)
	}
	if cfg.FuseOptions.RelayDir == "" {
		cfg.FuseOptions.RelayDir = filepath.Join(filepath.Dir(socket), RelayDirName)
	}
	if cfg.Mode == nil {
		if cfg.FuseMode == "" {
			cfg.FuseMode = fusemode.ChildName
		}
		if err := fusemode.CheckName(cfg.FuseMode); err != nil {
			return cfg, "", err
		}
		if cfg.FuseOptions.Writable && cfg.FuseMode != fusemode.RelayName && cfg.FuseMode != fusemode.RelayKeeperName {
			return cfg, "", fmt.Errorf("writable volumes need --fuse-mode=%s or %s, not %s: only a relay keeps writes through a server's death", fusemode.RelayName, fusemode.RelayKeeperName, cfg.FuseMode)
		}
	}
	return cfg, socket, nil
}

// ephemeralStagingPath is where the plugin stages inline ephemeral volume id (a validated volume ID, so a single
// path element inside the ephemeral directory).
func (d *Driver) ephemeralStagingPath(id string) string { return filepath.Join(d.cfg.EphemeralDir, id) }

// Ready reports whether start-up (including the restore) has finished: what Probe and /healthz report.
func (d *Driver) Ready() bool { return d.ready.Load() }

// Socket returns the path of the CSI socket.
func (d *Driver) Socket() string { return d.socket }

// loadRecords reads the mount records into memory, undoes what interrupted calls left (intent.go), gives the
// mode the records of its own to take back what it keeps across a restart, and, with RestoreMounts, replays the
// records. Records are loaded even without a restore: NodePublish then still knows how to repair a dead staging
// mount (as ceph-csi does). Only a mode that cannot start (its socket) is an error.
func (d *Driver) loadRecords(ctx context.Context) error {
	var (
		stages    []state.Stage
		publishes []state.Publish
		recs      state.Contents
	)
	if d.store != nil {
		removed, err := d.store.RemoveTemp()
		for _, p := range removed {
			klog.InfoS("Removed the temp file of an interrupted record write", "path", p)
		}
		if err != nil {
			klog.ErrorS(err, "Removing temp files of interrupted record writes")
		}
		recs = d.store.Read()
		stages, publishes = recs.Stages, recs.Publishes
		for _, err := range recs.Errs {
			var re *state.RecordError
			if errors.As(err, &re) {
				klog.ErrorS(re.Err, "Skipping unusable mount record", "path", re.Path)
			} else {
				klog.ErrorS(err, "Skipping unusable mount record")
			}
		}
		klog.InfoS("Loaded mount records", "dir", d.store.Dir(), "staged", len(stages), "published", len(publishes), "interrupted", len(recs.PendingStages)+len(recs.PendingPublishes), "unusable", len(recs.Errs))
	}
	d.mu.Lock()
	for _, s := range stages {
		d.volumes[s.VolumeID] = &volume{id: s.VolumeID, stagingPath: s.StagingPath, readOnly: s.ReadOnly, createdDir: s.CreatedDir, ephemeral: s.Ephemeral, cap: s.Capability, targets: map[string]target{}}
	}
	for _, p := range publishes {
		if v := d.volumes[p.VolumeID]; v != nil {
			v.targets[p.TargetPath] = target{readOnly: p.ReadOnly, createdDir: p.CreatedDir, cap: p.Capability}
		}
	}
	d.mu.Unlock()
	d.undoIntents(recs.PendingStages, recs.PendingPublishes)
	var own fusemode.Records
	for _, s := range stages {
		if s.FuseMode == d.mode.Name() {
			own.Stages = append(own.Stages, fusemode.Recorded{VolumeID: s.VolumeID, StagingPath: s.StagingPath, Init: s.Init})
		}
	}
	for _, p := range publishes {
		if p.FuseMode == d.mode.Name() {
			own.Targets = append(own.Targets, fusemode.Target{VolumeID: p.VolumeID, Path: p.TargetPath, ReadOnly: p.ReadOnly})
		}
	}
	servers, err := d.mode.Recollect(own)
	if err != nil {
		return err
	}
	d.mu.Lock()
	for id, srv := range servers {
		if v := d.volumes[id]; v != nil {
			v.server = srv
		}
	}
	d.mu.Unlock()
	if d.store == nil || !d.cfg.RestoreMounts {
		return nil
	}
	start := time.Now()
	res := restore.Run(ctx, stages, publishes, d.cfg.RestoreWorkers, restorer{d})
	klog.InfoS("Restored mounts", "strategy", d.cfg.RestoreStrategy, "volumes", len(stages), "targets", len(publishes),
		"ok", res.OK, "failed", res.Failed, "skipped", res.Skipped, "forgotten", res.Forgotten, "duration", time.Since(start))
	return nil
}

// lookup returns a copy of what is known about volume id.
func (d *Driver) lookup(id string) (volume, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	v, ok := d.volumes[id]
	if !ok {
		return volume{}, false
	}
	c := *v
	c.targets = make(map[string]target, len(v.targets))
	for t, ro := range v.targets {
		c.targets[t] = ro
	}
	return c, true
}

// stagedAt returns the ID of another volume staged at path, if any.
func (d *Driver) stagedAt(path, except string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	for id, v := range d.volumes {
		if id != except && v.stagingPath == path {
			return id
		}
	}
	return ""
}

// volumeOfPath returns the volume staged or published at path, if any.
func (d *Driver) volumeOfPath(path string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	for id, v := range d.volumes {
		if _, ok := v.targets[path]; ok || v.stagingPath == path {
			return id
		}
	}
	return ""
}

func (d *Driver) setStaged(v *volume) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if old := d.volumes[v.id]; old != nil && v.targets == nil {
		v.targets = old.targets
	}
	if v.targets == nil {
		v.targets = map[string]target{}
	}
	d.volumes[v.id] = v
}

func (d *Driver) forgetStaged(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.volumes, id)
}

func (d *Driver) setPublished(id, path string, t target) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if v := d.volumes[id]; v != nil {
		v.targets[path] = t
	}
}

func (d *Driver) forgetPublished(id, target string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if v := d.volumes[id]; v != nil {
		delete(v.targets, target)
	}
}

// volumeLocks lets one operation at a time work on a volume and on a path; a concurrent one is answered
// Aborted, as the CSI spec suggests, and the CO retries it.
type volumeLocks struct {
	mu   sync.Mutex
	held map[string]bool
}

func newVolumeLocks() *volumeLocks { return &volumeLocks{held: map[string]bool{}} }

// tryAcquire takes all keys or none.
func (l *volumeLocks) tryAcquire(keys ...string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range keys {
		if l.held[k] {
			return false
		}
	}
	for _, k := range keys {
		l.held[k] = true
	}
	return true
}

func (l *volumeLocks) release(keys ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range keys {
		delete(l.held, k)
	}
}
