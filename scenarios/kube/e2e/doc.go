// Package e2e runs the scenario catalog against a real cluster as go tests, with sigs.k8s.io/e2e-framework:
// one feature per scenario, whose Setup deploys it, whose first assessment performs its steps, with one
// assessment per expected outcome, and whose Teardown removes everything and writes the report.
//
// The tests need a cluster and are opt-in: they run only with DFC_KUBE_E2E=1 (make test-kube sets it), so
// that `go test ./...` never installs a privileged DaemonSet into whatever cluster a kubeconfig points at.
// Opted in, a cluster that cannot be reached skips them, or fails them under DFC_REQUIRE_PRIVILEGED=1 (CI).
//
//	DFC_KUBE_E2E=1 go test ./scenarios/kube/e2e/ -timeout 60m -v -args --kubeconfig=PATH [--feature=restart]
//
// Environment: DFC_SCENARIOS (the scenarios to run, space-separated names; empty: the whole catalog),
// DFC_FUSE_SERVER (the FUSE server the plugin runs, internal/fuseserver: empty for dummy-fuse; with another, the
// scenarios whose outcome depends on the server are left out; a spec file's absolute path runs an operator's server, its
// settings in DFC_FUSE_SERVER_OPTS as comma-separated key=value, its image in DFC_KUBE_SET: docs/server-spec.md),
// DFC_KUBE_IMAGE (default: the tag of the last `make image`), DFC_KIND_CLUSTER (load the
// image tarball into that kind cluster first, and export its logs at the end), DFC_KUBE_ARTIFACTS (where the
// run dirs go; default _output/kube-e2e/<time>), DFC_KUBE_SET (extra chart values, comma-separated --set
// assignments).
package e2e
