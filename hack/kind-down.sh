#!/usr/bin/env bash
# `make kind-down`: deletes the kind cluster of `make kind-up` (KIND_CLUSTER_NAME, default dummy-fuse-csi).
set -o errexit -o nounset -o pipefail
cd "$(dirname "$0")/.."

CLUSTER=${KIND_CLUSTER_NAME:-dummy-fuse-csi}

# shellcheck source=hack/kind-lib.sh
source hack/kind-lib.sh
require_kind_tools kind-down

if "$KIND" get clusters 2>/dev/null | grep -qxF "$CLUSTER"; then
  "$KIND" delete cluster --name "$CLUSTER"
else
  echo "kind-down: no kind cluster named $CLUSTER; nothing to delete"
fi
