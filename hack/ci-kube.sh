#!/usr/bin/env bash
# `make ci-kube` and `make kube-release`: the scenario catalog on the real kubelet of one Kubernetes release built
# from source on this machine, recorded.
#
#   hack/ci-kube.sh            CI: the newest release (K8S_DEFAULT_VERSION), every scenario
#   hack/ci-kube.sh RELEASE    a recorded pass of another release: the scenarios to check on every release (those
#                              whose expected outcome depends on the kubelet version, and those whose kubelet code
#                              changed between releases: dfc-scenario --list --every-release)
#
# CI's pass (the newest release) also measures a driver this project did not write, k8s-csi-s3 (hack/drivers/
# k8s-csi-s3: make driver-up), with one driver-agnostic row, its node plugin pod deleted, recorded like the
# others (driver-remediate, two minutes more, is a recorded pass, to keep CI within its hour: scenarios/README.md).
#
# Either way the scenarios whose outcome is about the FUSE server (dfc-scenario --list --every-server) then run with
# each real server of SERVERS, with the image's build of that server. Steps: make cluster-build (compiles the
# release from Go module source the first time, cached after), make cluster-up (installs the Debian packages the
# cluster needs, builds and imports the images), make test-kube with every skip a failure, and make cluster-down,
# which also runs after a failure or an interrupt. Each pass is recorded in a file of scenarios/results and the
# docs generated from the records are generated again (make scenarios-doc, make matrix-doc). CI runs the newest release only,
# to stay within its hour from cold caches; the other releases' records come from recorded passes, which the
# generated docs and their tests check like CI's. Prints each step's duration and the total. Needs root.
#
# Environment: DFC_KUBE_ARTIFACTS (parent of one directory of run dirs and summary per pass; default
# _output/kube-e2e/ci-<time>).
set -o errexit -o nounset -o pipefail
cd "$(dirname "$0")/.."
# shellcheck source=hack/cluster/lib.sh
source hack/cluster/lib.sh

RELEASE=${1:-$K8S_DEFAULT_VERSION}
BIN=${BIN:-$PWD/bin}
# One build of the catalog's command, with the flags of every other build (GOFLAGS in the Makefile).
mkdir -p "$BIN"
CGO_ENABLED=0 go build -trimpath -o "$BIN/dfc-scenario" ./scenarios/cmd/dfc-scenario
ONLY= # no scenarios = the whole catalog
if [ "$RELEASE" != "$K8S_DEFAULT_VERSION" ]; then
  ONLY=$("$BIN/dfc-scenario" --list --every-release | xargs)
  [ -n "$ONLY" ] || die "the catalog names no scenario to run on every release"
fi
EVERY_SERVER_SCENARIOS=$("$BIN/dfc-scenario" --list --every-server | xargs)
[ -n "$EVERY_SERVER_SCENARIOS" ] || die "the catalog names no scenario to run with every real server"
# The real FUSE servers (internal/fuseserver) whose rows run besides dummy-fuse's.
SERVERS=(gcsfuse)

# The clusters run with kubelet's volume health on (the alpha CSIVolumeHealth gate, on every component: v1.37's
# API server drops pod.status.volumeHealth without it) and probed every 2 s, the health-report scenario's
# scenarios.HealthPeriod, instead of every minute.
export FEATURE_GATES=${FEATURE_GATES:-CSIVolumeHealth=true} VOLUME_STATS_AGG_PERIOD=${VOLUME_STATS_AGG_PERIOD:-2s}

MAKE=${MAKE:-make}
need_root "the cluster runs kubelet and containerd on this machine"
ARTIFACTS=${DFC_KUBE_ARTIFACTS:-$PWD/_output/kube-e2e/ci-$(date +%Y%m%d-%H%M%S)}
export DFC_REQUIRE_PRIVILEGED=1 KUBECONFIG=$KUBECONFIG_PATH
COMMIT=$(git describe --always --dirty --abbrev=7 2>/dev/null || echo unknown)

