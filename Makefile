# dummy-fuse-csi: reproduce FUSE mount loss in Kubernetes CSI and prove which mitigations work.
# Each non-trivial target calls a script under hack/.

SHELL := /usr/bin/env bash
# One set of build flags for every go build, test, vet and run (the binaries, the images, the tests' own builds of
# the commands): each package compiles once per build cache. A cold cache spends most of its time on client-go and
# helm; a second set of flags would compile them all again.
export CGO_ENABLED ?= 0
export GOFLAGS ?= -trimpath
BIN ?= $(CURDIR)/bin
export BIN

.PHONY: all help build servers test test-short lint bench bench-doc clean
all: build

help: ## show the targets
	@grep -E '^[a-zA-Z_%-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | sort

################################################################################
# Build
################################################################################
build: ## build static binaries into bin/ (version from git)
	hack/build.sh

servers: ## the real FUSE servers (gcsfuse + a fake GCS from the Go module proxy, squashfuse from Debian; WITH_RCLONE=1: rclone too) into bin/servers
	hack/servers.sh

################################################################################
# Test
################################################################################
test: ## go vet and all tests with progress (gotestsum); privileged ones need root + /dev/fuse (mandatory with DFC_REQUIRE_PRIVILEGED=1)
	hack/test.sh

test-short: ## unit tests only (go test -short: no processes, mounts or namespaces), the fast loop
	SHORT=1 hack/test.sh

lint: ## gofmt, go vet, staticcheck (built into bin/tools) and shellcheck (from Debian when missing)
	hack/lint.sh

bench: build ## dummy-fuse side by side with a C libfuse3 reference through real mounts, ratio per round (root + /dev/fuse); LOAD=1: a CPU-bound thread per core beside it, recorded apart
	hack/bench.sh

bench-doc: ## regenerate the generated tables of dummy-fuse/README.md and csi-plugin/README.md from the newest dummy-fuse/bench/results files (bench, relay, soak, soak-relay-keeper)
	go run ./dummy-fuse/bench/cmd/benchdoc

.PHONY: bench-relay bench-relay-write soak-relay soak-relay-write
bench-relay: servers ## the relay's extra hop beside direct access to gcsfuse and squashfuse, ratio per round, and its stall after a server kill (root + /dev/fuse)
	hack/bench-relay.sh
bench-relay-write: servers ## the writable relay's writes beside direct ones to gcsfuse and s3fs (MB/s, p50/p99), ratio per round (root + /dev/fuse; make servers WITH_RCLONE=1, apt-get install s3fs)
	KIND=write BENCHTIME=$${BENCHTIME:-40x} hack/bench-relay.sh

soak-relay: servers ## the relay: DFC_SOAK_KILLS (50) server kills of gcsfuse and squashfuse under 3 readers: failed reads, stalls, leaks (root + /dev/fuse)
	hack/soak-relay.sh
soak-relay-write: servers ## the writable relay: DFC_SOAK_KILLS (50) kills of gcsfuse and s3fs under a writer: failed writes, bytes lost, stalls, leaks (root + /dev/fuse; make servers WITH_RCLONE=1, apt-get install s3fs)
	SOAK=relay-write hack/soak-relay.sh

clean: ## remove build output
	rm -rf $(BIN) _output

################################################################################
# Kubernetes (image tarballs; a single-node cluster built from source, no Docker needed)
# K8S_VERSION=v1.36.3 picks the release (default: the newest, set in hack/cluster/lib.sh); FEATURE_GATES and
# VOLUME_STATS_AGG_PERIOD tune the cluster (hack/cluster/README.md).
################################################################################
.PHONY: image server-image cluster-build cluster-up cluster-down cluster-load-images cluster-smoke
image: ## build image tarballs dummy-fuse-csi:<version> + pause into _output/images (no container engine)
	hack/mkimage/image.sh

server-image: ## SERVER's image as an operator has one (a static one of make servers, e.g. SERVER=rclone, or a dynamic one on the PATH with its libraries, e.g. SERVER=s3fs), for the chart's fuseServer.image
	hack/mkimage/server-image.sh $(SERVER)

cluster-build: ## compile Kubernetes K8S_VERSION, etcd, helm from module source into its cache (once per version)
	hack/cluster/build.sh

cluster-up: image ## start the from-source cluster of K8S_VERSION (root; installs its Debian packages), import the images
	hack/cluster/up.sh

cluster-down: ## stop every cluster daemon by PID, remove pods, mounts and cluster state
	hack/cluster/down.sh

cluster-load-images: ## import the current image tarballs into the running cluster's containerd (after make image)
	hack/cluster/load-images.sh

cluster-smoke: ## prove the running cluster: static pod + kubectl logs, FUSE mount with Bidirectional propagation
	hack/cluster/smoke.sh

################################################################################
# Foreign CSI drivers on the from-source cluster (hack/drivers/<DRIVER>/README.md), for dfc-scenario --driver
################################################################################
.PHONY: driver-up driver-down
driver-up: image ## install DRIVER (e.g. k8s-csi-s3) from hack/drivers/$(DRIVER): build and import its image, apply its manifests, wait for kubelet to register it
	@[ -n "$(DRIVER)" ] || { echo "make driver-up needs DRIVER, one of: $$(ls hack/drivers | grep -v '\.')" >&2; exit 2; }
	hack/drivers/up.sh hack/drivers/$(DRIVER)

