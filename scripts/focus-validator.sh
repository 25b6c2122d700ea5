#!/usr/bin/env bash
# Validate a FinOps FOCUS 1.2 CSV with the FinOps Foundation's focus-validator; write JUnit XML.
#
#   scripts/focus-validator.sh FILE.csv RESULT.xml [extra focus-validator options...]
#
# Exit status: 0 every rule that ran passed; 2 a rule failed or errored (see RESULT.xml);
# 1 usage, setup or validator crash. (focus-validator's own exit status does not report rule
# failures, so this script reads the JUnit output it wrote.)
#
# The validator lives in its own virtualenv, .venv-focus (FOCUS_VENV overrides), created on
# first use and reused while its stamp matches the pinned versions. Its known quirks:
#   - it needs Python >= 3.12 (FOCUS_PYTHON, else python3.12 / python3.13 on PATH, else a
#     pyenv-installed 3.12 / 3.13; 3.12 first: numpy < 2 has wheels for it, not for 3.13);
#   - numpy < 2 together with pyarrow < 19;
#   - it opens focus_validator/rules/currency_codes.csv by a relative path, so it runs with
#     its site-packages directory as the working directory;
#   - --block-download keeps it offline: it validates against the rule model it ships.
#
# Applicability criteria (what the provider supports; rules of unsupported features are
# skipped) default to what gpu-finops' FOCUS export claims (docs/focus.md);
# FOCUS_APPLICABILITY_CRITERIA overrides them ("ALL" enables every criterion).
set -euo pipefail

VALIDATOR_VERSION=2.2.1
REQUIREMENTS=("focus-validator==${VALIDATOR_VERSION}" "numpy<2" "pyarrow<19")
DEFAULT_CRITERIA="ACCOUNT_NAMING_SUPPORTED,SUB_ACCOUNT_SUPPORTED,USAGE_MEASUREMENT_SUPPORTED"
DEFAULT_CRITERIA+=",UNIT_PRICING_SUPPORTED,PUBLIC_PRICE_LIST_SUPPORTED,NEGOTIATED_PRICING_SUPPORTED"
DEFAULT_CRITERIA+=",BILLING_BASED_ON_PROVISIONED_RESOURCES_SUPPORTED"
DEFAULT_CRITERIA+=",RESOURCE_TYPE_ASSIGNMENT_SUPPORTED,TAGGING_SUPPORTED"

die() { echo "focus-validator.sh: $*" >&2; exit 1; }