# record DIR: the result.json of the run dirs in $ARTIFACTS/DIR (a pass with dummy-fuse, or with a real FUSE
# server: the records name it) into scenarios/results, then every doc generated from them (make scenarios-doc,
# make matrix-doc).
# shellcheck disable=SC2317 # run through timed
record() {
  go run ./scenarios/cmd/scenariodoc record -commit "$COMMIT" -command "$COMMAND" "$ARTIFACTS/$1" &&
    go run ./scenarios/cmd/scenariodoc && go run ./scenarios/cmd/matrix
}
COMMAND="make ci-kube"
[ "$RELEASE" = "$K8S_DEFAULT_VERSION" ] || COMMAND="make kube-release K8S_VERSION=$RELEASE"

up= # set while the cluster may be running
# shellcheck disable=SC2317 # run by the EXIT trap
finish() {
  local rc=$?
  trap - EXIT INT TERM
  if [ -n "$up" ]; then
    timed "cluster-down $RELEASE" "$MAKE" cluster-down || rc=1
  fi
  local server dir
  for server in dummy-fuse "${SERVERS[@]}"; do
    dir=$ARTIFACTS/$RELEASE
    [ "$server" = dummy-fuse ] || dir+=-$server
    [ -f "$dir/summary.txt" ] || continue
    printf '\n=== kubelet %s, FUSE server %s (%s)\n' "$RELEASE" "$server" "$dir"
    cat "$dir/summary.txt"
  done
  dir=$ARTIFACTS/$RELEASE-k8s-csi-s3
  if [ -f "$dir/summary.txt" ]; then
    printf '\n=== kubelet %s, driver k8s-csi-s3 (%s)\n' "$RELEASE" "$dir"
    cat "$dir/summary.txt"
  fi
  print_times "$COMMAND"
  exit "$rc"
}
trap finish EXIT
trap 'exit 130' INT TERM

# A cluster an interrupted earlier run left would be reused by cluster-up (same settings) or refused (others):
# start from none. A no-op when nothing is there.
timed "cluster-down (whatever an earlier run left)" "$MAKE" cluster-down || exit 1
failed=0
timed "cluster-build $RELEASE" "$MAKE" cluster-build K8S_VERSION="$RELEASE" || exit 1
up=1
timed "cluster-up $RELEASE" "$MAKE" cluster-up K8S_VERSION="$RELEASE" || exit 1
# Each pass's directory goes on make's command line, not in its environment: a DFC_KUBE_ARTIFACTS given to the
# outer make's command line reaches every sub-make that way and would win over an environment variable, putting
# both passes' run dirs in one directory, where the second overwrites the first.
timed "test-kube $RELEASE: ${ONLY:-all}" "$MAKE" test-kube DFC_KUBE_ARTIFACTS="$ARTIFACTS/$RELEASE" DFC_SCENARIOS="$ONLY" || failed=1
timed "record $RELEASE" record "$RELEASE" || failed=1
for server in "${SERVERS[@]}"; do
  timed "test-kube $RELEASE: FUSE server $server: $EVERY_SERVER_SCENARIOS" "$MAKE" test-kube DFC_KUBE_ARTIFACTS="$ARTIFACTS/$RELEASE-$server" \
    DFC_FUSE_SERVER="$server" DFC_SCENARIOS="$EVERY_SERVER_SCENARIOS" || failed=1
  timed "record $RELEASE, FUSE server $server" record "$RELEASE-$server" || failed=1
done
if [ "$RELEASE" = "$K8S_DEFAULT_VERSION" ]; then
  DRIVER_ROWS="driver-pod-delete"
  if timed "driver-up k8s-csi-s3" "$MAKE" driver-up DRIVER=k8s-csi-s3; then
    timed "test-kube $RELEASE: driver k8s-csi-s3: $DRIVER_ROWS" "$MAKE" test-kube DFC_KUBE_ARTIFACTS="$ARTIFACTS/$RELEASE-k8s-csi-s3" \
      DFC_DRIVER=ru.yandex.s3.csi DFC_DRIVER_PV=hack/drivers/k8s-csi-s3/pv.yaml DFC_DRIVER_READ_PATH=dummy-file.txt \
      DFC_DRIVER_FUSE_PROCESS=rclone DFC_DRIVER_PLACEMENT=child DFC_SCENARIOS="$DRIVER_ROWS" || failed=1
    timed "record $RELEASE, driver k8s-csi-s3" record "$RELEASE-k8s-csi-s3" || failed=1
    timed "driver-down k8s-csi-s3" "$MAKE" driver-down DRIVER=k8s-csi-s3 || failed=1
  else
    failed=1
  fi
fi
exit "$failed"
