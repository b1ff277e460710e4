#!/usr/bin/env bash
# The course's one entry point. ./build.sh {setup|lab|course|test|clean|docs|benchmarks|lock|export|canary}:
# README.md says what a learner runs, CONTRIBUTING.md the rest.
set -euo pipefail

# Linux and macOS only: on Windows (Git Bash, MSYS2, Cygwin) or anything else, stop in one line before
# anything runs, with the ways that work there.
PLATFORM="$(uname -s 2>/dev/null || echo 'this system')"
case "$PLATFORM" in
  Linux | Darwin) ;;
  *) echo "build.sh: $PLATFORM is not supported (Linux and macOS are): take the course in WSL2, Google Colab or GitHub Codespaces; README.md says how." >&2
     exit 1 ;;
esac

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# COURSE_VENV puts the venv elsewhere (a second one on another Python, e.g. /tmp/venv312).
VENV="${COURSE_VENV:-$ROOT/.venv}"
case "$VENV" in /*) ;; *) VENV="$PWD/$VENV" ;; esac
PY="$VENV/bin/python"
KERNEL="ray-train-course"
LOCK="$ROOT/requirements.lock"
# What a learner needs (the lessons, lab, course) and what only maintainers need (tests, the site,
# linting); requirements.lock pins both.
REQUIREMENTS="$ROOT/requirements.txt"
DEV_REQUIREMENTS="$ROOT/requirements-dev.txt"
STAMP="$VENV/.setup-stamp"
DEV_STAMP="$VENV/.setup-dev-stamp"
BUILD="$ROOT/build"
export COURSE_PROFILE="${COURSE_PROFILE:-auto}"

die() { echo "build.sh: $*" >&2; exit 1; }

PYTHONS="3.11, 3.12 or 3.13"

python_minor() {
  # "3.11" for a Python the course accepts (3.11-3.13), nothing (and exit 1) for any other.
  "$1" -c 'import sys; v = sys.version_info[:2]; assert (3, 11) <= v <= (3, 13); print("%d.%d" % v)' 2>/dev/null
}

find_python() {
  # $PYTHON when set (taken or refused, never replaced). Else, the way a learner has it: python3.11,
  # python3.12, python3.13, python3 on PATH, then pyenv's installed versions; 3.11 preferred when
  # several are there (it is the Python requirements.lock was made with), then 3.12, then 3.13.
  if [ -n "${PYTHON:-}" ]; then
    python_minor "$PYTHON" >/dev/null && { echo "$PYTHON"; return 0; }
    return 1
  fi
  local candidates=(python3.11 python3.12 python3.13 python3) candidate minor want root
  if command -v pyenv >/dev/null 2>&1 && root="$(pyenv root 2>/dev/null)"; then
    while IFS= read -r candidate; do candidates+=("$candidate"); done \
      < <(compgen -G "$root/versions/3.1[123]*/bin/python3" | sort -rV)
  fi
  local found=()  # "minor path" of every candidate that runs and is accepted
  for candidate in "${candidates[@]}"; do
    command -v "$candidate" >/dev/null 2>&1 || continue
    minor="$(python_minor "$candidate")" || continue  # a pyenv shim of a version not selected fails here
    found+=("$minor $candidate")
  done
  for want in 3.11 3.12 3.13; do
    for candidate in "${found[@]}"; do
      [ "${candidate%% *}" = "$want" ] && { echo "${candidate#* }"; return 0; }
    done
  done
  return 1
}

no_python() {
  if [ -n "${PYTHON:-}" ]; then
    die "PYTHON=$PYTHON is not Python $PYTHONS ($("$PYTHON" --version 2>/dev/null || echo 'it does not run')). Point PYTHON at one of those, e.g. PYTHON=/path/to/python3.11."
  fi
  die "needs Python $PYTHONS (python3 here: $(python3 --version 2>/dev/null || echo none)). Install one (3.11 preferred), or set PYTHON=/path/to/python3.11."
}

setup_hash() {
  # What a learner's venv is made from: requirements-dev.txt is not in it (a dev pin bumped alone
  # changes requirements.lock too, and that redoes setup, which then has nothing to install).
  cat "$REQUIREMENTS" "$LOCK" "$ROOT/pyproject.toml" "$ROOT/maintainer_tools/pyproject.toml" 2>/dev/null \
    | sha256sum | cut -d' ' -f1
}

