#!/usr/bin/env bash
# `make helm-lint`: `helm lint --strict` of chart/ with its default values and with the sidecar registrar, plus
# a `helm template` of both. helm is built from its module at a pinned version into bin/tools when missing.
set -o errexit -o nounset -o pipefail
cd "$(dirname "$0")/.."

HELM_VERSION=v3.22.0
TOOLS=${TOOLS:-$PWD/bin/tools}
HELM=$TOOLS/helm
if [ "$("$HELM" version --template '{{.Version}}' 2>/dev/null)" != "$HELM_VERSION" ]; then
  echo "installing helm $HELM_VERSION into $TOOLS"
  GOBIN=$TOOLS CGO_ENABLED=0 go install -trimpath \
    -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
    "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
fi

# Placeholder image names: rendering must not depend on a registry being named in the repository.
sidecar=(--set registrar.mode=sidecar
  --set registrar.nodeDriverRegistrar.image.repository=example.invalid/csi-node-driver-registrar
  --set registrar.livenessProbe.image.repository=example.invalid/livenessprobe)

"$HELM" lint --strict chart/
"$HELM" lint --strict chart/ "${sidecar[@]}"
"$HELM" template dummy-fuse-csi chart/ >/dev/null
"$HELM" template dummy-fuse-csi chart/ "${sidecar[@]}" >/dev/null
echo "helm lint ok"
