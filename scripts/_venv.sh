# Sourced by scripts/demo and scripts/test: create or refresh .venv and install the project.
# Usage: ensure_venv [EXTRAS]   (e.g. ensure_venv test)
ensure_venv() {
  local extras="${1:-}"
  local root
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  local py="${PYTHON:-python3}"
  if ! "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "Orbit needs Python 3.11 or newer ($py is older or missing)" >&2
    return 1
  fi
  if [ ! -x "$root/.venv/bin/python" ]; then
    "$py" -m venv "$root/.venv"
  fi
  # Reinstall only when the project definition changed since the last install.
  local stamp="$root/.venv/.orbit-installed${extras:+-$extras}"
  if [ ! -f "$stamp" ] || [ "$root/pyproject.toml" -nt "$stamp" ]; then
    "$root/.venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
    "$root/.venv/bin/python" -m pip install --quiet --disable-pip-version-check \
      -e "$root${extras:+[$extras]}"
    touch "$stamp"
  fi
}
