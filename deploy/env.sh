# shellcheck shell=bash
# Shared by deploy/run.sh and deploy/test.sh: find Python >= 3.11, create .venv, install the
# pinned dependencies (requirements.lock) and the project (editable, without dependencies).
# Sourced from the repository root.

PYKRAFT_MIN_PYTHON="3.11"
VENV="${PYKRAFT_VENV:-.venv}"

die() {
    echo "error: $*" >&2
    exit 1
}

log() {
    echo "==> $*" >&2
}

python_ok() {
    # True if "$1" runs and is Python >= 3.11.
    "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' >/dev/null 2>&1
}

find_python() {
    local candidate
    for candidate in "${PYTHON:-}" python3 python3.13 python3.12 python3.11 python; do
        [ -n "$candidate" ] || continue
        if command -v "$candidate" >/dev/null 2>&1 && python_ok "$candidate"; then
            # The real interpreter, not a wrapper such as a pyenv shim.
            "$candidate" -c 'import sys; print(sys.executable)'
            return 0
        fi
    done
    local found="none"
    if command -v python3 >/dev/null 2>&1; then
        found="$(python3 -c 'import sys; print(".".join(map(str, sys.version_info[:3])))' 2>/dev/null || echo unknown)"
    fi
    die "pykraft needs Python >= ${PYKRAFT_MIN_PYTHON} (python3 here is ${found}). Install one (e.g. apt-get install python3.11 python3.11-venv) or set PYTHON=/path/to/python3.11"
}

ensure_venv() {
    if [ -x "$VENV/bin/python" ]; then
        python_ok "$VENV/bin/python" ||
            die "$VENV was made with Python < ${PYKRAFT_MIN_PYTHON}; remove it (rm -rf $VENV) and run again"
        return 0
    fi
    local py
    py="$(find_python)"
    log "creating $VENV with $py ($("$py" --version 2>&1))"
    "$py" -m venv "$VENV" ||
        die "could not create $VENV with $py; on Debian/Ubuntu install the venv module (apt-get install python3-venv)"
}

install_project() {
    # Reinstall only when requirements.lock or pyproject.toml changed (or PYKRAFT_FORCE_INSTALL=1).
    local stamp="$VENV/.pykraft-install-stamp" want
    want="$(cat requirements.lock pyproject.toml | cksum)"
    if [ "${PYKRAFT_FORCE_INSTALL:-0}" != 1 ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] &&
        [ -x "$VENV/bin/pykraft" ]; then
        return 0
    fi
    log "installing dependencies from requirements.lock into $VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r requirements.lock
    log "installing pykraft (editable)"
    # setuptools is pinned in requirements.lock, so the build needs nothing from outside it.
    # (PYTHONWARNINGS silences setuptools' generic warning about flat-layout editable installs.)
    PYTHONWARNINGS=ignore "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
    echo "$want" >"$stamp"
}

ensure_debian_package() {
    # ensure_debian_package COMMAND [PACKAGE]: install a Debian package if COMMAND is missing and
    # we can (apt-get present, running as root). Best effort: a failure only warns.
    local cmd="$1" pkg="${2:-$1}"
    command -v "$cmd" >/dev/null 2>&1 && return 0
    if ! command -v apt-get >/dev/null 2>&1 || [ "$(id -u)" != 0 ]; then
        log "warning: $cmd is not installed and cannot be installed here (needs apt-get as root); tests that need it will skip"
        return 0
    fi
    log "installing Debian package $pkg"
    export DEBIAN_FRONTEND=noninteractive
    if ! { timeout 300 apt-get install -y -qq --no-install-recommends "$pkg" >/dev/null 2>&1 ||
        { timeout 300 apt-get update -qq >/dev/null 2>&1 &&
            timeout 300 apt-get install -y -qq --no-install-recommends "$pkg" >/dev/null 2>&1; }; }; then
        log "warning: could not install $pkg; tests that need it will skip"
    fi
    return 0
}

build_compiled() {
    # Compile the hot modules with mypyc (tools/mypyc_build.py): again only when their sources
    # changed. PYKRAFT_BUILD=pure removes a build and runs everything as Python; a build that
    # fails (no C compiler or Python headers) warns and leaves the tree pure Python.
    local tool="tools/mypyc_build.py" now
    now="$("$VENV/bin/python" "$tool" status || true)"
    if [ "${PYKRAFT_BUILD:-compiled}" = pure ]; then
        [ "$now" = pure ] || "$VENV/bin/python" "$tool" clean
        return 0
    fi
    [ "$now" = current ] && return 0
    log "compiling the hot modules with mypyc ($tool; a few minutes, once; PYKRAFT_BUILD=pure skips it)"
    if ! "$VENV/bin/python" "$tool" build >"$VENV/mypyc-build.log" 2>&1; then
        log "warning: the mypyc build failed (see $VENV/mypyc-build.log); pykraft runs as pure Python"
        "$VENV/bin/python" "$tool" clean
    fi
}

setup_env() {
    [ -f pyproject.toml ] && [ -f requirements.lock ] || die "run from the pykraft repository root"
    ensure_venv
    install_project
    build_compiled
}
