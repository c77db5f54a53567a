#!/usr/bin/env bash
# `make kube-writes K8S_VERSION=…`: a recorded pass of the rows that write (dfc-scenario --list --writes) on the
# real kubelet of one Kubernetes release built from source on this machine, with gcsfuse (the chart's, reading a
# fake GCS on the node: gcsfuse.endpoint) and with s3fs (Debian's, from an image as an operator has one: make
# server-image SERVER=s3fs, described by docs/servers/s3fs.yaml, against rclone's fake S3 on the node).
#
# CI leaves these rows out (its cluster pass runs the read rows, and its hour has no room for the rows that write per
# server): their records, in scenarios/results, are checked by the generated docs and their tests like CI's.
# Steps: make cluster-build, make cluster-up, for each server the rows through dfc-scenario --backend=kube,
# recorded (scenariodoc record), then the generated docs; make cluster-down, also after a failure or an
# interrupt, and the fake S3 stopped by its PID. Prints each step's duration and the total. Needs root.
#
# Both storages run on the node, outside every pod (as a real bucket is outside the cluster's nodes): a fake GCS in
# the pod that runs gcsfuse would die with it when a row deletes that pod (relay-keeper-write-keeper-crash and
# -all-holders delete the keeper's), taking what was uploaded along. Each row runs with a storage that holds no
# writer object (the checks of the writes refuse a writer that appended to an earlier run's file): each fake is
# started afresh, the fake S3 over its bucket cleared.
#
# Environment: DFC_KUBE_ARTIFACTS (parent of one directory of run dirs per server; default
# _output/kube-writes/<time>); SERVERS (the passes to run, default "gcsfuse s3fs"); S3_PORT and GCS_PORT (the fake S3's and fake GCS's ports on the node, default
# 18336 and 18337).
set -o errexit -o nounset -o pipefail
cd "$(dirname "$0")/.."
# shellcheck source=hack/cluster/lib.sh
source hack/cluster/lib.sh

RELEASE=${1:?usage: hack/kube-writes.sh RELEASE (e.g. v1.37.2)}
BIN=${BIN:-$PWD/bin}
MAKE=${MAKE:-make}
S3_PORT=${S3_PORT:-18336}
GCS_PORT=${GCS_PORT:-18337}
SERVERS=${SERVERS:-gcsfuse s3fs}
need_root "the cluster runs kubelet and containerd on this machine"
command -v s3fs >/dev/null || die "s3fs not found: apt-get install -y s3fs (its image is made from this machine's)"
ARTIFACTS=${DFC_KUBE_ARTIFACTS:-$PWD/_output/kube-writes/$(date +%Y%m%d-%H%M%S)}
export DFC_REQUIRE_PRIVILEGED=1 KUBECONFIG=$KUBECONFIG_PATH
# The clusters of make ci-kube and make kube-release, so that a release's passes run on one kind of cluster.
export FEATURE_GATES=${FEATURE_GATES:-CSIVolumeHealth=true} VOLUME_STATS_AGG_PERIOD=${VOLUME_STATS_AGG_PERIOD:-2s}
COMMIT=$(git describe --always --dirty --abbrev=7 2>/dev/null || echo unknown)
COMMAND="make kube-writes K8S_VERSION=$RELEASE"

mkdir -p "$BIN" "$ARTIFACTS"
CGO_ENABLED=0 go build -trimpath -o "$BIN/dfc-scenario" ./scenarios/cmd/dfc-scenario
mapfile -t ROWS < <("$BIN/dfc-scenario" --list --writes --backend=kube)
[ "${#ROWS[@]}" -gt 0 ] || die "the catalog names no row that writes"

# The fake S3 for s3fs: rclone's serve s3 over a directory whose subdirectory dfc is the bucket, anonymous (no
# credentials file has to reach a pod), on the node's address that pods of the from-source cluster reach.
S3_DIR=$ARTIFACTS/s3
S3_LOG=$ARTIFACTS/rclone-serve-s3.log
GCS_DATA=$ARTIFACTS/gcs
GCS_LOG=$ARTIFACTS/fake-gcs-server.log
s3_pid=
gcs_pid=
up=
# shellcheck disable=SC2317 # run by the EXIT trap
finish() {
  local rc=$?
  trap - EXIT INT TERM
  stop_pid "$s3_pid"
  stop_pid "$gcs_pid"
  if [ -n "$up" ]; then
    timed "cluster-down $RELEASE" "$MAKE" cluster-down || rc=1
  fi
  print_times "$COMMAND"
  exit "$rc"
}
trap finish EXIT
trap 'exit 130' INT TERM

