#!/usr/bin/env bash
# `make cluster-smoke`: proves the running from-source cluster can do what the testbed needs, with the
# project image only:
#  1. a static-binary pod (dummy-fuse-workload reading a hostPath file) runs and `kubectl logs` shows its reads;
#  2. a privileged pod runs dummy-fuse on a hostPath with Bidirectional mount propagation: the FUSE mount made
#     inside the container appears on the host (what a CSI node plugin relies on), and goes away with the pod.
# Leaves nothing behind (its namespace is deleted, even on failure).
set -o errexit -o nounset -o pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=hack/cluster/lib.sh
source "$ROOT/hack/cluster/lib.sh"
need_root "it looks at the host's mounts"
IMAGE=${IMAGE:-$(cat "$ROOT/_output/images/dummy-fuse-csi.ref" 2>/dev/null)} || die "no image: make image"
NS=dfc-smoke
MNT=$KUBELET_ROOT_DIR/plugins/dfc-smoke/mnt
k() { kubectl_admin --namespace "$NS" "$@"; }

cleanup() {
  kubectl_admin delete namespace "$NS" --ignore-not-found --wait=true --timeout=90s >/dev/null || true
  if [ -n "$(mounts_under "$MNT")" ]; then umount -l "$MNT" || true; fi
  rm -rf "$KUBELET_ROOT_DIR/plugins/dfc-smoke"
}
trap cleanup EXIT

step "smoke test with image $IMAGE in namespace $NS"
kubectl_admin create namespace "$NS" >/dev/null
mkdir -p "$MNT" # dummy-fuse mounts on an existing directory
wait_for "service account $NS/default" 60 kube-controller-manager k get serviceaccount default
k apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: reader}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 2
  containers:
  - name: workload
    image: $IMAGE
    imagePullPolicy: Never
    command: [/usr/local/bin/dummy-fuse-workload, --file, /host/hostname, --read-interval, 1s, --log-format, json]
    volumeMounts: [{name: etc, mountPath: /host, readOnly: true}]
  volumes:
  - name: etc
    hostPath: {path: /etc, type: Directory}
---
apiVersion: v1
kind: Pod
metadata: {name: fuse}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 5
  containers:
  - name: dummy-fuse
    image: $IMAGE
    imagePullPolicy: Never
    command: [/usr/local/bin/dummy-fuse, /plugin/mnt]
    securityContext: {privileged: true}
    volumeMounts: [{name: plugin, mountPath: /plugin, mountPropagation: Bidirectional}]
  volumes:
  - name: plugin
    hostPath: {path: $KUBELET_ROOT_DIR/plugins/dfc-smoke, type: DirectoryOrCreate}
EOF
k wait --for=condition=Ready pod/reader pod/fuse --timeout=120s >/dev/null ||
  { k describe pods >&2; die "smoke pods did not become Ready"; }

step "1. kubectl logs of a static-binary pod"
logs_show_read() { k logs reader | grep -q '"event":"read"'; }
wait_for "a read in the reader's logs" 30 kubelet logs_show_read
k logs reader | grep '"event":"read"' | head -n 1

step "2. FUSE mount from a privileged pod propagates to the host (Bidirectional)"
host_reads() { [ "$(cat "$MNT/dummy-file.txt")" = "Hello world!" ]; }
wait_for "$MNT/dummy-file.txt on the host" 30 kubelet host_reads
grep " $MNT " /proc/self/mountinfo
k delete pod fuse --wait=true --timeout=60s >/dev/null
unmounted() { [ -z "$(mounts_under "$MNT")" ]; }
wait_for "the FUSE mount to leave the host with its pod" 30 kubelet unmounted
step "smoke test passed"
