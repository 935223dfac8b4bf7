#!/usr/bin/env bash
# Prepare this machine for the local FactLoom platform (no Docker).
#
# Idempotent and fast on re-run: each step checks first and only acts when something is missing
# or changed. Steps: OS packages (Redis, PostgreSQL, a JDK, Maven, Prometheus, Alertmanager), the
# project's .venv (reinstalled only when requirements.lock changed), and the Neo4j server jars from Maven Central (fetched once
# into the shared cache, ${FACTLOOM_CACHE_DIR:-$HOME/.cache/factloom}/neo4j/<version>/lib).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

NEO4J_VERSION="5.26.30"  # keep equal to factloom.config.NEO4J_VERSION
CACHE_DIR="${FACTLOOM_CACHE_DIR:-$HOME/.cache/factloom}"
NEO4J_LIB="$CACHE_DIR/neo4j/$NEO4J_VERSION/lib"
VENV="$ROOT/.venv"
PYTHON_BIN="${PYTHON:-python3.11}"

say() { printf 'setup: %s\n' "$*"; }

# --- OS packages --------------------------------------------------------------------------------
SUDO=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi

have_initdb() { compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || command -v initdb >/dev/null; }

pkgs=()
command -v redis-server >/dev/null 2>&1 || pkgs+=(redis-server)
have_initdb || pkgs+=(postgresql)
command -v java >/dev/null 2>&1 || pkgs+=(default-jre-headless)
command -v mvn >/dev/null 2>&1 || pkgs+=(maven)
# admin UI: npm fetches its front-end libraries; Debian's chromium runs its browser tests
command -v npm >/dev/null 2>&1 || pkgs+=(npm)
[ -x /usr/bin/chromium ] || pkgs+=(chromium)
if [ "${#pkgs[@]}" -gt 0 ]; then
  say "installing OS packages: ${pkgs[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${pkgs[@]}" >/dev/null
else
  say "OS packages present (redis-server, postgresql, java, mvn, npm, chromium)"
fi
# monitoring (factloom up --monitoring, tests/platform/test_monitoring.py): Prometheus with promtool, Alertmanager
# with amtool; without their recommends (node exporter and its collectors are not needed here)
mon=()
command -v promtool >/dev/null 2>&1 || mon+=(prometheus)
command -v amtool >/dev/null 2>&1 || mon+=(prometheus-alertmanager)
if [ "${#mon[@]}" -gt 0 ]; then
  say "installing OS packages: ${mon[*]} (no recommends)"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${mon[@]}" >/dev/null
else
  say "OS packages present (prometheus, prometheus-alertmanager)"
fi

# --- Python virtual environment -----------------------------------------------------------------
if [ ! -x "$VENV/bin/python" ]; then
  command -v "$PYTHON_BIN" >/dev/null 2>&1 || PYTHON_BIN=python3
  say "creating $VENV with $PYTHON_BIN"
  "$PYTHON_BIN" -m venv "$VENV"
fi
LOCK_HASH="$(sha256sum requirements.lock pyproject.toml | sha256sum | cut -d' ' -f1)"
STAMP="$VENV/.factloom-lock-sha256"
if [ "$(cat "$STAMP" 2>/dev/null || true)" != "$LOCK_HASH" ] || [ ! -x "$VENV/bin/factloom" ]; then
  say "installing Python packages from requirements.lock"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r requirements.lock
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps -e .
  printf '%s\n' "$LOCK_HASH" >"$STAMP"
else
  say "Python packages up to date"
fi

# --- Neo4j jars from Maven Central --------------------------------------------------------------
if compgen -G "$NEO4J_LIB/neo4j-server-*.jar" >/dev/null; then
  say "Neo4j $NEO4J_VERSION jars present in $NEO4J_LIB"
else
  say "fetching Neo4j $NEO4J_VERSION jars from Maven Central into $NEO4J_LIB"
  mkdir -p "$(dirname "$NEO4J_LIB")"
  TMP="$(mktemp -d "$(dirname "$NEO4J_LIB")/lib.tmp.XXXXXX")"
  trap 'rm -rf "$TMP"' EXIT
  mvn -q -B -Dstyle.color=never -f deploy/neo4j/pom.xml -Dneo4j.version="$NEO4J_VERSION" \
    dependency:copy-dependencies -DoutputDirectory="$TMP"
  rm -rf "$NEO4J_LIB"
  mv "$TMP" "$NEO4J_LIB"  # same file system: atomic rename
  trap - EXIT
  say "Neo4j jars: $(find "$NEO4J_LIB" -name '*.jar' | wc -l) files"
fi

# --- admin UI front-end libraries from the npm registry ------------------------------------------
# served by the app from node_modules (nothing from a CDN); re-installed only when the lock changed
WEB="$ROOT/factloom/platform/web"
WEB_HASH="$(sha256sum "$WEB/package-lock.json" | cut -d' ' -f1)"
WEB_STAMP="$WEB/node_modules/.factloom-lock-sha256"
if [ "$(cat "$WEB_STAMP" 2>/dev/null || true)" != "$WEB_HASH" ]; then
  say "installing the admin UI's npm packages (npm ci)"
  (cd "$WEB" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  printf '%s\n' "$WEB_HASH" >"$WEB_STAMP"
else
  say "admin UI npm packages up to date"
fi

say "done"
