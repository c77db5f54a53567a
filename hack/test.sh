#!/usr/bin/env bash
# `make test`: go vet, then every test with its progress shown by gotestsum (built into bin/tools at a pinned
# version). Tests that need root and /dev/fuse skip for an ordinary user; with DFC_REQUIRE_PRIVILEGED=1 (CI)
# such a skip is a failure. SHORT=1 (`make test-short`) runs the unit tests only (go test -short).
set -o errexit -o nounset -o pipefail
cd "$(dirname "$0")/.."
# shellcheck source=hack/lib.sh
source hack/lib.sh

GOTESTSUM_VERSION=v1.13.0
TOOLS=${TOOLS:-$PWD/bin/tools}
if ! "$TOOLS/gotestsum" --version 2>/dev/null | grep -q "${GOTESTSUM_VERSION#v}"; then
  step "building gotestsum $GOTESTSUM_VERSION into $TOOLS"
  GOBIN=$TOOLS go install "gotest.tools/gotestsum@$GOTESTSUM_VERSION"
fi

read -r -a flags <<<"${GOTESTFLAGS:-}" # extra go test flags, e.g. GOTESTFLAGS="-run TestX -v"
if [ "${SHORT:-}" = 1 ]; then
  # Go's test cache may answer for packages that did not change: the point is a fast loop.
  flags+=(-short)
  step "go test -short: unit tests only (no processes, mounts or namespaces)"
else
  flags+=(-count=1)
  step "go vet (the first run on a machine compiles the Kubernetes client libraries and the rest of the" \
    "dependencies: minutes; later runs reuse Go's build cache)"
  go vet ./...
  step "go test: every test (privileged ones mount FUSE filesystems and run the binaries)"
fi
# A test that still hangs despite its Lab's bounded cleanup (internal/testenv) ends at -timeout with a
# goroutine dump; gotestsum prints each test as it ends (a package such as scenarios/local runs for minutes:
# one line per package would leave the terminal silent that long) and the failures again at the end.
"$TOOLS/gotestsum" --format "${GOTESTSUM_FORMAT:-testname}" --format-hide-empty-pkg --hide-summary=skipped -- \
  -timeout "${GOTEST_TIMEOUT:-30m}" "${flags[@]}" ./...
