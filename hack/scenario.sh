#!/usr/bin/env bash
# Runs scenarios of the catalog (scenarios/): `hack/scenario.sh restart`, `hack/scenario.sh all`.
# BACKEND=local (default) runs them on this machine: root and /dev/fuse, no cluster, a few seconds each.
# BACKEND=kube runs them against the current kubeconfig (issue 5).
# SCENARIO_FLAGS adds dfc-scenario flags, e.g. SCENARIO_FLAGS="--keep" or "--backoff-base=10s".
set -o errexit -o nounset -o pipefail
cd "$(dirname "$0")/.."

BIN=${BIN:-$PWD/bin}
BACKEND=${BACKEND:-local}
if [ $# -eq 0 ]; then
  echo "usage: $0 SCENARIO... | all" >&2
  exit 2
fi
if [ "$1" = list ]; then
  exec "$BIN/dfc-scenario" --list
fi
if [ ! -x "$BIN/dfc-scenario" ]; then
  echo "scenario: $BIN/dfc-scenario missing; run make build" >&2
  exit 1
fi
if [ "$BACKEND" = local ] && [ "$(id -u)" != 0 ]; then
  echo "scenario: the local backend needs root (FUSE mounts, mount and PID namespaces): sudo make scenario-$1" >&2
  exit 1
fi
# shellcheck disable=SC2086 # SCENARIO_FLAGS is a list of flags
exec "$BIN/dfc-scenario" --backend="$BACKEND" --bin-dir="$BIN" ${SCENARIO_FLAGS:-} "$@"
