#!/usr/bin/env bash
# `make ci-kube`: the scenario catalog on the real kubelets of two Kubernetes releases, one cluster at a time.
# The newest release runs every scenario; the newest release before kubelet's subPath repair runs only the
# scenarios to check on every release: those whose expected outcome depends on the kubelet version, and those
# whose kubelet code changed between the two (the native sidecar's). For each release: make cluster-build
# (compiles it from Go module source the first time, cached after), make cluster-up (installs the Debian
# packages the cluster needs, builds and imports the images), make test-kube with every skip a failure, and
# make cluster-down, which also runs after a failure or an interrupt. Each release's runs are recorded in a file
# of scenarios/results, and scenarios/README.md's per-version table is generated again from those files (make
# scenarios-doc). On the newest release's cluster, after its catalog, each real FUSE server of SERVERS runs the
# scenarios whose outcome is about the server (dfc-scenario --list --every-server; the local backend runs the
# others with every server) with the image's build of that server, recorded in a file of its own. Prints each step's duration and the total. Needs root.
#
# Environment: DFC_KUBE_ARTIFACTS (parent of one directory of run dirs and summary per release, and per
# release-server for the real servers; default _output/kube-e2e/ci-<time>).
set -o errexit -o nounset -o pipefail
cd "$(dirname "$0")/.."
# shellcheck source=hack/cluster/lib.sh
source hack/cluster/lib.sh

# The scenarios to check on every release: the catalog says which and why (the kubelet code and PRs behind each
# version-dependent outcome, the kubelet code that changed under the others).
EVERY_RELEASE_SCENARIOS=$(go run ./scenarios/cmd/dfc-scenario --list --every-release | xargs)
[ -n "$EVERY_RELEASE_SCENARIOS" ] || die "the catalog names no scenario to run on every release"
EVERY_SERVER_SCENARIOS=$(go run ./scenarios/cmd/dfc-scenario --list --every-server | xargs)
[ -n "$EVERY_SERVER_SCENARIOS" ] || die "the catalog names no scenario to run with every real server"
# The newest release without kubelet's subPath repair: v1.37 unmounts and binds again a subPath bind that
# points at a dead FUSE connection (prepareSubpathTarget in pkg/volume/util/subpath/subpath_linux.go,
# kubernetes PRs #138856 and #139275).
OLDER_K8S_VERSION=v1.36.3
# RELEASE=SCENARIOS, one cluster each, in this order; no scenarios = the whole catalog.
RUNS=("$K8S_DEFAULT_VERSION=" "$OLDER_K8S_VERSION=$EVERY_RELEASE_SCENARIOS")
# The real FUSE servers (internal/fuseserver) whose rows run on the newest release, besides dummy-fuse's.
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

# record DIR: the result.json of the run dirs in $ARTIFACTS/DIR (a release's, or a release's with a real FUSE
# server: the records name it) into scenarios/results, then the README's table.
# shellcheck disable=SC2317 # run through timed
record() {
  go run ./scenarios/cmd/scenariodoc record -commit "$COMMIT" -command "make ci-kube" "$ARTIFACTS/$1" &&
    go run ./scenarios/cmd/scenariodoc
}

up= # the release whose cluster may be running
# shellcheck disable=SC2317 # run by the EXIT trap
finish() {
  local rc=$?
  trap - EXIT INT TERM
  if [ -n "$up" ]; then
    timed "cluster-down $up" "$MAKE" cluster-down || rc=1
  fi
  local run server
  for run in "${RUNS[@]}"; do
    for server in dummy-fuse "${SERVERS[@]}"; do
      local dir=$ARTIFACTS/${run%%=*}
      [ "$server" = dummy-fuse ] || dir+=-$server
      [ -f "$dir/summary.txt" ] || continue
      printf '\n=== ci-kube: kubelet %s, FUSE server %s (%s)\n' "${run%%=*}" "$server" "$dir"
      cat "$dir/summary.txt"
    done
  done
  print_times ci-kube
  exit "$rc"
}
trap finish EXIT
trap 'exit 130' INT TERM

# A cluster an interrupted earlier run left would be reused by cluster-up (same settings) or refused (others):
# CI starts from none. A no-op when nothing is there.
timed "cluster-down (whatever an earlier run left)" "$MAKE" cluster-down || exit 1
failed=0
for run in "${RUNS[@]}"; do
  version=${run%%=*} only=${run#*=}
  if ! timed "cluster-build $version" "$MAKE" cluster-build K8S_VERSION="$version"; then
    failed=1
    continue
  fi
  up=$version
  if timed "cluster-up $version" "$MAKE" cluster-up K8S_VERSION="$version"; then
    timed "test-kube $version: ${only:-all}" env DFC_KUBE_ARTIFACTS="$ARTIFACTS/$version" DFC_SCENARIOS="$only" \
      "$MAKE" test-kube || failed=1
    timed "record $version" record "$version" || failed=1
    if [ "$version" = "$K8S_DEFAULT_VERSION" ]; then
      for server in "${SERVERS[@]}"; do
        timed "test-kube $version: FUSE server $server: $EVERY_SERVER_SCENARIOS" env DFC_KUBE_ARTIFACTS="$ARTIFACTS/$version-$server" \
          DFC_FUSE_SERVER="$server" DFC_SCENARIOS="$EVERY_SERVER_SCENARIOS" "$MAKE" test-kube || failed=1
        timed "record $version, FUSE server $server" record "$version-$server" || failed=1
      done
    fi
  else
    failed=1
  fi
  up=
  # A cluster that did not come down leaves the machine unfit for the next one: stop here.
  timed "cluster-down $version" "$MAKE" cluster-down || exit 1
done
exit "$failed"
