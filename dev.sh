#!/usr/bin/env bash
# The project's two commands. Each one installs what it needs into .venv first.
#   ./dev.sh demo   run the main job: `gangscale demo` (the TPU multislice scenario, simulated end to end)
#   ./dev.sh test   run the whole test suite: lint, type checks, layering contract, tests, and a short chaos
#                   campaign (CHAOS_RUNS runs, default 6, the simulated and the gke provider in turn; 0 skips it;
#                   skipped when pytest args are given)
set -euo pipefail
cd "$(dirname "$0")"

pick_python() {
  for py in "${PYTHON:-}" python3.11 python3 python; do
    [ -n "$py" ] || continue
    if command -v "$py" >/dev/null 2>&1 && "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
      echo "$py"; return 0
    fi
  done
  echo "gangscale needs Python >= 3.11 (set PYTHON=/path/to/python3.11)" >&2
  return 1
}

# Install (or refresh) .venv when it is missing or pyproject.toml or constraints.txt changed since the last
# install. Every package is pinned by constraints.txt (what CI tested); the project itself is installed editable.
ensure_venv() {
  local extra="$1" stamp=".venv/.installed-$1"
  local want; want="$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)"
  if [ ! -x .venv/bin/python ]; then
    "$(pick_python)" -m venv .venv
  fi
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    .venv/bin/python -m pip install --quiet --upgrade pip
    local target="."
    [ "$extra" = "dev" ] && target=".[dev]"
    .venv/bin/python -m pip install --quiet -c constraints.txt -e "$target"
    echo "$want" > "$stamp"
  fi
}

# A Ray head for the GCS tests (tests/ray): Ray pins its own dependencies, so it lives in a venv of its own.
ensure_ray_venv() {
  if [ ! -x .venv-ray/bin/ray ]; then
    "$(pick_python)" -m venv .venv-ray
    .venv-ray/bin/python -m pip install --quiet "ray==2.60.0"
  fi
}

cmd="${1:-}"
shift || true
case "$cmd" in
  demo)
    ensure_venv runtime
    exec .venv/bin/gangscale demo "$@"
    ;;
  test)
    ensure_venv dev
    ensure_ray_venv
    export PATH="$PWD/.venv/bin:$PATH"
    echo "== ruff";          ruff check gangscale tests hack
    echo "== mypy";          mypy
    echo "== import-linter"; lint-imports
    echo "== helm";          python hack/get_helm.py   # the chart tests render with a real helm (.tools/helm)
    # Two workers per core: the suite mostly waits on sockets and subprocesses, so the workers overlap well;
    # worksteal hands the long end-to-end files to idle workers instead of leaving one worker with them.
    echo "== pytest";        pytest -q -n "${PYTEST_WORKERS:-$(( $(nproc) * 2 ))}" --dist worksteal "$@"
    if [ $# -eq 0 ] && [ "${CHAOS_RUNS:-6}" -gt 0 ]; then
      # A short fault campaign on every change; its seeds follow the commit, so a failure re-runs with
      # `python hack/chaos.py --provider both --runs N --seed S` (the seed is printed). `both` alternates the
      # providers: odd seeds run the gke provider against the fake GKE and Compute Engine, even ones the simulated.
      seed=$(( 0x$(git rev-parse --short=7 HEAD 2>/dev/null || echo 1) % 1000000 ))
      echo "== chaos (seed $seed, ${CHAOS_RUNS:-6} runs, ${CHAOS_JOBS:-3} at a time, simulated and gke in turn)"
      python hack/chaos.py --provider both --runs "${CHAOS_RUNS:-6}" --seed "$seed" --jobs "${CHAOS_JOBS:-3}"
    fi
    ;;
  *)
    echo "usage: ./dev.sh demo | ./dev.sh test [pytest args]" >&2
    exit 2
    ;;
esac
