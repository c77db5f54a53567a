#!/usr/bin/env bash
# Runs scenarios of the catalog (scenarios/): `hack/scenario.sh restart`, `hack/scenario.sh all`.
# BACKEND=local (default) runs them on this machine: root and /dev/fuse, no cluster, a few seconds each.
# BACKEND=kube runs them on the cluster of the current kubeconfig (make cluster-up or make kind-up), with the
# chart installed for each scenario and removed after it.
# SCENARIO_FLAGS adds dfc-scenario flags, e.g. SCENARIO_FLAGS="--keep" or "--backoff-base=10s".
# FUSE_SERVER=gcsfuse|squashfuse runs the scenarios that hold for every server with that real server (make
# servers first) instead of dummy-fuse.
# A run of the whole catalog (all) is recorded only when asked (RECORD=1, or RESULTS=DIR): the result.json of its
# run dirs (_output/runs) go into a file of $RESULTS (default scenarios/results), and every doc generated from
# those files is generated again (make scenarios-doc, make matrix-doc), so that the project's tests, which
# check them, still pass. A user's own runs change no tracked file. An interrupted run is not recorded.
# DFC_SCENARIOS="a b" narrows all to those scenarios, unrecorded (the test of the README's commands runs a few).
set -o errexit -o nounset -o pipefail
cd "$(dirname "$0")/.."
# shellcheck source=hack/lib.sh
source hack/lib.sh

BIN=${BIN:-$PWD/bin}
BACKEND=${BACKEND:-local}
FUSE_SERVER=${FUSE_SERVER:-dummy-fuse}
if [ $# -eq 0 ]; then
  echo "usage: $0 SCENARIO... | all | list" >&2
  exit 2
fi
if [ "$*" = all ] && [ -n "${DFC_SCENARIOS:-}" ]; then
  read -r -a only <<<"$DFC_SCENARIOS"
  set -- "${only[@]}"
fi
if [ "$BACKEND" = local ] && [ "$1" != list ]; then
  need_root "the local backend makes FUSE mounts, mount and PID namespaces: sudo make scenario-$1"
fi
# dfc-scenario first, alone: it knows the catalog, so a misspelt name or flag is refused (with a "did you
# mean") before the other binaries are built; hack/build.sh then builds them all, stamped with the version.
step "building $BIN/dfc-scenario (the first build on a machine compiles client-go and helm: minutes on 2 cores)"
CGO_ENABLED=0 go build -trimpath -o "$BIN/dfc-scenario" ./scenarios/cmd/dfc-scenario # hack/build.sh's flags: one compile
if [ "$1" = list ]; then
  exec "$BIN/dfc-scenario" --list
fi
read -r -a flags <<<"${SCENARIO_FLAGS:-}"
args=(--backend="$BACKEND" --bin-dir="$BIN" --fuse-server="$FUSE_SERVER" "${flags[@]}" "$@")
"$BIN/dfc-scenario" --check "${args[@]}" || exit
# The commit the binaries are built from, taken before the build: the tree may change while it runs. COMMIT
# and RECORD_COMMAND are make matrix's: its passes are recorded under the commit it started from.
commit=${COMMIT:-$(git describe --always --dirty --abbrev=7 2>/dev/null || echo unknown)}
BIN=$BIN hack/build.sh
RESULTS=${RESULTS:-}
[ "${RECORD:-}" != 1 ] || RESULTS=${RESULTS:-scenarios/results}
if [ "$*" != all ] || [ -z "$RESULTS" ]; then
  [ "$*" != all ] || step "not recorded (RECORD=1 records the runs into scenarios/results and regenerates the docs that read them)"
  exec "$BIN/dfc-scenario" "${args[@]}"
fi
since=$(date -u +%FT%TZ) interrupted='' rc=0
trap 'interrupted=1' INT TERM # dfc-scenario gets the signal too, and cleans up before it exits
"$BIN/dfc-scenario" "${args[@]}" || rc=$?
trap - INT TERM
[ -z "$interrupted" ] || exit "$rc"
go run ./scenarios/cmd/scenariodoc record -out "$RESULTS" -commit "$commit" -since "$since" \
  -command "${RECORD_COMMAND:-make scenarios RECORD=1 BACKEND=$BACKEND FUSE_SERVER=$FUSE_SERVER${SCENARIO_FLAGS:+ SCENARIO_FLAGS=\"$SCENARIO_FLAGS\"}}" _output/runs &&
  go run ./scenarios/cmd/scenariodoc && go run ./scenarios/cmd/matrix || rc=1
exit "$rc"
