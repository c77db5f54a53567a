# shellcheck shell=bash
# Sourced by hack/kind-up.sh and hack/kind-down.sh: finds the commands they need and says clearly what is
# missing, before anything is created.
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# require_kind_tools NAME TOOL...: sets KIND, DOCKER and the variable of each TOOL (helm → HELM, kubectl →
# KUBECTL, make → MAKE), honouring values already set; checks that each is runnable and that a Docker engine
# answers. NAME prefixes the messages.
require_kind_tools() {
  local name=$1
  shift
  local missing=()

  KIND=${KIND:-kind}
  command -v "$KIND" >/dev/null 2>&1 ||
    missing+=("kind ($KIND): install it from the kind releases, or: go install sigs.k8s.io/kind@v0.33.0")
  DOCKER=${DOCKER:-docker}
  command -v "$DOCKER" >/dev/null 2>&1 ||
    missing+=("docker ($DOCKER): kind runs its nodes as Docker containers")

  local tool
  for tool in "$@"; do
    case $tool in
    helm)
      HELM=${HELM:-helm}
      command -v "$HELM" >/dev/null 2>&1 ||
        missing+=("helm ($HELM): install Helm v3, or: go install helm.sh/helm/v3/cmd/helm@$(gomod_version helm.sh/helm/v3)")
      ;;
    kubectl)
      KUBECTL=${KUBECTL:-kubectl}
      command -v "$KUBECTL" >/dev/null 2>&1 || missing+=("kubectl ($KUBECTL): install kubectl")
      ;;
    make)
      MAKE=${MAKE:-make}
      command -v "$MAKE" >/dev/null 2>&1 || missing+=("make ($MAKE): install GNU make")
      ;;
    esac
  done

  if [ "${#missing[@]}" -gt 0 ]; then
    echo "$name: missing commands:" >&2
    printf '  %s\n' "${missing[@]}" >&2
    echo "$name: without Docker, \`make cluster-up\` builds and runs a single-node cluster from source instead." >&2
    exit 1
  fi
  if ! "$DOCKER" info >/dev/null 2>&1; then
    echo "$name: no Docker engine answers (\`$DOCKER info\` failed): kind runs its nodes as Docker containers." >&2
    echo "$name: start dockerd, or use \`make cluster-up\` (a from-source cluster, no Docker needed)." >&2
    exit 1
  fi
}
