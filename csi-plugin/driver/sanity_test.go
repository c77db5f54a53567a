package driver

import (
	"context"
	"net"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
	"github.com/onsi/gomega"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/dummy-fuse-csi/dummy-fuse-csi/internal/testenv"
)

// notRunnable lists the csi-sanity specs that cannot run against this node-only plugin, with the reason. Every
// other spec must run and pass; the test fails on any spec that was skipped without being listed here.
var notRunnable = map[string]string{
	// Controller and snapshot specs test a controller. The plugin has none; the test-only controller that
	// lets the node specs create volumes would be what they test, which proves nothing.
	`[Controller Server]`: "the plugin is node-only (the controller in this test only exists so node specs can create volumes)",
	// No group controller either; these specs skip themselves when the capability is missing.
	`[GroupController`: "the plugin offers no GroupController service",
	// dummy-fuse is a fixed, read-only hello-world filesystem: nothing to expand.
	`Node Service NodeExpandVolume`: "NodeExpandVolume is not supported (no EXPAND_VOLUME capability: dummy-fuse has a fixed size)",
	// csi-test v5.6.0 checks single-writer enforcement only for plugins that advertise SINGLE_NODE_MULTI_WRITER.
	`Node Service NodePublishVolume with single node multi writer capability`: "no SINGLE_NODE_MULTI_WRITER capability (the plugin does not tell single from multi writers)",
}

// TestSanity runs csi-sanity against the real plugin with real dummy-fuse mounts: the Identity specs and every
// Node spec, including the full stage → publish → stats → unpublish → unstage lifecycle and its idempotent
// variant (each call repeated 10 times).
func TestSanity(t *testing.T) {
	testenv.RequireFUSE(t)
	h := newHarness(t, true, func(c *Config) { c.ControllerServer = testController{} })

	cfg := sanity.NewTestConfig()
	cfg.Address = "unix://" + h.d.Socket()
	cfg.TargetPath = filepath.Join(h.root, "sanity-target")
	cfg.StagingPath = filepath.Join(h.root, "sanity-staging")
	creds := slowHandshake{insecure.NewCredentials()}
	cfg.DialOptions = []grpc.DialOption{grpc.WithTransportCredentials(creds), grpc.WithAuthority("localhost")}
	cfg.ControllerDialOptions = cfg.DialOptions

	var reports []types.SpecReport
	ginkgo.ReportAfterSuite("collect", func(r ginkgo.Report) { reports = r.SpecReports })
	sc := sanity.GinkgoTest(&cfg)
	gomega.RegisterFailHandler(ginkgo.Fail)
	suiteCfg, reporterCfg := ginkgo.GinkgoConfiguration()
	suiteCfg.SkipStrings = []string{`\[Controller Server\]`, `\[GroupController`}
	reporterCfg.Succinct = !testing.Verbose()
	ginkgo.RunSpecs(t, "csi-sanity against dummy-fuse-csi", suiteCfg, reporterCfg)
	sc.Finalize()

	var ran, skipped []string
	for _, r := range reports {
		if r.LeafNodeType != types.NodeTypeIt {
			continue
		}
		name := r.FullText()
		switch r.State {
		case types.SpecStatePassed:
			ran = append(ran, name)
		case types.SpecStateSkipped, types.SpecStatePending:
			reason := ""
			for prefix, why := range notRunnable {
				if strings.Contains(name, prefix) {
					reason = why
				}
			}
			if reason == "" {
				t.Errorf("sanity spec skipped without a listed reason: %s", name)
			}
			skipped = append(skipped, name+"  ← "+reason)
		default:
			t.Errorf("sanity spec %s: %v", name, r.State)
		}
	}
	sort.Strings(skipped)
	t.Logf("%d sanity specs passed; %d could not run:\n  %s", len(ran), len(skipped), strings.Join(skipped, "\n  "))
	nodeRan := 0
	for _, n := range ran {
		if strings.Contains(n, "Node Service") {
			nodeRan++
		}
	}
	if nodeRan == 0 || len(reports) == 0 {
		t.Fatalf("no Node Service spec ran (reports: %d)", len(reports))
	}
}

// slowHandshake works around a race in csi-test's utils.Connect (v5.4.0 to v5.6.0): the client starts connecting
// at once, and when a unix-socket connection is READY before Connect's loop first reads the state, its
// WaitForStateChange(READY) waits out its whole minute and the first spec fails ("Connection timed out").
// Delaying the handshake keeps the connection CONNECTING until the loop watches it.
type slowHandshake struct {
	credentials.TransportCredentials
}

func (s slowHandshake) ClientHandshake(ctx context.Context, authority string, c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	select {
	case <-time.After(200 * time.Millisecond):
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	return s.TransportCredentials.ClientHandshake(ctx, authority, c)
}

func (s slowHandshake) Clone() credentials.TransportCredentials {
	return slowHandshake{s.TransportCredentials.Clone()}
}
