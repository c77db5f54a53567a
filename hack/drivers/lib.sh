# shellcheck shell=bash
# shellcheck disable=SC2034 # DRIVER_DIR and DRIVER are used by the scripts that source this file
# Shared by hack/drivers/up.sh and down.sh (sourced): the cluster's settings and the driver dir's driver.env.
# shellcheck source=hack/cluster/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../cluster/lib.sh"

# load_driver DIR: checks that DIR is a driver dir (hack/drivers/<name> with a driver.env) and sources it;
# sets DRIVER_DIR and DRIVER (the dir's name, the name of its image tarball).
load_driver() {
  [ -n "${1:-}" ] || die "usage: $0 hack/drivers/<driver> (make ${0##*/}: DRIVER=<driver>)"
  DRIVER_DIR=$(cd "$1" 2>/dev/null && pwd) || die "$1: no such driver dir"
  DRIVER=$(basename "$DRIVER_DIR")
  [ -f "$DRIVER_DIR/driver.env" ] || die "$1: no driver.env, not a driver dir (hack/drivers/<driver>)"
  # shellcheck source=hack/drivers/k8s-csi-s3/driver.env
  source "$DRIVER_DIR/driver.env"
  local v
  for v in IMAGE DRIVER_NAME MANIFESTS; do
    [ -n "${!v:-}" ] || die "$DRIVER_DIR/driver.env sets no $v"
  done
  [ -x "$K8S_BIN/kubectl" ] || die "no $K8S_BIN/kubectl: make cluster-build (K8S_VERSION=$K8S_VERSION)"
  [ -f "$KUBECONFIG_PATH" ] || die "no $KUBECONFIG_PATH: is the cluster up (make cluster-up)?"
}
