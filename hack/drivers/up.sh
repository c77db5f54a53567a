#!/usr/bin/env bash
# `make driver-up DRIVER=<driver>`: installs a CSI driver this project did not write on the running from-source
# cluster, from hack/drivers/<driver>: builds its image (its build.sh), imports it and the project's image of
# make image (its `csi-plugin register` stands in for node-driver-registrar) into the cluster's containerd,
# applies driver.env's MANIFESTS in order, then waits for READY and for kubelet to list the driver in the
# node's CSINode (the registration worked). Then `dfc-scenario --backend=kube --driver=...` runs against it.
set -o errexit -o nounset -o pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=hack/drivers/lib.sh
source "$ROOT/hack/drivers/lib.sh"
load_driver "${1:-}"
need_root "it imports images into the cluster's containerd"
daemon_pid containerd >/dev/null || die "the cluster's containerd is not running: make cluster-up"

step "building $DRIVER's image"
"$DRIVER_DIR/build.sh"
import_images "$ROOT/_output/images"
tar=$ROOT/_output/images/drivers/$DRIVER.tar
step "importing $(basename "$tar") ($IMAGE)"
ctr_k8s images import "$tar" >/dev/null

for m in $MANIFESTS; do
  step "applying $DRIVER/$m"
  kubectl_admin apply -f "$DRIVER_DIR/$m"
done

for r in ${READY:-}; do
  IFS=/ read -r ns kind name <<<"$r"
  step "waiting for $kind $ns/$name"
  case $kind in
    pod) kubectl_admin -n "$ns" wait --for=condition=Ready "pod/$name" --timeout=180s ||
      { kubectl_admin -n "$ns" describe "pod/$name" >&2; die "pod $ns/$name not Ready"; } ;;
    daemonset) kubectl_admin -n "$ns" rollout status "daemonset/$name" --timeout=180s ||
      { kubectl_admin -n "$ns" describe "daemonset/$name" >&2; die "DaemonSet $ns/$name not rolled out"; } ;;
    *) die "driver.env READY: $r: kind $kind is neither pod nor daemonset" ;;
  esac
done

# kubelet lists a driver in the node's CSINode once the plugin watcher has registered it: what a run's
# discovery of the node plugin needs first.
registered() {
  kubectl_admin get csinode "$NODE_NAME" -o jsonpath='{.spec.drivers[*].name}' | tr ' ' '\n' | grep -qxF "$DRIVER_NAME"
}
wait_for "kubelet to register $DRIVER_NAME on node $NODE_NAME (CSINode)" 120 kubelet registered
step "$DRIVER ($DRIVER_NAME) is up on node $NODE_NAME; see $DRIVER_DIR/README.md for the runs"
