#!/usr/bin/env bash
# Runs scenarios of the catalog (scenarios/): `hack/scenario.sh restart`, `hack/scenario.sh all`.
# BACKEND=local (default) runs them on this machine: root and /dev/fuse, no cluster, a few seconds each.
# BACKEND=kube runs them on the cluster of the current kubeconfig (make cluster-up or make kind-up), with the
# chart installed for each scenario and removed after it.
# SCENARIO_FLAGS adds dfc-scenario flags, e.g. SCENARIO_FLAGS="--keep" or "--backoff-base=10s".
set -o errexit -o nounset -o pipefail
cd "$(dirname "$0")/.."
# shellcheck source=hack/lib.sh
source hack/lib.sh

BIN=${BIN:-$PWD/bin}
BACKEND=${BACKEND:-local}
if [ $# -eq 0 ]; then
  echo "usage: $0 SCENARIO... | all | list" >&2
  exit 2
fi
if [ "$BACKEND" = local ] && [ "$1" != list ]; then
  need_root "the local backend makes FUSE mounts, mount and PID namespaces: sudo make scenario-$1"
fi
# dfc-scenario first, alone: it knows the catalog, so a misspelt name or flag is refused (with a "did you
# mean") before the other binaries are built; hack/build.sh then builds them all, stamped with the version.
CGO_ENABLED=0 go build -o "$BIN/dfc-scenario" ./scenarios/cmd/dfc-scenario
if [ "$1" = list ]; then
  exec "$BIN/dfc-scenario" --list
fi
read -r -a flags <<<"${SCENARIO_FLAGS:-}"
args=(--backend="$BACKEND" --bin-dir="$BIN" "${flags[@]}" "$@")
"$BIN/dfc-scenario" --check "${args[@]}" || exit
BIN=$BIN hack/build.sh
exec "$BIN/dfc-scenario" "${args[@]}"
