#!/usr/bin/env bash
# `make matrix`: the local backend's whole catalog once per FUSE server × kubelet version the local backend
# models (scenarios/local), each pass recorded into scenarios/results as `make scenarios` records it, then
# docs/outage-matrix.md, its heatmap and docs/outcomes.md's table generated from every record (make
# matrix-doc). MATRIX_SERVERS and MATRIX_KUBELETS narrow it ("gcsfuse", "v1.36.3"); a server may be a spec file
# (docs/server-spec.md), whose settings SCENARIO_FLAGS gives ("--fuse-server-opt=remote=/srv/dfc").
# Every pass is recorded under the commit the matrix started from: the passes only add result files and
# regenerate docs, which the binaries do not depend on. Start it from a clean tree.
set -o errexit -o nounset -o pipefail
cd "$(dirname "$0")/.."
# shellcheck source=hack/lib.sh
source hack/lib.sh

need_root "the local backend makes FUSE mounts, mount and PID namespaces: sudo make matrix"
read -r -a servers <<<"${MATRIX_SERVERS:-$(go run ./scenarios/cmd/matrix servers)}"
read -r -a kubelets <<<"${MATRIX_KUBELETS:-$(go run ./scenarios/cmd/matrix kubelets)}"
commit=$(git describe --always --dirty --abbrev=7 2>/dev/null || echo unknown)
for s in "${servers[@]}"; do
  if [ "$s" != dummy-fuse ]; then
    hack/servers.sh
    break
  fi
done
failed=()
for s in "${servers[@]}"; do
  for v in "${kubelets[@]}"; do
    step "catalog with FUSE server $s on the local model of kubelet $v"
    RECORD=1 COMMIT=$commit FUSE_SERVER=$s SCENARIO_FLAGS="--kubelet-version=$v ${SCENARIO_FLAGS:-}" \
      RECORD_COMMAND="make matrix (FUSE_SERVER=$s, --kubelet-version=$v)" hack/scenario.sh all || failed+=("$s/$v")
  done
done
go run ./scenarios/cmd/matrix
[ ${#failed[@]} -eq 0 ] || die "passes with a failed scenario (recorded all the same): ${failed[*]}"
