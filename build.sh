#!/usr/bin/env bash
# The course's one entry point. ./build.sh {setup|lab|course|test|clean} — see README.md.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="$ROOT/.venv"
PY="$VENV/bin/python"
KERNEL="ray-train-course"
STAMP="$VENV/.setup-stamp"
BUILD="$ROOT/build"
export COURSE_PROFILE="${COURSE_PROFILE:-auto}"

die() { echo "build.sh: $*" >&2; exit 1; }

find_python() {
  for candidate in "${PYTHON:-}" python3.11 python3; do
    [ -n "$candidate" ] || continue
    command -v "$candidate" >/dev/null 2>&1 || continue
    if "$candidate" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)' 2>/dev/null; then
      echo "$candidate"; return 0
    fi
  done
  return 1
}

setup_hash() {
  cat "$ROOT/requirements.txt" "$ROOT/pyproject.toml" | sha256sum | cut -d' ' -f1
}

setup() {
  if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$(setup_hash)" ] && [ -x "$PY" ]; then
    lab_settings
    echo "setup: up to date ($VENV)"; return 0
  fi
  local base
  base="$(find_python)" || die "needs Python 3.11 (found: $(python3 --version 2>&1 || echo none)). Install it, or set PYTHON=/path/to/python3.11."
  echo "setup: creating $VENV with $("$base" --version)"
  [ -x "$PY" ] || "$base" -m venv "$VENV" || die "could not create a venv; on Debian/Ubuntu: apt-get install python3.11-venv"
  "$PY" -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
  echo "setup: installing requirements.txt (torch is large: a few minutes the first time)"
  "$PY" -m pip install --quiet -r "$ROOT/requirements.txt" \
    || die "pip could not install requirements.txt (see the error above). Check your connection to the package index, then re-run ./build.sh setup."
  "$PY" -m pip install --quiet --no-deps -e "$ROOT" || die "pip could not install course_utils (pip install -e .)."
  "$PY" -m ipykernel install --sys-prefix --name "$KERNEL" --display-name "Python (Ray Train course)" >/dev/null \
    || die "could not register the Jupyter kernel $KERNEL."
  lab_settings
  setup_hash > "$STAMP"
  echo "setup: done (kernel '$KERNEL' registered)"
}

lab_settings() {
  # JupyterLab defaults for a workshop on a machine that may be offline: no "get Jupyter news?"
  # prompt, no news feed, no update check (each would ask a website). overrides.json in the venv's
  # app settings folder sets the defaults; a learner can still change them in Settings.
  local dir="$VENV/share/jupyter/lab/settings"
  mkdir -p "$dir"
  cat > "$dir/overrides.json" <<'JSON'
{
  "@jupyterlab/apputils-extension:notification": {
    "fetchNews": "false",
    "checkForUpdates": false
  }
}
JSON
}

lab() {
  setup
  local extra=() arg dir="$ROOT/notebooks"
  if [ "$(id -u)" -eq 0 ]; then
    echo "lab: running as root (a container or a cloud VM?), so JupyterLab gets --allow-root"
    extra+=(--allow-root)
  fi
  # notebooks/ unless the caller names another folder (the browser test runs copies elsewhere).
  for arg in "$@"; do
    case "$arg" in --notebook-dir*|--ServerApp.root_dir*) dir="" ;; esac
  done
  [ -z "$dir" ] || extra+=(--notebook-dir="$dir")
  # The server never fetches news, checks for updates or searches PyPI for extensions (a workshop
  # machine may be offline); the course kernel is the default, and every lesson names it.
  exec "$VENV/bin/jupyter" lab --ServerApp.ip=127.0.0.1 \
    --MappingKernelManager.default_kernel_name="$KERNEL" \
    --LabApp.news_url=None --LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate \
    --LabApp.extension_manager=readonly \
    "${extra[@]}" "$@"
}

course() {
  setup
  exec "$PY" -m course_utils.run_course "$@"
}

test_all() {
  setup
  # Unit + integration (each integration module starts and stops its own local Ray), the
  # workshop path (a `ray start` cluster + S3 storage, every lesson), then every lesson in the
  # smoke profile through nbmake's runner, as shipped and then with its exercises answered in the
  # same kernel (conftest.py). A failing cell fails the run; the end lists each learner path.
  # --timeout is per test item: a lesson with its answered exercises gets 1,500 s.
  cd "$ROOT"
  COURSE_PROFILE="${COURSE_TEST_PROFILE:-smoke}" "$PY" -m pytest tests notebooks \
    --nbmake-timeout=600 --timeout=1500 --durations=20 -p no:cacheprovider "$@"
}

clean() {
  # Only what the course generated inside this repo: executed notebooks and the default run
  # storage. Downloaded data stays (it is a cache); storage elsewhere is never touched here.
  local target
  for target in "$BUILD" "$ROOT/storage"; do
    if [ -e "$target" ]; then rm -rf -- "$target"; echo "clean: removed $target"; fi
  done
  if [ -n "${COURSE_STORAGE:-}" ] && [ "$COURSE_STORAGE" != "$ROOT/storage" ]; then
    echo "clean: COURSE_STORAGE=$COURSE_STORAGE is yours and was left alone (lesson 06 removes the course's runs there)"
  fi
}

cmd="${1:-}"; [ $# -gt 0 ] && shift
case "$cmd" in
  setup) setup ;;
  lab) lab "$@" ;;
  course) course "$@" ;;
  test) test_all "$@" ;;
  clean) clean ;;
  *) echo "usage: ./build.sh {setup|lab|course|test|clean}"; echo "  see README.md"; exit 2 ;;
esac
