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
[ -x "$BIN/dfc-scenario" ] || die "$BIN/dfc-scenario missing: run make build"
if [ "$1" = list ]; then
  exec "$BIN/dfc-scenario" --list
fi
if [ "$BACKEND" = local ]; then
  need_root "the local backend makes FUSE mounts, mount and PID namespaces: sudo make scenario-$1"
fi
read -r -a flags <<<"${SCENARIO_FLAGS:-}"
exec "$BIN/dfc-scenario" --backend="$BACKEND" --bin-dir="$BIN" "${flags[@]}" "$@"
