# shellcheck shell=bash
# shellcheck disable=SC2034 # the variables are used by the scripts that source this file
# Shared settings of the from-source cluster scripts (sourced, not run).
# Every setting can be overridden from the environment; see hack/cluster/README.md.
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

# The newest Kubernetes release whose modules the Go module proxy serves (go list -m -versions
# k8s.io/kubernetes); `make cluster-up K8S_VERSION=v1.36.3` runs another one. Each version is built once and
# cached beside the others.
K8S_DEFAULT_VERSION=v1.37.2
K8S_VERSION=${K8S_VERSION:-$K8S_DEFAULT_VERSION}
[[ $K8S_VERSION =~ ^v1\.[0-9]+\.[0-9]+$ ]] || die "K8S_VERSION=$K8S_VERSION: want a release such as $K8S_DEFAULT_VERSION"
K8S_STAGING_VERSION=v0.${K8S_VERSION#v1.}       # k8s.io/api etc. are tagged v0.<minor>.<patch>
ETCD_VERSION=${ETCD_VERSION:-v3.5.21}
# Feature gates for kube-apiserver, kube-controller-manager, kube-scheduler and kubelet, as
# "Name=true,Other=false". Default CSIVolumeHealth=true (kubelet and the API server both need it) and, below, a
# volumeStatsAggPeriod of 2s: what the catalog's health-report needs, so that the whole catalog runs on the
# cluster the README brings up (set FEATURE_GATES= and VOLUME_STATS_AGG_PERIOD= for kubelet's own defaults).
FEATURE_GATES=${FEATURE_GATES-CSIVolumeHealth=true}
[[ -z $FEATURE_GATES || $FEATURE_GATES =~ ^[A-Za-z0-9]+=(true|false)(,[A-Za-z0-9]+=(true|false))*$ ]] ||
  die "FEATURE_GATES=$FEATURE_GATES: want Name=true|false[,Name=true|false...]"
# kubelet's volumeStatsAggPeriod (how often it gathers volume stats and, with CSIVolumeHealth, volume health);
# empty: kubelet's own (1m).
VOLUME_STATS_AGG_PERIOD=${VOLUME_STATS_AGG_PERIOD-2s}
[[ -z $VOLUME_STATS_AGG_PERIOD || $VOLUME_STATS_AGG_PERIOD =~ ^([0-9]+(ms|s|m|h))+$ ]] ||
  die "VOLUME_STATS_AGG_PERIOD=$VOLUME_STATS_AGG_PERIOD: want a duration such as 10s or 1m30s"

DFC_CACHE_DIR=${DFC_CACHE_DIR:-$HOME/.cache/dummy-fuse-csi}
# Built binaries (kube-*, kubelet, kubectl, etcd, helm) and the copied Kubernetes source.
DFC_K8S_CACHE=${DFC_K8S_CACHE:-$DFC_CACHE_DIR/k8s-$K8S_VERSION}
# Runtime state of one cluster: certs, configs, logs, pid files, etcd data, kubeconfig.
DFC_CLUSTER_DIR=${DFC_CLUSTER_DIR:-$DFC_CACHE_DIR/cluster}
KUBELET_ROOT_DIR=${KUBELET_ROOT_DIR:-/var/lib/kubelet}
# Private address ranges used only on this machine.
POD_CIDR=${POD_CIDR:-10.244.0.0/24}
SERVICE_CIDR=${SERVICE_CIDR:-10.96.0.0/24}
NODE_NAME=${NODE_NAME:-$(hostname | tr '[:upper:]' '[:lower:]')}
PAUSE_IMAGE=${PAUSE_IMAGE:-dummy-fuse-csi/pause:3.10}

K8S_BIN=$DFC_K8S_CACHE/bin
KUBECONFIG_PATH=$DFC_CLUSTER_DIR/kubeconfig
CLUSTER_LOGS=$DFC_CLUSTER_DIR/logs
CLUSTER_PIDS=$DFC_CLUSTER_DIR/pids
CONTAINERD_ROOT=$DFC_CLUSTER_DIR/containerd
CONTAINERD_SOCK=/run/dummy-fuse-csi/containerd/containerd.sock
CNI_CONF_DIR=$DFC_CLUSTER_DIR/cni/net.d
CNI_BIN_DIR=${CNI_BIN_DIR:-/usr/lib/cni}
# What the cluster runs on, as WHAT:DEBIAN_PACKAGE for ensure_packages (cluster-up installs what is missing).
CLUSTER_PACKAGES=(containerd:containerd containerd-shim-runc-v2:containerd ctr:containerd runc:runc
  "$CNI_BIN_DIR/bridge:containernetworking-plugins" "$CNI_BIN_DIR/host-local:containernetworking-plugins"
  iptables:iptables conntrack:conntrack openssl:openssl ip:iproute2 ss:iproute2 setsid:util-linux flock:util-linux)
# The daemons in start order; cluster-down stops them in reverse.
DAEMONS=(containerd etcd kube-apiserver kube-controller-manager kube-scheduler kubelet)

# lock_cluster: one cluster-up/cluster-down at a time (several people and CI share a machine). up.sh calls
# down.sh while holding the lock; DFC_CLUSTER_LOCKED tells the child it already has it.
lock_cluster() {
  [ -z "${DFC_CLUSTER_LOCKED:-}" ] || return 0
  mkdir -p "$DFC_CACHE_DIR"
  exec 9>"$DFC_CACHE_DIR/cluster.lock"
  if ! flock -n 9; then
    step "waiting for another cluster-up/cluster-down to finish"
    flock -w 1800 9 || die "another cluster-up/cluster-down still holds $DFC_CACHE_DIR/cluster.lock"
  fi
  export DFC_CLUSTER_LOCKED=1
}


# daemon_pid NAME: prints the PID recorded for NAME if that process still runs the recorded binary
# (so a recycled PID is never mistaken for the daemon); fails otherwise.
daemon_pid() {
  local f=$CLUSTER_PIDS/$1.pid pid exe actual
  [ -f "$f" ] || return 1
  read -r pid exe <"$f" || return 1
  actual=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
  [ "$actual" = "$exe" ] || [ "$actual" = "$exe (deleted)" ] || return 1
  [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ] || return 1
  echo "$pid"
}

# start_daemon NAME BINARY ARGS...: runs a daemon in its own session (a Ctrl-C of make does not kill it),
# output appended to $CLUSTER_LOGS/NAME.log, "PID BINARY" in $CLUSTER_PIDS/NAME.pid.
start_daemon() {
  local name=$1 exe pid i
  shift
  exe=$(readlink -f "$(command -v "$1")")
  # Without job control the background child is no process-group leader, so setsid execs in place and
  # $! is the daemon's own PID.
  # Every descriptor above 2 is closed first: a daemon holding an inherited lock (this script's cluster lock,
  # or the lock of a caller that runs make cluster-up under flock(1)) would hold it for the cluster's life.
  (
    for fd in /proc/"$BASHPID"/fd/*; do
      fd=${fd##*/}
      [ "$fd" -gt 2 ] && eval "exec $fd>&-"
    done
    exec setsid "$@" >>"$CLUSTER_LOGS/$name.log" 2>&1 </dev/null
  ) &
  pid=$!
  echo "$pid $exe" >"$CLUSTER_PIDS/$name.pid"
  for _ in $(seq 50); do
    daemon_pid "$name" >/dev/null && return 0
    [ -d "/proc/$pid" ] || break
    sleep 0.1
  done
  tail -n 20 "$CLUSTER_LOGS/$name.log" >&2 || true
  die "$name did not start (log: $CLUSTER_LOGS/$name.log)"
}

