#!/usr/bin/env bash
# `make cluster-load-images`: imports image tarballs (default: those of the last `make image`)
# into the running from-source cluster's containerd, namespace k8s.io, where kubelet finds them; the build of
# the last `make image` also under the chart's appVersion (the tag of the chart's defaults and of manifests/).
# Pods pick up a re-imported tag when their containers are next created (imagePullPolicy IfNotPresent).
set -o errexit -o nounset -o pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=hack/cluster/lib.sh
source "$ROOT/hack/cluster/lib.sh"
need_root "it talks to the cluster's containerd"
daemon_pid containerd >/dev/null || die "the cluster's containerd is not running: make cluster-up"
if [ $# -eq 0 ]; then
  import_images "$ROOT/_output/images"
  exit 0
fi
for f in "$@"; do
  [ -f "$f" ] || die "$f: no such image tarball (make image)"
  step "importing $f"
  ctr_k8s images import "$f"
done