dev_hash() {
  cat "$REQUIREMENTS" "$DEV_REQUIREMENTS" "$LOCK" 2>/dev/null | sha256sum | cut -d' ' -f1
}

lock_field() {
  # A "# name: value" header line of requirements.lock (python, platform).
  sed -n "s/^# $1: //p" "$LOCK" | head -n 1
}

docs() {
  # The documentation site (maintainer_tools/docsite.py, mkdocs.yml): README, docs/ and the executed lessons
  # (./build.sh course's, else the last ./build.sh test's) into build/site; open build/site/index.html.
  setup_dev
  cd "$ROOT"
  NO_MKDOCS_2_WARNING=1 "$PY" -m maintainer_tools.docsite "$@"
}

benchmarks() {
  # docs/benchmarks.md from maintainer_tools/bench/pinned.json (`--check`: exit 1 when it is out of date).
  # `python -m maintainer_tools.bench record <bench>` re-measures one bench and stores its figures there.
  [ -x "$PY" ] || die "no venv at $VENV: run ./build.sh setup first"
  "$PY" -m maintainer_tools.bench docs "$@"
}

stale_lock() {
  # The direct pins requirements.lock disagrees with (a bump, e.g. by Dependabot, without ./build.sh lock),
  # of requirements.txt and requirements-dev.txt both: one lock covers the two.
  "$PY" - "$LOCK" "$REQUIREMENTS" "$DEV_REQUIREMENTS" <<'PY'
import os, re, sys
def pins(path):
    found = {}
    for line in open(path) if os.path.exists(path) else []:
        m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*==\s*([^\s;#]+)", line)
        if m:
            found[re.sub(r"[-_.]+", "-", m[1]).lower()] = m[3]
    return found
locked, wanted = pins(sys.argv[1]), {}
for path in sys.argv[2:]:
    wanted.update(pins(path))
print(", ".join(f"{n}=={v}, lock: {locked.get(n, 'none')}" for n, v in wanted.items() if locked.get(n) != v))
PY
}

install_requirements() {
  # The requirements files given (their direct pins) constrained by requirements.lock (every other
  # package, pinned). The lock was made on one Python and platform (its header says which). Elsewhere a
  # pin may have no wheel: then pip fails, and setup says so in one line and installs the files' pins
  # alone. Constraints for packages nothing requests (nvidia-* on macOS, the dev tools' dependencies in a
  # learner's setup) are ignored by pip.
  local files=() file names=""
  for file in "$@"; do files+=(-r "$file"); names+="${names:+ and }${file##*/}"; done
  if [ ! -f "$LOCK" ]; then
    "$PY" -m pip install --quiet "${files[@]}"; return
  fi
  local log="$VENV/.pip-lock.log" here stale
  stale="$(stale_lock)"
  [ -z "$stale" ] || die "requirements.lock is older than requirements.txt or requirements-dev.txt ($stale): run ./build.sh lock and commit requirements.lock with them."
  if "$PY" -m pip install --quiet "${files[@]}" -c "$LOCK" 2>"$log"; then
    return 0
  fi
  here="$("$PY" -c 'import sys, sysconfig; print("%d.%d %s" % (*sys.version_info[:2], sysconfig.get_platform()))')"
  if [ "$here" = "$(lock_field python) $(lock_field platform)" ]; then
    cat "$log" >&2; return 1  # the lock's own Python and platform: a real failure, not a missing wheel
  fi
  echo "setup: requirements.lock (Python $(lock_field python), $(lock_field platform)) does not install on Python ${here% *}, ${here#* } ($(grep -m1 -E '^ERROR' "$log" || tail -n 1 "$log")); installing $names's pins alone, other packages at their newest"
  "$PY" -m pip install --quiet "${files[@]}"
}

setup() {
  if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$(setup_hash)" ] && [ -x "$PY" ]; then
    lab_settings
    echo "setup: up to date ($VENV)"; return 0
  fi
  local base
  if [ -x "$PY" ]; then
    base="$PY"
    echo "setup: updating $VENV ($("$PY" --version))"
  else
    base="$(find_python)" || no_python
    echo "setup: creating $VENV with $("$base" --version) ($base)"
    "$base" -m venv "$VENV" || die "could not create a venv; on Debian/Ubuntu: apt-get install python3-venv (python3.11-venv, ...)"
  fi
  "$PY" -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
  echo "setup: installing requirements.txt with requirements.lock (torch is large: a few minutes the first time)"
  install_requirements "$REQUIREMENTS" \
    || die "pip could not install requirements.txt (see the error above). Check your connection to the package index, then re-run ./build.sh setup."
  "$PY" -m pip install --quiet --no-deps -e "$ROOT" || die "pip could not install course_utils (pip install -e .)."
  # The maintainers' tools (maintainer_tools/pyproject.toml), a distribution of their own beside course_utils:
  # ./build.sh course, export, docs, benchmarks and the tests run them as `python -m maintainer_tools.<tool>`.
  "$PY" -m pip install --quiet --no-deps -e "$ROOT/maintainer_tools" \
    || die "pip could not install maintainer_tools (pip install -e maintainer_tools)."
  "$PY" -m ipykernel install --sys-prefix --name "$KERNEL" --display-name "Python (Ray Train course)" >/dev/null \
    || die "could not register the Jupyter kernel $KERNEL."
  lab_settings
  setup_hash > "$STAMP"
  echo "setup: done (kernel '$KERNEL' registered)"
}

setup_dev() {
  # setup, then the maintainers' tools (requirements-dev.txt: pytest, nbmake, Playwright, MkDocs, moto,
  # ruff, actionlint) for ./build.sh test and docs. A stamp of their own: a learner's setup never
  # installs them, and a test run installs them once. requirements.txt goes to pip beside them, so
  # nothing a tool asks for moves a learner's pin.
  setup
  if [ -f "$DEV_STAMP" ] && [ "$(cat "$DEV_STAMP")" = "$(dev_hash)" ]; then
    return 0
  fi
  echo "setup: installing requirements-dev.txt with requirements.lock (the tools for tests, the site and linting)"
  install_requirements "$REQUIREMENTS" "$DEV_REQUIREMENTS" \
    || die "pip could not install requirements-dev.txt (see the error above). Check your connection to the package index, then re-run the command."
  dev_hash > "$DEV_STAMP"
}

export_lessons() {
  # course_utils/lesson_code.py from the lessons' #@save cells (maintainer_tools/export.py): run after editing
  # such a cell; `export --check` only says whether the module is up to date.
  [ -x "$PY" ] || die "no venv at $VENV: run ./build.sh setup first"
  "$PY" -m maintainer_tools.export "$@"
}

lock() {
  # requirements.lock: a fresh throwaway venv, `pip install -r requirements.txt -r requirements-dev.txt`,
  # then `pip freeze --exclude-editable` (the course package is never in it). One lock for both files:
  # a learner's setup takes the pins of what it installs and pip ignores the rest. Run after changing
  # either file.
  local base tmp
  base="$(find_python)" || no_python
  tmp="$(mktemp -d)"
  # shellcheck disable=SC2064  # expanded now: $tmp is local, gone when the EXIT trap runs
  trap "rm -rf '$tmp'" EXIT
  echo "lock: installing requirements.txt and requirements-dev.txt into a fresh venv with $("$base" --version) (a few minutes)"
  "$base" -m venv "$tmp/venv" || die "could not create a venv in $tmp"
  "$tmp/venv/bin/python" -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
  "$tmp/venv/bin/python" -m pip install --quiet -r "$REQUIREMENTS" -r "$DEV_REQUIREMENTS" \
    || die "pip could not install requirements.txt and requirements-dev.txt; requirements.lock left as it was."
  {
    lock_header "$tmp/venv/bin/python"
    "$tmp/venv/bin/python" -m pip freeze --exclude-editable | grep -v -i -E '^course[-_]utils([=@ ]|$)'
  } > "$LOCK.new"
  mv "$LOCK.new" "$LOCK"
  echo "lock: wrote $LOCK ($(grep -c '==' "$LOCK") pins); commit it with requirements.txt and requirements-dev.txt"
}

lock_header() {
  "$1" - <<'PY'
import datetime, platform, sys, sysconfig
print(f"""\
# Every package `pip install -r requirements.txt -r requirements-dev.txt` installs, pinned: `./build.sh
# setup` installs requirements.txt with this file as constraints (pip install -r requirements.txt -c
# requirements.lock), `./build.sh test` and `docs` add requirements-dev.txt the same way.
# Made by `./build.sh lock` (a fresh venv, pip install -r requirements.txt -r requirements-dev.txt, pip
# freeze --exclude-editable) on {datetime.date.today()} with Python {platform.python_version()} on {sysconfig.get_platform()}.
# Do not edit: change requirements.txt or requirements-dev.txt, then run ./build.sh lock.
# python: {sys.version_info[0]}.{sys.version_info[1]}
# platform: {sysconfig.get_platform()}""")
PY
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
  if [ "${CODESPACES:-}" = "true" ]; then
    # A GitHub Codespace forwards 127.0.0.1:8888 to the learner's browser under its own name
    # (https://<codespace>-8888.app.github.dev), a Host Jupyter refuses unless allowed: it still listens
    # on 127.0.0.1 only, behind its token. Its own browser launch opens a local file the learner's browser
    # cannot reach, so the link it prints is the way in (VS Code opens it through the forwarded port).
    echo "lab: in a GitHub Codespace: open the http://127.0.0.1:8888/lab?token=... link below (Ctrl/Cmd+click)"
    extra+=(--ServerApp.allow_remote_access=True --no-browser)
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
  exec "$PY" -m maintainer_tools.run_course "$@"
}

test_all() {
  setup_dev
  # Unit + integration (each integration module starts and stops its own local Ray), the
  # workshop path (a `ray start` cluster + S3 storage, every lesson), then every lesson in the
  # smoke profile through nbmake's runner, as shipped and then with its exercises answered in the
  # same kernel (conftest.py). A failing cell fails the run; the end lists each learner path.
  # --timeout is per test item: a lesson with its answered exercises gets 1,500 s.
  # Paths given first replace `tests notebooks` (ci.yml's newer-Python job: tests/unit and lessons
  # 01-02); every argument after them goes to pytest as it is.
  cd "$ROOT"
  local targets=()
  while [ $# -gt 0 ] && [ -e "${1%%::*}" ]; do targets+=("$1"); shift; done
  [ ${#targets[@]} -gt 0 ] || targets=(tests notebooks)
  # maintainer_tools.run_tests: pytest, ending the process once pytest.main returns (its verdict, not
  # a teardown abort, is the exit code).
  COURSE_PROFILE="${COURSE_TEST_PROFILE:-smoke}" "$PY" -m maintainer_tools.run_tests \
    "${targets[@]}" --nbmake-timeout=600 --timeout=1500 --durations=20 -p no:cacheprovider "$@"
}

canary() {
  # The newest Ray and newest other direct dependencies that install here (torch and torchvision stay
  # pinned), no lock, in a venv of their own; then the unit tests, every lesson and the benches, ending
  # with one table (maintainer_tools/canary.py; --no-bench, --lessons 01 02). Exit 1 when anything failed.
  local venv="${COURSE_CANARY_VENV:-$ROOT/.venv-canary}" base
  case "$venv" in /*) ;; *) venv="$PWD/$venv" ;; esac
  if [ ! -x "$venv/bin/python" ]; then
    base="$(find_python)" || no_python
    echo "canary: creating $venv with $("$base" --version)"
    "$base" -m venv "$venv" || die "could not create a venv at $venv"
  fi
  "$venv/bin/python" -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
  cd "$ROOT"
  exec "$venv/bin/python" -m maintainer_tools.canary "$@"
}

clean() {
  # Only what the course generated inside this repo: executed notebooks and the default run
  # storage. Data stays (a cache every learner sharing COURSE_DATA reads); `clean --data` also
  # removes the course's offline MNIST copy, once nobody needs it. Storage elsewhere is never touched.
  if [ "${1:-}" = "--data" ]; then "$PY" -m maintainer_tools.clean_data --data; fi
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
  clean) clean "$@" ;;
  lock) lock ;;
  docs) docs "$@" ;;
  benchmarks) benchmarks "$@" ;;
  export) export_lessons "$@" ;;
  canary) canary "$@" ;;
  *) echo "usage: ./build.sh {setup|lab|course|test|clean|docs|benchmarks|lock|export|canary}"
     echo "  learners: README.md (setup, lab, course, test, clean); everything else: CONTRIBUTING.md"; exit 2 ;;
esac
