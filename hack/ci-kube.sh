#!/usr/bin/env bash
# CI: the scenario catalog on a real kubelet. Brings up the from-source single-node cluster (make cluster-up:
# on a fresh machine it installs the Debian packages and builds Kubernetes v1.33.13 from module source, then
# builds the image tarballs with make image and imports them into the cluster's containerd), runs
# make test-kube against it with every skip turned into a failure, and always takes the cluster down again.
# Prints each step's duration and the total. Needs root.
#
# Environment: DFC_KUBE_ARTIFACTS (run dirs and summary; default _output/kube-e2e/ci-<time>).
set -o errexit -o nounset -o pipefail
cd "$(dirname "$0")/.."

MAKE=${MAKE:-make}
START=$SECONDS
declare -a TIMES=()

# step NAME COMMAND... runs a command and records how long it took.
step() {
  local name=$1
  shift
  local t0=$SECONDS
  echo "== ci-kube: $name: $*"
  local rc=0
  "$@" || rc=$?
  TIMES+=("$(printf '%-14s %4ds  %s' "$name" $((SECONDS - t0)) "$([ $rc = 0 ] && echo ok || echo "FAILED ($rc)")")")
  return $rc
}

summary() {
  echo "== ci-kube: durations"
  printf '   %s\n' "${TIMES[@]}"
  printf '   %-14s %4ds\n' total $((SECONDS - START))
}

down() {
  local rc=$?
  trap - EXIT INT TERM
  step cluster-down "$MAKE" cluster-down || rc=1
  summary
  if grep -E 'fuse|kubelet' /proc/self/mountinfo; then
    echo "ci-kube: mounts left behind (above)" >&2
    rc=1
  fi
  exit $rc
}
trap down EXIT
trap 'exit 130' INT TERM

if [ "$(id -u)" != 0 ]; then
  echo "ci-kube: needs root (the cluster runs kubelet and containerd on this machine)" >&2
  exit 1
fi

# The Debian packages the cluster runs on (FACTS.md §5), installed when missing.
PACKAGES="containerd runc containernetworking-plugins iptables conntrack openssl iproute2"
packages() {
  local missing=0 c
  for c in containerd containerd-shim-runc-v2 runc ctr iptables conntrack openssl ip; do
    command -v "$c" >/dev/null || missing=1
  done
  [ -x "${CNI_BIN_DIR:-/usr/lib/cni}/bridge" ] || missing=1
  if [ $missing = 0 ]; then
    echo "ci-kube: packages already installed"
    return 0
  fi
  # shellcheck disable=SC2086 # a list of package names
  DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $PACKAGES
}
step packages packages

# cluster-up depends on `make image`, so the image tarballs of this tree are built and imported here.
step cluster-up "$MAKE" cluster-up
export KUBECONFIG=${DFC_CLUSTER_DIR:-${DFC_CACHE_DIR:-$HOME/.cache/dummy-fuse-csi}/cluster}/kubeconfig
export DFC_REQUIRE_PRIVILEGED=1
export DFC_KUBE_ARTIFACTS=${DFC_KUBE_ARTIFACTS:-$PWD/_output/kube-e2e/ci-$(date +%Y%m%d-%H%M%S)}
step test-kube "$MAKE" test-kube
echo "== ci-kube: run dirs and summary in $DFC_KUBE_ARTIFACTS"
