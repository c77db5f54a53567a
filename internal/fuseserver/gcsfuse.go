package fuseserver

import "errors"

// Gcsfuse is the FUSE client of Cloud Storage (github.com/googlecloudplatform/gcsfuse, on jacobsa/fuse): the
// server the GCS FUSE CSI driver runs in its sidecar on /dev/fd/N. Here it reads a bucket of a fake GCS server
// (github.com/fsouza/fake-gcs-server) that holds dummy-file.txt, anonymously.
const Gcsfuse = "gcsfuse"

// DefaultBucket is the bucket gcsfuse mounts unless the bucket setting names another.
const DefaultBucket = "dummy-fuse-csi"

func init() {
	register(Kind{
		Name:      Gcsfuse,
		TakesOver: false,
		WhyNot:    "gcsfuse answers a connection whose INIT it did not see with EPROTO (\"Expected *initOp\") and exits",
		Settings: "endpoint=<the GCS JSON API URL, e.g. http://127.0.0.1:4443/storage/v1/> (required), bucket=<name> (default " + DefaultBucket + "), " +
			"metadata-cache-ttl-secs=<n> (gcsfuse's default 60: how long the kernel may answer from its caches after gcsfuse died)",
		new: func(s Spec) (Server, error) {
			if err := options(s.Opts, []string{"endpoint", "bucket", ttlSetting}, "endpoint"); err != nil {
				return nil, err
			}
			if s.DirectIO {
				return nil, errors.New("it has no direct-I/O mode")
			}
			return &gcsfuse{spec: s}, nil
		},
	})
}

type gcsfuse struct{ spec Spec }

func (g *gcsfuse) Name() string { return Gcsfuse }
func (g *gcsfuse) Path() string { return g.spec.Path }

// ttlSetting is gcsfuse's metadata cache TTL, which is also how long it lets the kernel keep attributes and
// entries: while they are valid, a stat or a read of cached pages never reaches the server, so a dead gcsfuse
// goes unnoticed for up to that long.
const ttlSetting = "metadata-cache-ttl-secs"

func (g *gcsfuse) args(dir string) []string {
	bucket := g.spec.Opts["bucket"]
	if bucket == "" {
		bucket = DefaultBucket
	}
	var ttl []string
	if v := g.spec.Opts[ttlSetting]; v != "" {
		ttl = []string{"--" + ttlSetting + "=" + v}
	}
	// --implicit-dirs: the fake bucket has objects but no directory placeholders; --enable-hns=false: the fake
	// has no storage-layout API, which gcsfuse otherwise retries for seconds before it mounts; allow_other: the
	// workload may run as another user than the server.
	args := []string{"--foreground", "--anonymous-access", "--implicit-dirs", "--enable-hns=false", "-o", "allow_other",
		"--custom-endpoint", g.spec.Opts["endpoint"]}
	return append(append(args, ttl...), bucket, dir)
}

func (g *gcsfuse) MountArgs(dir string) []string { return g.args(dir) }

func (g *gcsfuse) FDArgs() ([]string, error) { return g.args(FDPath), nil }

func (g *gcsfuse) Env() []string { return nil }
