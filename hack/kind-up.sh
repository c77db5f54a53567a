#!/usr/bin/env bash
# `make kind-up`: a kind cluster from manifests/kind-config.yaml with the dummy-fuse-csi image loaded and the
# chart installed, for users with a Docker engine. Without Docker use `make cluster-up` (a cluster built from
# source, running as host processes) instead.
#
# Environment (all optional):
#   KIND_CLUSTER_NAME   cluster name (default dummy-fuse-csi); an existing cluster of that name is reused
#   KIND_NODE_IMAGE     node image for `kind create cluster --image` (default: the kind release's own)
#   IMAGE_TAG           tag of the dummy-fuse-csi image to build and load (default: the chart's appVersion,
#                       the tag manifests/ use)
#   HELM_RELEASE        release name (default dummy-fuse-csi)
#   HELM_NAMESPACE      namespace of the plugin (default dummy-fuse-csi)
#   HELM_SET            extra chart values in --set form, e.g. csi.plugin.restoreStrategy=stack
#   KIND HELM KUBECTL DOCKER MAKE   the commands to run (default: found in $PATH; helm also in bin/tools)
set -o errexit -o nounset -o pipefail
cd "$(dirname "$0")/.."

CLUSTER=${KIND_CLUSTER_NAME:-dummy-fuse-csi}
RELEASE=${HELM_RELEASE:-dummy-fuse-csi}
NAMESPACE=${HELM_NAMESPACE:-dummy-fuse-csi}
IMAGE_OUTPUT=${IMAGE_OUTPUT:-$PWD/_output/images}
export IMAGE_OUTPUT
TIMEOUT=${KIND_UP_TIMEOUT:-180s}

# shellcheck source=hack/kind-lib.sh
source hack/kind-lib.sh
require_kind_tools kind-up helm kubectl make

APP_VERSION=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' chart/Chart.yaml)
[ -n "$APP_VERSION" ] || die "no appVersion in chart/Chart.yaml"
IMAGE_TAG=${IMAGE_TAG:-$APP_VERSION}

# 1. Cluster.
if "$KIND" get clusters 2>/dev/null | grep -qxF "$CLUSTER"; then
  echo "kind-up: reusing kind cluster $CLUSTER"
else
  echo "kind-up: creating kind cluster $CLUSTER"
  create=(create cluster --name "$CLUSTER" --config manifests/kind-config.yaml --wait "$TIMEOUT")
  if [ -n "${KIND_NODE_IMAGE:-}" ]; then
    create+=(--image "$KIND_NODE_IMAGE")
  fi
  "$KIND" "${create[@]}"
fi
CONTEXT=kind-$CLUSTER

# 2. Image: built without a container engine, tagged with IMAGE_TAG so that the chart and manifests/ find it.
echo "kind-up: building image dummy-fuse-csi:$IMAGE_TAG"
"$MAKE" image VERSION="$IMAGE_TAG"
ref_file=$IMAGE_OUTPUT/dummy-fuse-csi.ref
[ -f "$ref_file" ] || die "make image wrote no $ref_file"
ref=$(cat "$ref_file")
[ "$ref" = "dummy-fuse-csi:$IMAGE_TAG" ] ||
  die "make image built $ref, want dummy-fuse-csi:$IMAGE_TAG (IMAGE_TAG must be a valid tag: letters, digits, '_', '.', '-')"
archive=$IMAGE_OUTPUT/dummy-fuse-csi-$IMAGE_TAG.tar
[ -f "$archive" ] || die "make image wrote no $archive"
echo "kind-up: loading $archive into $CLUSTER"
"$KIND" load image-archive "$archive" --name "$CLUSTER"
# Its next build too: keeper-upgrade rolls the keeper to it (keeper.imageTag=$IMAGE_TAG-next).
next=$IMAGE_OUTPUT/dummy-fuse-csi-$IMAGE_TAG-next.tar
[ -f "$next" ] || die "make image wrote no $next"
"$KIND" load image-archive "$next" --name "$CLUSTER"

# 3. Chart. The plugin pod is privileged: label its namespace for Pod Security admission where enforced.
"$KUBECTL" --context "$CONTEXT" create namespace "$NAMESPACE" --dry-run=client -o yaml |
  "$KUBECTL" --context "$CONTEXT" apply -f -
"$KUBECTL" --context "$CONTEXT" label namespace "$NAMESPACE" --overwrite pod-security.kubernetes.io/enforce=privileged
install=(upgrade --install "$RELEASE" chart/ --kube-context "$CONTEXT" --namespace "$NAMESPACE"
  --set "image.tag=$IMAGE_TAG" --wait --timeout "$TIMEOUT")
if [ -n "${HELM_SET:-}" ]; then
  install+=(--set "$HELM_SET")
fi
echo "kind-up: installing the chart: $HELM ${install[*]}"
"$HELM" "${install[@]}"

# 4. Wait until every node runs the plugin and kubelet has registered the driver.
selector=app.kubernetes.io/instance=$RELEASE,app.kubernetes.io/component=node
ds=$("$KUBECTL" --context "$CONTEXT" -n "$NAMESPACE" get daemonset -l "$selector" -o name)
[ -n "$ds" ] || die "no plugin DaemonSet with labels $selector in namespace $NAMESPACE"
"$KUBECTL" --context "$CONTEXT" -n "$NAMESPACE" rollout status "$ds" --timeout "$TIMEOUT"
driver=$("$KUBECTL" --context "$CONTEXT" get csidriver -l "app.kubernetes.io/instance=$RELEASE" -o jsonpath='{.items[0].metadata.name}')
deadline=$((SECONDS + 60))
until "$KUBECTL" --context "$CONTEXT" get csinode -o jsonpath='{.items[*].spec.drivers[*].name}' | tr ' ' '\n' | grep -qxF "$driver"; do
  if [ "$SECONDS" -ge "$deadline" ]; then
    die "kubelet has not registered driver $driver after 60s; see: $KUBECTL --context $CONTEXT -n $NAMESPACE logs $ds -c plugin"
  fi
  sleep 2
done

cat <<EOF
kind-up: cluster $CLUSTER is ready: driver $driver registered, image dummy-fuse-csi:$IMAGE_TAG loaded.
Next:
  kubectl apply -f manifests/pv.yaml -f manifests/pvc.yaml -f manifests/pod.yaml
  kubectl logs -f dummy-fuse-pod
  make scenario-restart BACKEND=kube
  kubectl -n $NAMESPACE logs $ds -c plugin
Remove the cluster with: make kind-down
EOF
