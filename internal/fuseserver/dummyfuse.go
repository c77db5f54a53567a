package fuseserver

func init() {
	register(Kind{Name: DummyFuse, TakesOver: true, new: func(s Spec) (Server, error) {
		if err := options(s.Opts, nil); err != nil {
			return nil, err
		}
		return &dummyFuse{spec: s}, nil
	}})
}

// dummyFuse is the testbed's own server (./dummy-fuse): the only one that takes over a live connection.
type dummyFuse struct{ spec Spec }

func (d *dummyFuse) Name() string { return DummyFuse }
func (d *dummyFuse) Path() string { return d.spec.Path }

func (d *dummyFuse) flags() []string {
	if d.spec.DirectIO {
		return []string{"--direct-io"}
	}
	return nil
}

func (d *dummyFuse) MountArgs(dir string) []string { return append(d.flags(), dir) }

func (d *dummyFuse) FDArgs() ([]string, error) { return append(d.flags(), FDPath), nil }

// Env: one OS thread per server is plenty for a hello-world filesystem and keeps hundreds of servers cheap.
func (d *dummyFuse) Env() []string { return []string{"GOMAXPROCS=1"} }
