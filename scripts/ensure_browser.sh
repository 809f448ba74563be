#!/usr/bin/env bash
# Installs the Debian Chromium that the Playwright e2e tests drive (tests/e2e). Playwright's own
# browser download (`playwright install`) is never used: it needs the network at test time and
# pins a build we do not control. Idempotent; needs root for apt.
set -euo pipefail

CHROMIUM="${CHROMIUM_PATH:-/usr/bin/chromium}"

if [ ! -x "$CHROMIUM" ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "ensure_browser: $CHROMIUM is missing; install it as root (apt-get install -y chromium)" >&2
    exit 1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium >/dev/null \
    || { apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium >/dev/null; }
fi

# The Python driver only (the e2e tests import it); it talks to the browser above.
PYTHON="${PYTHON:-.venv/bin/python}"
if ! "$PYTHON" -c "import playwright" >/dev/null 2>&1; then
  "$PYTHON" -m pip install -q playwright
fi

echo "browser ok: $("$CHROMIUM" --version 2>/dev/null | head -1)"
