package mounts

// What the tests of package mounts_test reach inside: they are an external package because the test helpers
// they use (internal/testenv) import this one.

// Do is Prober's call machinery, with fn standing for the system call.
func (p *Prober) Do(op, path string, fn func() (any, error)) (any, error) { return p.do(op, path, fn) }

// MountPoints is Prober's cache of mount points.
type MountPoints = mountPoints

// Of returns the mount point path lies on and its filesystem's key.
func (m *mountPoints) Of(path string) (mountPoint, fsys string) { return m.of(path) }