# stop_daemon NAME [GRACE_SECONDS]: SIGTERM, wait, SIGKILL; by the recorded PID only.
stop_daemon() {
  local name=$1 grace=${2:-15} pid i
  if pid=$(daemon_pid "$name"); then
    step "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq $((grace * 10))); do
      daemon_pid "$name" >/dev/null || break
      sleep 0.1
    done
    if daemon_pid "$name" >/dev/null; then
      step "$name ignored SIGTERM for ${grace}s: SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      for _ in $(seq 50); do daemon_pid "$name" >/dev/null || break; sleep 0.1; done
    fi
  fi
  rm -f "$CLUSTER_PIDS/$name.pid"
}

# wait_for DESCRIPTION TIMEOUT_SECONDS LOGNAME COMMAND...: polls COMMAND every half second; on timeout
# prints the tail of $CLUSTER_LOGS/LOGNAME.log and fails.
wait_for() {
  local what=$1 timeout=$2 log=$3 deadline
  shift 3
  deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "----- last lines of $CLUSTER_LOGS/$log.log -----" >&2
      tail -n 30 "$CLUSTER_LOGS/$log.log" >&2 || true
      die "timed out after ${timeout}s waiting for $what (logs: $CLUSTER_LOGS)"
    fi
    sleep 0.5
  done
}

