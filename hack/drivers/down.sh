#!/usr/bin/env bash
# `make driver-down DRIVER=<driver>`: removes what make driver-up applied for hack/drivers/<driver>, in reverse
# order, waiting for the pods to go, then the driver's dead staging mounts (its FUSE servers die with its pod).
# Refused while PersistentVolumes of the driver exist: their pods would lose their mounts (FORCE=1 goes on).
# The images stay imported.
set -o errexit -o nounset -o pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=hack/drivers/lib.sh
source "$ROOT/hack/drivers/lib.sh"
load_driver "${1:-}"
need_root "it unmounts the driver's staging mounts on the node"

pvs=$(kubectl_admin get pv --no-headers -o custom-columns=NAME:.metadata.name,DRIVER:.spec.csi.driver |
  awk -v d="$DRIVER_NAME" '$2 == d {print $1}' | tr '\n' ' ')
if [ -n "$pvs" ] && [ "${FORCE:-}" != 1 ]; then
  die "PersistentVolumes of $DRIVER_NAME still exist: $pvs(delete their pods, claims and them first, or FORCE=1)"
fi

manifests=()
for m in $MANIFESTS; do manifests=("$m" "${manifests[@]}"); done
for m in "${manifests[@]}"; do
  step "deleting $DRIVER/$m"
  kubectl_admin delete -f "$DRIVER_DIR/$m" --ignore-not-found --wait=true --timeout=120s
done

# The staging dirs are kubelet's, under the driver's name; a mount left there is dead once the pod is gone.
while read -r m; do
  [ -n "$m" ] || continue
  step "unmounting $m"
  umount -l "$m" || true
done < <(mounts_under "$KUBELET_ROOT_DIR/plugins/kubernetes.io/csi/$DRIVER_NAME")
step "$DRIVER ($DRIVER_NAME) is down"
