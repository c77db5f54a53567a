#!/usr/bin/env bash
# `make cluster-down`: stops the cluster of hack/cluster/up.sh and removes what it left on the machine:
# every daemon by its recorded PID (SIGTERM, wait, SIGKILL), every pod through CRI (so containerd runs CNI DEL
# and removes network namespaces), the mounts under the kubelet root dir and the cluster dir, the pod bridge,
# kubelet's cgroups, and the state directories (the cluster's, and the chart's state dirs that cluster-up did
# not find). Built binaries stay cached. Exits non-zero if anything it owns is still there afterwards.
set -o errexit -o nounset -o pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=hack/cluster/lib.sh
source "$ROOT/hack/cluster/lib.sh"
need_root "it stops the cluster's daemons and unmounts"
lock_cluster
RUN_DIR=$(dirname "$CONTAINERD_SOCK")

if [ ! -d "$DFC_CLUSTER_DIR" ] && [ ! -d "$RUN_DIR" ]; then
  step "no cluster state in $DFC_CLUSTER_DIR: nothing to do"
  exit 0
fi

# 1. Nothing may recreate or restart pods while they are removed.
stop_daemon kube-controller-manager
stop_daemon kube-scheduler
stop_daemon kubelet 30

# 2. Pods: through CRI, with containerd running (started again for this if it died).
if [ -f "$DFC_CLUSTER_DIR/containerd.toml" ]; then
  restarted=ok
  if ! daemon_pid containerd >/dev/null; then
    mkdir -p "$CLUSTER_LOGS" "$CLUSTER_PIDS"
    step "starting containerd again to remove the pods it left"
    restarted=$( (start_daemon containerd containerd --config "$DFC_CLUSTER_DIR/containerd.toml" &&
      wait_for "containerd to serve $CONTAINERD_SOCK" 30 containerd ctr --address "$CONTAINERD_SOCK" version) >&2 &&
      echo ok) || true
  fi
  cricleanup=$DFC_CLUSTER_DIR/bin/cricleanup
  [ -x "$cricleanup" ] || (cd "$ROOT" && go build -o "$cricleanup" ./hack/cluster/cricleanup) || true
  step "removing all pods through CRI (containerd tears down their network and mounts)"
  if [ "$restarted" != ok ] || ! "$cricleanup" --endpoint "unix://$CONTAINERD_SOCK" --timeout 2m; then
    echo "WARNING: CRI cleanup failed; killing leftover container processes by the PIDs containerd recorded" >&2
  fi
fi
stop_daemon containerd 30
# Shims and container processes of tasks that were not deleted (normally none): runtime v2 keeps their PIDs
# in each task's bundle directory. A PID counts only if it is still a shim or in one of kubelet's cgroups.
for pidfile in "$RUN_DIR"/state/io.containerd.runtime.v2.task/*/*/{init,shim}.pid; do
  [ -f "$pidfile" ] || continue
  pid=$(cat "$pidfile")
  exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || continue
  if [[ $exe == */containerd-shim-runc-v2* ]] || grep -q kubepods "/proc/$pid/cgroup" 2>/dev/null; then
    step "killing leftover $(basename "$pidfile" .pid) process $pid ($exe)"
    kill -KILL "$pid" 2>/dev/null || true
  fi
done

# 3. Control plane.
stop_daemon kube-apiserver
stop_daemon etcd

# 4. Mounts: kubelet's volume/token mounts, CSI staging and FUSE mounts, container rootfs mounts.
left=0
for dir in "$KUBELET_ROOT_DIR" "$DFC_CLUSTER_DIR" "$RUN_DIR"; do
  while IFS= read -r m; do
    [ -n "$m" ] || continue
    step "unmounting $m"
    umount "$m" 2>/dev/null || umount -l "$m" || true
  done < <(mounts_under "$dir")
  if [ -n "$(mounts_under "$dir")" ]; then
    echo "ERROR: still mounted under $dir:" >&2
    mounts_under "$dir" >&2
    left=1
  fi
done

# 5. Network: the pod bridge (the bridge plugin never deletes it), IP forwarding, kubelet's iptables chains.
if ip link show dfc0 >/dev/null 2>&1; then
  step "deleting the pod bridge dfc0"
  ip link delete dfc0
