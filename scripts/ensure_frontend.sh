#!/usr/bin/env bash
# Installs the portal's front-end packages from npm (package-lock.json pins them) and copies
# the built files the templates load into static/vendor/ (gitignored). Idempotent: a second
# run with an unchanged lock file and an existing copy does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

VENDOR=static/vendor
STAMP="node_modules/.srbench-$(sha256sum package-lock.json | cut -c1-16)"

if [ ! -f "$STAMP" ]; then
  command -v npm >/dev/null 2>&1 || { echo "ensure_frontend: npm is missing (apt-get install -y npm)" >&2; exit 1; }
  # ci, not install: the lock file is the truth and must not be rewritten by a build.
  npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
  rm -f node_modules/.srbench-* && touch "$STAMP"
fi

mkdir -p "$VENDOR"
cp node_modules/htmx.org/dist/htmx.min.js "$VENDOR/htmx.min.js"
echo "frontend ok: htmx $(node -p 'require("./node_modules/htmx.org/package.json").version' 2>/dev/null || echo '?')"
