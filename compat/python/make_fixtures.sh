#!/usr/bin/env bash
# Regenerates compat/fixtures/ with real torch releases.
#
#   compat/python/make_fixtures.sh [TORCH_VERSION...]
#
# With no argument it writes every release below; with arguments only those
# (the others' directories are kept). Each release gets a venv cached under
# $TENSORSHARE_CACHE_DIR/fixture-venvs (default ~/.cache/tensorshare); the
# pinned release (compat/python/requirements.txt) uses scripts/python-env.
# Then compat/fixtures/MANIFEST.json is rebuilt from what is on disk.
#
#   TENSORSHARE_CACHE_DIR   where venvs live (as in scripts/python-env)
#   PYENV_ROOT              where to look for CPython 3.10 / 3.11 (~/.pyenv)
#
# The PyPI wheels of torch 1.13.1 and 2.4.1 load the CUDA libraries at import
# even on a CPU-only machine, so their nvidia-* dependencies are installed too
# (about 2 GB and 4 GB); `pip install --no-deps` gives a torch that fails to
# import (libcublas not found).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
fixtures="$root/compat/fixtures"
cache="${TENSORSHARE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tensorshare}"
venvs="$cache/fixture-venvs"
pyenv_root="${PYENV_ROOT:-$HOME/.pyenv}"

pinned="$(sed -n 's/^[[:space:]]*torch==\([0-9.]*\).*/\1/p' "$here/requirements.txt" | head -n1)"
if [[ -z "$pinned" ]]; then
    echo "make_fixtures: no 'torch==X' line in $here/requirements.txt" >&2
    exit 1
fi

# version -> CPython minor version and extra pip requirements.
declare -A python_of=([1.13.1]=3.10 [2.4.1]=3.11)
declare -A extras_of=([1.13.1]="numpy<2" [2.4.1]="numpy<2")
all_versions=(1.13.1 2.4.1 "$pinned")

find_python() {
    local minor="$1" candidate
    for candidate in "$pyenv_root"/versions/"$minor".*/bin/python"$minor" "$(command -v "python$minor" || true)"; do
        if [[ -n "$candidate" && -x "$candidate" ]] && "$candidate" -c 'pass' 2>/dev/null; then
            echo "$candidate"
            return 0
        fi
    done
    echo "make_fixtures: no CPython $minor found (looked in $pyenv_root/versions and PATH); install it, e.g. 'pyenv install $minor'" >&2
    return 1
}

# Prints the python of a venv holding exactly torch==$1, creating it if needed.
release_python() {
    local version="$1"
    if [[ "$version" == "$pinned" ]]; then
        "$root/scripts/python-env"
        return
    fi
    local minor="${python_of[$version]:-}"
    if [[ -z "$minor" ]]; then
        echo "make_fixtures: no recipe for torch $version (known: ${all_versions[*]})" >&2
        return 1
    fi
    local venv="$venvs/torch-$version-cp${minor/./}"
    if [[ ! -x "$venv/bin/python" || ! -f "$venv/.complete" ]]; then
        local base
        base="$(find_python "$minor")"
        echo "make_fixtures: creating $venv (downloads torch $version with its CUDA wheels)" >&2
        rm -rf "$venv"
        mkdir -p "$venvs"
        "$base" -m venv "$venv" >&2
        "$venv/bin/python" -m pip install --quiet --upgrade pip >&2
        # shellcheck disable=SC2086  # extras is a space-separated list
        "$venv/bin/python" -m pip install --quiet "torch==$version" ${extras_of[$version]} >&2
        "$venv/bin/python" -c 'import torch' >&2
        touch "$venv/.complete"
    fi
    echo "$venv/bin/python"
}

versions=("$@")
if [[ ${#versions[@]} -eq 0 ]]; then
    versions=("${all_versions[@]}")
fi

mkdir -p "$fixtures"
for version in "${versions[@]}"; do
    python="$(release_python "$version")"
    found="$("$python" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null)"
    if [[ "$found" != "$version" ]]; then
        echo "make_fixtures: $python has torch '$found', expected $version; delete its venv and rerun" >&2
        exit 1
    fi
    out="$fixtures/torch-$version"
    rm -rf "$out"
    if [[ "$version" == "$pinned" ]]; then
        rm -rf "$fixtures/hostile"
    fi
    "$python" "$here/generate_fixtures.py" "$out"
    if [[ "$version" == "$pinned" ]]; then
        rm -rf "$fixtures/saved_on_gpu"
        "$python" "$here/generate_gpu_fixtures.py" "$fixtures/saved_on_gpu"
    fi
done

"$("$root/scripts/python-env")" "$here/generate_fixtures.py" --merge "$fixtures"
du -sh "$fixtures" | sed 's/^/make_fixtures: total /'