if [[ $# -lt 2 ]]; then
    echo "usage: $0 FILE.csv RESULT.xml [extra focus-validator options...]" >&2
    exit 1
fi
CSV=$1
JUNIT=$2
shift 2
[[ -f $CSV ]] || die "no such file: $CSV"
CSV=$(cd "$(dirname "$CSV")" && pwd)/$(basename "$CSV")
mkdir -p "$(dirname "$JUNIT")"
JUNIT=$(cd "$(dirname "$JUNIT")" && pwd)/$(basename "$JUNIT")

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${FOCUS_VENV:-$ROOT/.venv-focus}
STAMP=$VENV/.focus-validator-stamp
WANT_STAMP="${REQUIREMENTS[*]}"

# A Python >= 3.12 that really runs (a pyenv shim exists even when its version is not active).
find_python() {
    local c
    local -a candidates=()
    [[ -n ${FOCUS_PYTHON:-} ]] && candidates+=("$FOCUS_PYTHON")
    for c in python3.12 python3.13; do
        command -v "$c" >/dev/null 2>&1 && candidates+=("$(command -v "$c")")
    done
    local pyenv_root=${PYENV_ROOT:-$HOME/.pyenv}
    for c in "$pyenv_root"/versions/3.12*/bin/python3.12 "$pyenv_root"/versions/3.13*/bin/python3.13; do
        [[ -x $c ]] && candidates+=("$c")
    done
    for c in "${candidates[@]}"; do
        if "$c" -c 'import sys, venv; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1; then
            echo "$c"
            return 0
        fi
    done
    return 1
}

setup() {
    if [[ -x $VENV/bin/focus-validator && -f $STAMP && $(<"$STAMP") == "$WANT_STAMP" ]]; then
        return 0
    fi
    local python
    if ! python=$(find_python); then
        die "focus-validator ${VALIDATOR_VERSION} needs Python >= 3.12 with the venv module," \
            "and none was found: no working python3.13 or python3.12 on PATH, none under" \
            "${PYENV_ROOT:-$HOME/.pyenv}/versions/3.1[23]*, FOCUS_PYTHON unset or not >= 3.12." \
            "Install one (e.g. pyenv install 3.12) or set FOCUS_PYTHON=/path/to/python3.12."
    fi
    echo "focus-validator.sh: creating $VENV with $python ($("$python" -V 2>&1))" >&2
    rm -rf "$VENV"
    "$python" -m venv "$VENV" || die "cannot create a virtualenv at $VENV with $python"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${REQUIREMENTS[@]}" \
        || die "pip could not install ${REQUIREMENTS[*]} into $VENV"
    cat >"$VENV/focus-logging.yaml" <<'YAML'
version: 1
disable_existing_loggers: false
formatters:
  plain:
    format: "focus-validator %(levelname)s %(name)s: %(message)s"
handlers:
  stderr:
    class: logging.StreamHandler
    stream: ext://sys.stderr
    formatter: plain
    level: WARNING
root:
  level: WARNING
  handlers: [stderr]
YAML
    printf '%s' "$WANT_STAMP" >"$STAMP"
}

# One setup at a time (two test runs may start together); the lock lives outside the tree.
mkdir -p "$(dirname "$VENV")"
if command -v flock >/dev/null 2>&1; then
    LOCK=${TMPDIR:-/tmp}/focus-validator-$(printf '%s' "$VENV" | cksum | cut -d' ' -f1).lock
    exec 9>"$LOCK"
    flock 9
fi
setup
if command -v flock >/dev/null 2>&1; then
    flock -u 9
fi

SITE=$("$VENV/bin/python" -c \
    'import focus_validator, os; print(os.path.dirname(os.path.dirname(focus_validator.__file__)))')
[[ -f $SITE/focus_validator/rules/currency_codes.csv ]] \
    || die "focus_validator/rules/currency_codes.csv is missing under $SITE"

rm -f "$JUNIT"
status=0
(
    cd "$SITE"
    LOGGING_CONFIG=$VENV/focus-logging.yaml "$VENV/bin/focus-validator" \
        --data-file "$CSV" \
        --validate-version 1.2 \
        --block-download \
        --applicability-criteria "${FOCUS_APPLICABILITY_CRITERIA:-$DEFAULT_CRITERIA}" \
        --output-type unittest \
        --output-destination "$JUNIT" \
        "$@"
) || status=$?
[[ $status -eq 0 ]] || die "focus-validator exited with status $status"
[[ -s $JUNIT ]] || die "focus-validator wrote no JUnit output to $JUNIT"

# Summary, and the verdict. One correction to the raw counts: focus-validator reports each
# branch of an OR composite as a test of its own, so a rule like InvoiceId-C-003-C ("null when
# there is no invoice" OR "not null when there is one") always shows one failing branch. A failed
# branch whose OR composite passed is listed, but is not a failure.
"$VENV/bin/python" - "$JUNIT" "$SITE/focus_validator/rules" <<'PY'
import glob
import json
import os
import sys
import xml.etree.ElementTree as ET

junit, rules_dir = sys.argv[1], sys.argv[2]
models = sorted(glob.glob(os.path.join(rules_dir, "model-1.2*.json")))
or_parent = {}
if models:
    with open(models[-1], encoding="utf-8") as f:
        model_rules = json.load(f)["ModelRules"]
    for rule_id, rule in model_rules.items():
        req = rule.get("ValidationCriteria", {}).get("Requirement") or {}
        if req.get("CheckFunction") == "OR":
            for item in req.get("Items", []):
                if item.get("CheckFunction") == "CheckModelRule":
                    or_parent[item["ModelRuleId"]] = rule_id

root = ET.parse(junit).getroot()
status = {}
message = {}
for case in root.iter("testcase"):
    rule_id = case.get("name", "").split(" :: ")[0]
    for kind in ("failure", "error", "skipped"):
        node = case.find(kind)
        if node is not None:
            status[rule_id], message[rule_id] = kind, node.get("message", "")
            break
    else:
        status[rule_id] = "passed"
bad, branches = [], []
for rule_id, st in sorted(status.items()):
    if st not in ("failure", "error"):
        continue
    parent = or_parent.get(rule_id)
    if st == "failure" and parent is not None and status.get(parent) == "passed":
        branches.append(f"  {rule_id}: one branch of {parent}, which passed")
    else:
        bad.append(f"  {rule_id} ({st}): {message[rule_id]}")
counts = {k: sum(v == k for v in status.values()) for k in ("passed", "failure", "error", "skipped")}
print(
    f"focus-validator: {len(status)} rules: {counts['passed']} passed, {counts['failure']} failed, "
    f"{counts['error']} errored, {counts['skipped']} skipped; "
    f"{len(branches)} failed OR branch(es) of passing rules not counted"
)
if branches or bad:
    print("\n".join(branches + bad))
sys.exit(2 if bad else 0)
PY
