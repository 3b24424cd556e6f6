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
  # The project's own modules as bytecode (only those changed since the last run are
  # compiled). An editable install leaves that to each first import, and where
  # PYTHONDONTWRITEBYTECODE is set no import ever writes it: every server, supervisor and
  # command the demo or the tests start would compile about 120 modules again (0.3 s each).
  "$root/.venv/bin/python" -m compileall -q -j 0 \
    "$root/orbit_wire" "$root/orbit_host" "$root/orbit_server" "$root/orbit_supervisor" \
    "$root/orbit_child" "$root/orbit_client" "$root/examples" "$root/tests" "$root/scripts" \
    >/dev/null
}