driver-down: ## remove DRIVER's objects and its dead staging mounts (refused while PersistentVolumes of it exist; FORCE=1)
	@[ -n "$(DRIVER)" ] || { echo "make driver-down needs DRIVER, one of: $$(ls hack/drivers | grep -v '\.')" >&2; exit 2; }
	hack/drivers/down.sh hack/drivers/$(DRIVER)

################################################################################
# Kubernetes: chart (Helm chart, manifests, kind for users with Docker)
################################################################################
.PHONY: chart-test kind-up kind-down
chart-test: ## lint (helm's linter) and render the chart with the helm library, check it and manifests/ (no cluster)
	go test -count=1 ./chart/... ./manifests/...

kind-up: ## kind cluster from manifests/kind-config.yaml, image loaded, chart installed (needs Docker, kind, helm, kubectl)
	hack/kind-up.sh

kind-down: ## delete the kind cluster of kind-up
	hack/kind-down.sh

################################################################################
# Scenarios: FUSE mount loss after a plugin restart, asserted from evidence (scenarios/README.md)
################################################################################
BACKEND ?= local
export BACKEND
.PHONY: scenarios scenarios-doc matrix matrix-doc
scenario-%: ## run one scenario (checks the name, then builds): make scenario-restart (BACKEND=local|kube, SCENARIO_FLAGS=--keep)
	hack/scenario.sh $*

scenarios: ## build, then run every scenario of the catalog (FUSE_SERVER=gcsfuse|squashfuse: with a real server); reports in _output/runs/<time>-<name>/; RECORD=1 records them in scenarios/results and regenerates the docs
	hack/scenario.sh all

scenarios-doc: ## regenerate scenarios/README.md's per-version table from the files of scenarios/results
	go run ./scenarios/cmd/scenariodoc

matrix: ## the local catalog over every FUSE server × modelled kubelet (MATRIX_SERVERS, MATRIX_KUBELETS narrow it; a server may be a spec file), each recorded, then matrix-doc
	hack/matrix.sh

matrix-doc: ## regenerate docs/outage-matrix.md + .svg and docs/outcomes.md's table from every file of scenarios/results
	go run ./scenarios/cmd/matrix

################################################################################
# CSI plugin
################################################################################
.PHONY: bench-restore bench-keeper soak-keeper soak-relay-keeper
bench-restore: ## csi-plugin --restore-mounts after kill -9: start->ready with 1/100/500 volumes, and RSS (root + /dev/fuse)
	hack/bench-restore.sh

bench-keeper: ## keeper mode: plugin kill -9 and restart with 1/100/500 volumes (nothing to remount): start->ready, PSS of all
	BENCH=BenchmarkKeeperRestart hack/bench-restore.sh

soak-keeper: ## keeper mode: DFC_SOAK_KILLS (50) random kills of one component under 10 readers: failures, stalls, leaks
	hack/soak-keeper.sh

soak-relay-keeper: servers ## relay-keeper mode: DFC_SOAK_KILLS (50) kills per real server (mostly it; the relay, keeper, plugin) under 3 readers: failed reads, stalls per kill kind, leaks (root + /dev/fuse)
	SOAK=relay-keeper hack/soak-relay.sh

################################################################################
# Scenarios on a real cluster (scenarios/kube; scenarios/README.md, "Kubernetes backend")
################################################################################
.PHONY: test-kube ci-kube kube-release kube-writes
test-kube: ## the catalog as e2e-framework go tests against $KUBECONFIG's cluster (DFC_SCENARIOS="subpath": only those; DFC_SIDECAR_DELAYS="0s 3s": sidecar-late per delay)
	DFC_KUBE_E2E=1 go test -count=1 -timeout 60m -v ./scenarios/kube/e2e/

ci-kube: ## CI: the whole catalog on the newest kubelet, then the every-server rows with gcsfuse (hack/ci-kube.sh), recorded, always cluster-down
	hack/ci-kube.sh

kube-writes: ## a recorded pass of the rows that write on release K8S_VERSION (e.g. v1.37.2), with gcsfuse and with s3fs (an image of Debian's, against a fake S3 on the node); brings its cluster up and always down
	@[ -n "$(K8S_VERSION)" ] || { echo "make kube-writes needs K8S_VERSION, e.g. make kube-writes K8S_VERSION=v1.37.2" >&2; exit 2; }
	hack/kube-writes.sh $(K8S_VERSION)

kube-release: ## a recorded pass of release K8S_VERSION (e.g. v1.36.3): the rows whose outcome depends on the release, then the every-server rows with gcsfuse; brings its cluster up and always down
	@[ -n "$(K8S_VERSION)" ] || { echo "make kube-release needs K8S_VERSION, e.g. make kube-release K8S_VERSION=v1.36.3" >&2; exit 2; }
	hack/ci-kube.sh $(K8S_VERSION)