# mounts_under DIR: mount points at or below DIR, deepest first (octal escapes of mountinfo decoded).
mounts_under() {
  local dir
  dir=$(readlink -f "$1" 2>/dev/null) || return 0
  awk -v d="$dir" '{ p = $5; gsub(/\\040/, " ", p); if (p == d || index(p, d "/") == 1) print length(p) "\t" p }' \
    /proc/self/mountinfo | sort -rn | cut -f2-
}

kubectl_admin() { "$K8S_BIN/kubectl" --kubeconfig "$KUBECONFIG_PATH" "$@"; }
ctr_k8s() { ctr --address "$CONTAINERD_SOCK" --namespace k8s.io "$@"; }

# CHART_STATE_DIRS: the host dirs of the plugin's mount records that the chart creates on a node: its stateDir
# (chart/values.yaml) and the one the Kubernetes scenario backend sets (scenarios/kube DefaultStateDir).
# cluster-down removes those that cluster-up did not find (created-state-dirs).
CHART_STATE_DIRS=("$(sed -n 's/^stateDir: *//p' "$(dirname "${BASH_SOURCE[0]}")/../../chart/values.yaml")"
  /var/lib/dummy-fuse-csi-scenario)

# chart_app_version: the chart's appVersion, the image tag of the chart's defaults and of manifests/.
chart_app_version() {
  sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' "$(dirname "${BASH_SOURCE[0]}")/../../chart/Chart.yaml"
}

# containerd_ref NAME:TAG: the name containerd stores an imported image under (docker's normalisation: a name
# without a registry is docker.io's, one without a path library/'s), the one `ctr images tag` needs.
containerd_ref() {
  case $1 in
    */*) case ${1%%/*} in *.* | *:* | localhost) echo "$1" ;; *) echo "docker.io/$1" ;; esac ;;
    *) echo "docker.io/library/$1" ;;
  esac
}

# import_images DIR: imports the tarballs of the last `make image` in DIR (and of make server-image in
# DIR/servers) and tags its build also with the
# chart's appVersion, so that `helm install` with the chart's defaults and `kubectl apply -f manifests/` run
# what `make image` built (kubelet finds the tag with imagePullPolicy IfNotPresent and never pulls).
import_images() {
  local f ref default
  while read -r f; do
    [ -f "$f" ] || die "$f missing: run make image"
    step "importing image $(basename "$f")"
    ctr_k8s images import "$f" >/dev/null
  done < <(current_image_tars "$1")
  # Operators' server images of make server-image, for the chart's fuseServer.image.
  for f in "$1"/servers/*.tar; do
    [ -f "$f" ] || continue
    step "importing server image $(basename "$f")"
    ctr_k8s images import "$f" >/dev/null
  done
  ref=$(cat "$1/dummy-fuse-csi.ref")
  default=${ref%:*}:$(chart_app_version)
  if [ "$ref" != "$default" ]; then
    step "tagging $ref also as $default (the chart's default image and manifests/')"
    ctr_k8s images tag --force "$(containerd_ref "$ref")" "$(containerd_ref "$default")" >/dev/null
  fi
}

# current_image_tars DIR: the tarballs of the last `make image` (pause, the tag in dummy-fuse-csi.ref and its
# next build).
current_image_tars() {
  local ref
  echo "$1/pause-3.10.tar"
  ref=$(cat "$1/dummy-fuse-csi.ref" 2>/dev/null) || return 0
  echo "$1/dummy-fuse-csi-${ref#*:}.tar"
  echo "$1/dummy-fuse-csi-${ref#*:}-next.tar"
}