# shellcheck disable=SC2317 # run by the EXIT trap or through rows
# stop_pid PID: stops a process this script started, by its PID.
stop_pid() {
  [ -n "$1" ] || return 0
  kill "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}

# shellcheck disable=SC2317 # run through rows
# await_http URL WHAT LOG: waits up to 30 s for URL to answer.
await_http() {
  for ((i = 0; ; i++)); do
    curl -fsS -o /dev/null "$1" 2>/dev/null && return 0
    [ "$i" -lt 60 ] || die "$2 did not serve $1 within 30 s (see $3)"
    sleep 0.5
  done
}

# shellcheck disable=SC2317 # run by the EXIT trap or through rows
# fresh_gcs: a fake GCS with nothing but the bucket and its dummy-file.txt (from memory: a restart empties it),
# on the node's address, where its upload URLs point too.
fresh_gcs() {
  stop_pid "$gcs_pid"
  bin/servers/fake-gcs-server -backend=memory -scheme=http -host=0.0.0.0 -port="$GCS_PORT" -public-host="$NODE_IP:$GCS_PORT" \
    -data="$GCS_DATA" -log-level=warn >>"$GCS_LOG" 2>&1 &
  gcs_pid=$!
  await_http "http://127.0.0.1:$GCS_PORT/storage/v1/b/dummy-fuse-csi/o" "the fake GCS" "$GCS_LOG"
}

# shellcheck disable=SC2317 # run by the EXIT trap or through rows
# fresh_s3: the fake S3 started again over its bucket without what a writer left (rclone's serve s3 caches the
# directory's listing: a file removed behind its back would still be listed, and s3fs's writes to it fail).
fresh_s3() {
  stop_pid "$s3_pid"
  find "$S3_DIR/dfc" -mindepth 1 ! -name dummy-file.txt -delete
  RCLONE_CONFIG=/dev/null bin/servers/rclone serve s3 "$S3_DIR" --addr="0.0.0.0:$S3_PORT" >>"$S3_LOG" 2>&1 &
  s3_pid=$!
  await_http "http://127.0.0.1:$S3_PORT/dfc/dummy-file.txt" "the fake S3" "$S3_LOG"
}

# shellcheck disable=SC2317 # run through timed
# rows SERVER FRESH ARGS...: each row that writes on its own, after FRESH empties the storage, with dfc-scenario's ARGS.
rows() {
  local server=$1 fresh=$2 rc=0
  shift 2
  for row in "${ROWS[@]}"; do
    "$fresh"
    "$BIN/dfc-scenario" --backend=kube --out="$ARTIFACTS/$server" "$@" "$row" || rc=1
  done
  return "$rc"
}

# shellcheck disable=SC2317 # run through timed
# record SERVER: the runs of that pass into scenarios/results, then the docs generated from the records.
record() {
  go run ./scenarios/cmd/scenariodoc record -commit "$COMMIT" -command "$COMMAND" "$ARTIFACTS/$1" &&
    go run ./scenarios/cmd/scenariodoc && go run ./scenarios/cmd/matrix
}

timed "make servers (rclone for the fake S3)" "$MAKE" servers WITH_RCLONE=1
timed "cluster-down (whatever an earlier run left)" "$MAKE" cluster-down || exit 1
timed "cluster-build $RELEASE" "$MAKE" cluster-build K8S_VERSION="$RELEASE"
up=1
timed "cluster-up $RELEASE" "$MAKE" cluster-up K8S_VERSION="$RELEASE"
timed "server-image s3fs" "$MAKE" server-image SERVER=s3fs
S3_IMAGE=$(cat "${IMAGE_OUTPUT:-$PWD/_output/images}/servers/s3fs.ref")
# Pods reach the node at the bridge's address, the first of the pod network (hack/cluster/up.sh).
POD_NET=${POD_CIDR%/*}
NODE_IP=${POD_NET%.*}.1

mkdir -p "$S3_DIR/dfc" "$GCS_DATA/dummy-fuse-csi"
printf 'Hello world!\n' >"$S3_DIR/dfc/dummy-file.txt"
printf 'Hello world!\n' >"$GCS_DATA/dummy-fuse-csi/dummy-file.txt"
failed=0
if [[ " $SERVERS " == *" gcsfuse "* ]]; then
  timed "gcsfuse: ${ROWS[*]}" rows gcsfuse fresh_gcs --fuse-server=gcsfuse --kube-set gcsfuse.endpoint="http://$NODE_IP:$GCS_PORT/storage/v1/" || failed=1
  timed "record gcsfuse" record gcsfuse || failed=1
fi
# s3fs runs as the keeper's user in relay-keeper (keeper.runAsUser, the chart's default) and checks each request's
# user against the owner it finds, which the fake S3 does not keep: uid makes that user the owner of every file.
if [[ " $SERVERS " == *" s3fs "* ]]; then
  timed "s3fs: ${ROWS[*]}" rows s3fs fresh_s3 --fuse-server=docs/servers/s3fs.yaml \
    --fuse-server-opt="url=http://$NODE_IP:$S3_PORT" --fuse-server-opt=public-bucket=1 --fuse-server-opt=access=rw \
    --fuse-server-opt=uid=61731 \
    --kube-set fuseServer.image="$S3_IMAGE" --kube-set 'fuseServer.files[0]=/usr/bin/s3fs' --kube-set 'fuseServer.files[1]=/usr/lib/s3fs-libs' \
    --kube-set fuseServer.interpreter=/lib64/ld-linux-x86-64.so.2 || failed=1
  timed "record s3fs" record s3fs || failed=1
fi
exit "$failed"
