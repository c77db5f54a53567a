#!/usr/bin/env bash
# `make cluster-up`: a real single-node Kubernetes on this machine without Docker or a registry, the way
# Kubernetes' own hack/local-up-cluster.sh runs one: containerd + runc from the distribution, etcd and the
# control plane as host processes, built from Go module source (hack/cluster/build.sh, cached), a bridge CNI
# network, and the project's images imported from _output/images (make image). Idempotent: when the cluster
# is already up and healthy it only re-imports the images. Stop it with hack/cluster/down.sh.
set -o errexit -o nounset -o pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=hack/cluster/lib.sh
source "$ROOT/hack/cluster/lib.sh"
IMAGES_DIR=${IMAGES_DIR:-$ROOT/_output/images}
PKI=$DFC_CLUSTER_DIR/pki
CONTAINERD_STATE=$(dirname "$CONTAINERD_SOCK")/state
API_PORT=${API_PORT:-6443}

need_root "it starts containerd and kubelet and mounts"
lock_cluster
on_exit() {
  local rc=$?
  [ "$rc" != 0 ] || return 0
  echo "cluster-up failed (exit $rc): daemon logs in $CLUSTER_LOGS; make cluster-down cleans up" >&2
  # kubelet's cAdvisor reads /proc/<pid>/fd of every process in the root cgroup (all of them on a host without
  # systemd) before the node registers; one process stuck in the kernel, e.g. on a dead FUSE mount that a
  # held /dev/fuse fd keeps alive, hangs it and the node never becomes Ready. Name such processes (kernel
  # threads, PF_KTHREAD in /proc/<pid>/stat's flags, wait in D state as their normal work: not them).
  local stat pid rest
  for stat in /proc/[0-9]*/stat; do
    pid=${stat//[^0-9]/}
    rest=$(cat "$stat" 2>/dev/null) || continue
    rest=${rest##*) } # after the command name, which may hold spaces and parentheses: state is field 3
    read -r -a rest <<<"$rest"
    if [ "${rest[0]}" != D ] || ((rest[6] & 0x200000)); then continue; fi
    echo "  process $pid ($(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)) is stuck in the kernel at $(cat "/proc/$pid/wchan" 2>/dev/null); kubelet may hang on it" >&2
  done
}
trap on_exit EXIT
ensure_packages "${CLUSTER_PACKAGES[@]}"
if [ ! -x "$CNI_BIN_DIR/bridge" ] || [ ! -x "$CNI_BIN_DIR/host-local" ]; then
  die "CNI plugins not in $CNI_BIN_DIR: apt-get install containernetworking-plugins (or set CNI_BIN_DIR)"
fi
[ -f "$IMAGES_DIR/pause-3.10.tar" ] || die "$IMAGES_DIR/pause-3.10.tar missing: run make image first"
# What this cluster is; a running cluster with other settings is not silently reused.
SETTINGS="kubernetes=$K8S_VERSION feature-gates=${FEATURE_GATES:-none} volume-stats-agg-period=${VOLUME_STATS_AGG_PERIOD:-default}"

print_usage() {
  local took=$1
  cat <<EOF
cluster is up ($took): node $NODE_NAME, $SETTINGS, kubelet root $KUBELET_ROOT_DIR
  export KUBECONFIG=$KUBECONFIG_PATH
  export PATH=$K8S_BIN:\$PATH   # kubectl and helm of the matching versions
logs: $CLUSTER_LOGS/*.log   stop: make cluster-down
EOF
}

healthy() {
  local d
  for d in "${DAEMONS[@]}"; do daemon_pid "$d" >/dev/null || return 1; done
  [ "$(kubectl_admin get node "$NODE_NAME" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

# --- already up? -------------------------------------------------------------------------------------------
# A running cluster of another release or with other settings is never replaced behind the user's back.
running=$(cat "$DFC_CLUSTER_DIR/settings" 2>/dev/null || echo "unknown settings")
if [ "$running" != "$SETTINGS" ]; then
  for d in "${DAEMONS[@]}"; do
    if daemon_pid "$d" >/dev/null; then
      die "a cluster with $running is running ($d at least), not $SETTINGS: make cluster-down first"
    fi
  done
elif [ -x "$K8S_BIN/kubectl" ] && healthy; then
  step "cluster already up and node $NODE_NAME Ready: re-importing images only"
  import_images "$IMAGES_DIR"
  print_usage "already running"
  exit 0
fi
if compgen -G "$CLUSTER_PIDS/*.pid" >/dev/null || [ -d "$DFC_CLUSTER_DIR" ]; then
  step "a previous cluster is partly running or left state behind: cleaning it up first"
  "$ROOT/hack/cluster/down.sh"
fi

# --- preconditions -----------------------------------------------------------------------------------------
for port in 2379 2380 "$API_PORT" 10250 10248 10257 10259; do
  if [ -n "$(ss -Hltn "sport = :$port")" ]; then
    die "TCP port $port is already in use (another etcd/Kubernetes?): $(ss -Hltnp "sport = :$port" | head -1)"
  fi
done
if [ -d "$KUBELET_ROOT_DIR" ] && [ -n "$(ls -A "$KUBELET_ROOT_DIR")" ]; then
  die "$KUBELET_ROOT_DIR exists and is not empty (another kubelet?): remove it or set KUBELET_ROOT_DIR"
fi
if [ -z "${NODE_IP:-}" ]; then
  dev=$(ip -4 -o route show default | awk '{for (i = 1; i < NF; i++) if ($i == "dev") { print $(i + 1); exit }}')
  NODE_IP=$(ip -4 -o addr show ${dev:+dev "$dev"} scope global | awk '{split($4, a, "/"); print a[1]; exit}')
fi
[ -n "$NODE_IP" ] || die "cannot find this machine's IPv4 address: set NODE_IP"

"$ROOT/hack/cluster/build.sh"
# cluster-down's CRI client, built now so that stopping never depends on the tree compiling.
mkdir -p "$DFC_CLUSTER_DIR/bin"
(cd "$ROOT" && go build -o "$DFC_CLUSTER_DIR/bin/cricleanup" ./hack/cluster/cricleanup)

step "preparing $DFC_CLUSTER_DIR (node $NODE_NAME, IP $NODE_IP)"
mkdir -p "$DFC_CLUSTER_DIR" "$CLUSTER_LOGS" "$CLUSTER_PIDS" "$PKI" "$CNI_CONF_DIR" "$CONTAINERD_ROOT" \
  "$CONTAINERD_STATE" "$DFC_CLUSTER_DIR/etcd" "$DFC_CLUSTER_DIR/pod-logs" "$KUBELET_ROOT_DIR"
chmod 700 "$PKI" "$DFC_CLUSTER_DIR/etcd"
# What cluster-down needs to undo: the kubelet root and /var/log/containers are removed only if created here.
echo "$KUBELET_ROOT_DIR" >"$DFC_CLUSTER_DIR/created-kubelet-root"
echo "$SETTINGS" >"$DFC_CLUSTER_DIR/settings"
[ -d /var/log/containers ] || echo /var/log/containers >"$DFC_CLUSTER_DIR/created-container-logs-dir"
# The chart's state dirs, which kubelet creates for the plugin pods (hostPath DirectoryOrCreate).
for d in "${CHART_STATE_DIRS[@]}"; do
  [ -e "$d" ] || echo "$d" >>"$DFC_CLUSTER_DIR/created-state-dirs"
done

# --- certificates: one CA; serving certs for the API server and kubelet; a client cert per component -------
step "generating certificates"
ossl() { openssl "$@" 2>>"$CLUSTER_LOGS/openssl.log" >/dev/null; }
ossl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -days 3650 \
  -keyout "$PKI/ca.key" -out "$PKI/ca.crt" -subj "/CN=dummy-fuse-csi-ca"
# cert NAME SUBJECT EXTENDED_KEY_USAGE [SUBJECT_ALT_NAMES]
cert() {
  local ext="basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=$3"
  [ -z "${4:-}" ] || ext+=$'\n'"subjectAltName=$4"
  ossl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
    -keyout "$PKI/$1.key" -out "$PKI/$1.csr" -subj "$2"
  ossl x509 -req -in "$PKI/$1.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial -days 365 \
    -out "$PKI/$1.crt" -extfile <(echo "$ext")
  rm -f "$PKI/$1.csr"
}
first_service_ip=${SERVICE_CIDR%.*}.1
cert apiserver "/CN=kube-apiserver" serverAuth \
  "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,DNS:$NODE_NAME,IP:127.0.0.1,IP:$NODE_IP,IP:$first_service_ip"
cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
cert admin "/O=system:masters/CN=kubernetes-admin" clientAuth
cert controller-manager "/CN=system:kube-controller-manager" clientAuth
cert scheduler "/CN=system:kube-scheduler" clientAuth
cert kubelet-client "/O=system:nodes/CN=system:node:$NODE_NAME" clientAuth
cert kubelet-serving "/CN=$NODE_NAME" serverAuth "DNS:$NODE_NAME,DNS:localhost,IP:127.0.0.1,IP:$NODE_IP"
ossl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$PKI/sa.key"
ossl pkey -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub"

# kubeconfig FILE USER CERTNAME
kubeconfig() {
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: dummy-fuse-csi
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority-data: $(base64 -w0 <"$PKI/ca.crt")
users:
- name: $2
  user:
    client-certificate-data: $(base64 -w0 <"$PKI/$3.crt")
    client-key-data: $(base64 -w0 <"$PKI/$3.key")
contexts:
- name: dummy-fuse-csi
  context: {cluster: dummy-fuse-csi, user: $2}
current-context: dummy-fuse-csi
EOF
  chmod 600 "$1"
}
kubeconfig "$KUBECONFIG_PATH" kubernetes-admin admin
kubeconfig "$DFC_CLUSTER_DIR/controller-manager.kubeconfig" system:kube-controller-manager controller-manager
kubeconfig "$DFC_CLUSTER_DIR/scheduler.kubeconfig" system:kube-scheduler scheduler
kubeconfig "$DFC_CLUSTER_DIR/kubelet.kubeconfig" "system:node:$NODE_NAME" kubelet-client

# --- node: mount propagation, pod network, containerd ------------------------------------------------------
# Bidirectional mount propagation (the CSI plugin's mounts reaching kubelet and other pods) needs a shared
# root mount; many hosts have it (systemd does this), this one may not. cluster-down restores a private root.
if ! awk '$5 == "/" { exit ($0 ~ / shared:[0-9]+ /) ? 0 : 1 }' /proc/self/mountinfo; then
  step "making / an rshared mount (was private)"
  echo private >"$DFC_CLUSTER_DIR/root-propagation"
  mount --make-rshared /
fi

# In-cluster clients (the chart's remediator) reach the API server at the kubernetes Service's IP, the service
# range's first; without kube-proxy nothing answers there, so one DNAT rule does its part for that Service
# (pods: PREROUTING; host-network pods: OUTPUT). cluster-down removes the chain.
iptables -t nat -N DFC-KUBERNETES-SVC 2>/dev/null || iptables -t nat -F DFC-KUBERNETES-SVC
iptables -t nat -A DFC-KUBERNETES-SVC -d "$first_service_ip/32" -p tcp --dport 443 -j DNAT --to-destination "$NODE_IP:$API_PORT"
for hook in PREROUTING OUTPUT; do
  iptables -t nat -C "$hook" -j DFC-KUBERNETES-SVC 2>/dev/null || iptables -t nat -A "$hook" -j DFC-KUBERNETES-SVC
done

# The bridge plugin turns on IPv4 forwarding; cluster-down puts the old value back.
cat /proc/sys/net/ipv4/ip_forward >"$DFC_CLUSTER_DIR/ip-forward"
cat >"$CNI_CONF_DIR/10-dummy-fuse-csi.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "dummy-fuse-csi",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "dfc0",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$POD_CIDR"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$DFC_CLUSTER_DIR/cni/ipam"
      }
    }
  ]
}
EOF

# Own root, state, socket and runc root: a containerd of the distribution or of Docker can run beside it.
cat >"$DFC_CLUSTER_DIR/containerd.toml" <<EOF
version = 2
root = "$CONTAINERD_ROOT"
state = "$CONTAINERD_STATE"
[grpc]
  address = "$CONTAINERD_SOCK"
[ttrpc]
  address = "$CONTAINERD_SOCK.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$CONTAINERD_ROOT/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # The VM lacks CAP_SYS_RESOURCE: without this runc fails with "can't get final child's PID from pipe: EOF".
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$(dirname "$CONTAINERD_SOCK")/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN_DIR"
    conf_dir = "$CNI_CONF_DIR"
EOF

step "starting containerd"
start_daemon containerd containerd --config "$DFC_CLUSTER_DIR/containerd.toml"
wait_for "containerd to serve $CONTAINERD_SOCK" 30 containerd ctr --address "$CONTAINERD_SOCK" version
import_images "$IMAGES_DIR"

# --- control plane -----------------------------------------------------------------------------------------
# FEATURE_GATES go to every component, as Kubernetes' hack/local-up-cluster.sh does.
gate_flags=()
[ -z "$FEATURE_GATES" ] || gate_flags=(--feature-gates "$FEATURE_GATES")
step "starting etcd $ETCD_VERSION"
start_daemon etcd "$K8S_BIN/etcd" --name dummy-fuse-csi --data-dir "$DFC_CLUSTER_DIR/etcd" \
  --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
  --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
  --initial-cluster dummy-fuse-csi=http://127.0.0.1:2380 --listen-metrics-urls http://127.0.0.1:2381 \
  --quota-backend-bytes 2147483648 --log-level warn

step "starting kube-apiserver"
start_daemon kube-apiserver "$K8S_BIN/kube-apiserver" \
  --etcd-servers http://127.0.0.1:2379 --secure-port "$API_PORT" --advertise-address "$NODE_IP" \
  --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" --client-ca-file "$PKI/ca.crt" \
  --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" \
  --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
  --kubelet-certificate-authority "$PKI/ca.crt" --kubelet-preferred-address-types InternalIP,Hostname \
  --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-cluster-ip-range "$SERVICE_CIDR" --authorization-mode Node,RBAC \
  --enable-admission-plugins NodeRestriction --allow-privileged=true \
  --cert-dir "$PKI/apiserver-generated" --profiling=false "${gate_flags[@]}"
wait_for "kube-apiserver /readyz" 90 kube-apiserver kubectl_admin get --raw /readyz

step "starting kube-controller-manager and kube-scheduler"
start_daemon kube-controller-manager "$K8S_BIN/kube-controller-manager" \
  --kubeconfig "$DFC_CLUSTER_DIR/controller-manager.kubeconfig" --bind-address 127.0.0.1 \
  --leader-elect=false --use-service-account-credentials=true \
  --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
  --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
  --cert-dir "$PKI/controller-manager-generated" --profiling=false "${gate_flags[@]}"
start_daemon kube-scheduler "$K8S_BIN/kube-scheduler" \
  --kubeconfig "$DFC_CLUSTER_DIR/scheduler.kubeconfig" --bind-address 127.0.0.1 --leader-elect=false \
  --profiling=false "${gate_flags[@]}"

# --- kubelet -----------------------------------------------------------------------------------------------
# Anonymous + AlwaysAllow on the kubelet API is acceptable for this local testbed (it is what keeps
# `kubectl logs/exec` simple); the API server still authenticates to it with a client certificate.
cat >"$DFC_CLUSTER_DIR/kubelet-config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# No systemd, cgroup v1, swap allowed (this kind of machine):
cgroupDriver: cgroupfs
failSwapOn: false
failCgroupV1: false
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: AlwaysAllow}
tlsCertFile: $PKI/kubelet-serving.crt
tlsPrivateKeyFile: $PKI/kubelet-serving.key
healthzBindAddress: 127.0.0.1
podLogsDir: $DFC_CLUSTER_DIR/pod-logs
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
serializeImagePulls: false
# A developer's disk may be fuller than the defaults allow; never evict the testbed's pods for it.
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
EOF
if [ -n "$FEATURE_GATES" ]; then
  echo "featureGates: {$(sed 's/=/: /g; s/,/, /g' <<<"$FEATURE_GATES")}" >>"$DFC_CLUSTER_DIR/kubelet-config.yaml"
fi
if [ -n "$VOLUME_STATS_AGG_PERIOD" ]; then
  echo "volumeStatsAggPeriod: $VOLUME_STATS_AGG_PERIOD" >>"$DFC_CLUSTER_DIR/kubelet-config.yaml"
fi
step "starting kubelet (root dir $KUBELET_ROOT_DIR)"
start_daemon kubelet "$K8S_BIN/kubelet" --config "$DFC_CLUSTER_DIR/kubelet-config.yaml" \
  --kubeconfig "$DFC_CLUSTER_DIR/kubelet.kubeconfig" --root-dir "$KUBELET_ROOT_DIR" \
  --hostname-override "$NODE_NAME" --node-ip "$NODE_IP" --v 2

step "waiting for node $NODE_NAME to be Ready"
node_ready() {
  [ "$(kubectl_admin get node "$NODE_NAME" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')" = True ]
}
wait_for "node $NODE_NAME Ready" 180 kubelet node_ready
kubelet_version=$(kubectl_admin get node "$NODE_NAME" -o 'jsonpath={.status.nodeInfo.kubeletVersion}')
[ "$kubelet_version" = "$K8S_VERSION" ] || die "node $NODE_NAME runs kubelet $kubelet_version, want $K8S_VERSION"
# Pods are rejected until the controller-manager has created the namespace's default service account.
wait_for "the default service account" 60 kube-controller-manager kubectl_admin get serviceaccount default

print_usage "took ${SECONDS}s"
