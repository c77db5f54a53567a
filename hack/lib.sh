# shellcheck shell=bash
# The shared library of the scripts under hack/ and .ci/ (sourced, never run). Sourcing it only defines
# functions: no command runs, nothing is looked up.

# step MESSAGE...: a progress line with the seconds since the script started.
step() { printf '[%4ds] %s\n' "$SECONDS" "$*"; }

# die MESSAGE...: the error on stderr with the same prefix as step, then exit 1.
die() {
  printf '[%4ds] ERROR: %s\n' "$SECONDS" "$*" >&2
  exit 1
}

# need_root WHY: fails unless running as root.
need_root() { [ "$(id -u)" = 0 ] || die "must run as root ($1)"; }

# timed NAME COMMAND...: runs COMMAND and records NAME, its duration and its result for print_times.
# Returns COMMAND's exit code.
TIMED=()
timed() {
  local name=$1 t0=$SECONDS rc=0
  shift
  printf '\n=== %s: %s\n' "$name" "$*"
  "$@" || rc=$?
  TIMED+=("$(printf '%-28s %5ds  %s' "$name" $((SECONDS - t0)) "$([ "$rc" = 0 ] && echo ok || echo "FAILED (exit $rc)")")")
  return "$rc"
}

# print_times TITLE: every step recorded by timed, and the total since the script started.
print_times() {
  printf '\n=== %s: durations\n' "$1"
  printf '   %s\n' "${TIMED[@]}"
  printf '   %-28s %5ds (%dm%02ds)\n' total "$SECONDS" $((SECONDS / 60)) $((SECONDS % 60))
}

# ensure_packages WHAT:PACKAGE...: installs the Debian packages that provide what is missing. WHAT is a
# command name, or the absolute path of a file. Without root or apt-get it fails with the command to run.
ensure_packages() {
  local entry what pkg missing=()
  for entry in "$@"; do
    what=${entry%:*} pkg=${entry##*:}
    if [[ $what == /* ]]; then [ -e "$what" ] && continue; else command -v "$what" >/dev/null && continue; fi
    [[ " ${missing[*]} " == *" $pkg "* ]] || missing+=("$pkg")
  done
  [ "${#missing[@]}" -gt 0 ] || return 0
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    die "missing Debian packages: apt-get install ${missing[*]}"
  fi
  step "installing Debian packages: ${missing[*]}"
  apt_get update -qq
  apt_get install -y -qq --no-install-recommends "${missing[@]}"
}

# apt_get ARGS...: apt-get that waits up to APT_LOCK_TIMEOUT seconds (default 300) for another apt or dpkg
# to finish instead of failing on its lock. DPkg::Lock::Timeout covers the dpkg lock of install; update's
# lock on the package lists has no such option, so a refusal naming a lock is retried.
apt_get() {
  local timeout=${APT_LOCK_TIMEOUT:-300} start=$SECONDS out
  while :; do
    if out=$(DEBIAN_FRONTEND=noninteractive apt-get -o "DPkg::Lock::Timeout=$timeout" "$@" 2>&1); then
      return 0
    fi
    if [[ $out != *"Could not get lock"* ]] || ((SECONDS - start >= timeout)); then
      printf '%s\n' "$out" >&2
      die "apt-get $*: failed"
    fi
    step "waiting for another apt or dpkg to finish ($(grep -m1 -o 'Could not get lock [^ ]*' <<<"$out"))"
    sleep 5
  done
}

# gomod_version MODULE: the version of MODULE that the project's go.mod requires (one pin for the Go code and
# for the tools built from the same module, such as the helm CLI).
gomod_version() {
  local gomod v
  gomod=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/go.mod
  v=$(awk -v m="$1" '($1 == m || ($1 == "require" && $2 == m)) { print ($1 == m) ? $2 : $3; exit }' "$gomod")
  [ -n "$v" ] || die "$1 is not required by $gomod"
  echo "$v"
}

# install_helm DIR: builds the helm CLI at go.mod's helm version into DIR/helm unless it is already there.
install_helm() {
  local version
  version=$(gomod_version helm.sh/helm/v3)
  [ "$("$1/helm" version --template '{{.Version}}' 2>/dev/null)" != "$version" ] || return 0
  step "building helm $version into $1"
  GOBIN=$1 GOFLAGS='' CGO_ENABLED=0 go install -trimpath \
    -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$version" "helm.sh/helm/v3/cmd/helm@$version"
}