fi
if [ -f "$DFC_CLUSTER_DIR/ip-forward" ]; then
  cat "$DFC_CLUSTER_DIR/ip-forward" >/proc/sys/net/ipv4/ip_forward
fi
# up.sh's stand-in for kube-proxy (the kubernetes Service's DNAT).
for hook in PREROUTING OUTPUT; do
  while iptables -t nat -D "$hook" -j DFC-KUBERNETES-SVC 2>/dev/null; do :; done
done
iptables -t nat -F DFC-KUBERNETES-SVC 2>/dev/null || true
iptables -t nat -X DFC-KUBERNETES-SVC 2>/dev/null || true
# kubelet's own chains: KUBE-FIREWALL (filter; INPUT and OUTPUT jump to it), the canaries, the hint.
for ipt in iptables ip6tables; do
  for hook in INPUT OUTPUT; do
    while $ipt -t filter -D "$hook" -j KUBE-FIREWALL 2>/dev/null; do :; done
  done
  $ipt -t filter -F KUBE-FIREWALL 2>/dev/null || true
  $ipt -t filter -X KUBE-FIREWALL 2>/dev/null || true
  for table in mangle nat filter; do
    $ipt -t "$table" -X KUBE-KUBELET-CANARY 2>/dev/null || true
  done
  $ipt -t mangle -X KUBE-IPTABLES-HINT 2>/dev/null || true
done

# 6. Cgroups kubelet created (empty once every container is gone).
for hier in /sys/fs/cgroup/*/; do
  [ -d "${hier}kubepods" ] || continue
  find "${hier}kubepods" -depth -type d -exec rmdir {} + 2>/dev/null || true
  if [ -d "${hier}kubepods" ]; then
    echo "WARNING: cgroup ${hier}kubepods not empty" >&2
  fi
done

# 7. State. Nothing is removed while anything is still mounted below it (a bind of / would be emptied too).
if [ "$left" = 0 ]; then
  if [ -f "$DFC_CLUSTER_DIR/created-kubelet-root" ]; then
    kubelet_root=$(cat "$DFC_CLUSTER_DIR/created-kubelet-root")
    step "removing $kubelet_root"
    rm -rf --one-file-system "$kubelet_root"
  fi
  if [ -f "$DFC_CLUSTER_DIR/created-container-logs-dir" ]; then
    rm -rf /var/log/containers
  elif [ -d /var/log/containers ]; then
    # kubelet's symlinks to our pod logs
    find /var/log/containers -maxdepth 1 -type l -lname "$DFC_CLUSTER_DIR/*" -delete
  fi
  if [ -f "$DFC_CLUSTER_DIR/root-propagation" ]; then
    step "making / private again, as it was before cluster-up"
    mount --make-rprivate /
  fi
  # The plugin's mount records, in the chart's state dirs that did not exist before cluster-up.
  while IFS= read -r d; do
    if [ -n "$(mounts_under "$d")" ]; then
      echo "WARNING: $d kept: something is mounted below it" >&2
      continue
    fi
    [ ! -e "$d" ] || step "removing $d (the chart's state dir)"
    rm -rf --one-file-system "$d"
  done < <(cat "$DFC_CLUSTER_DIR/created-state-dirs" 2>/dev/null)
  step "removing $DFC_CLUSTER_DIR and $RUN_DIR"
  rm -rf --one-file-system "$DFC_CLUSTER_DIR" "$RUN_DIR"
  rmdir "$(dirname "$RUN_DIR")" 2>/dev/null || true
  # containerd's shims always put their sockets in /run/containerd/s; drop it only if nothing else uses it.
  rmdir /run/containerd/s /run/containerd 2>/dev/null || true
  rmdir /run/netns 2>/dev/null || true # containerd's CRI makes it; `ip netns` recreates it when needed
else
  die "mounts are left (above): state kept in $DFC_CLUSTER_DIR; unmount them and run make cluster-down again"
fi
step "cluster down (built binaries stay cached in $DFC_CACHE_DIR/k8s-*)"
