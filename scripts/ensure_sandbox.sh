#!/usr/bin/env bash
# Installs what runs/engine/sandbox.py needs: bubblewrap (namespaces and mounts), plus prlimit
# and setpriv from util-linux (present on Debian by default). Idempotent; needs root for apt.
set -euo pipefail

missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
command -v prlimit >/dev/null 2>&1 || missing+=(util-linux)
command -v setpriv >/dev/null 2>&1 || missing+=(util-linux)

if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "ensure_sandbox: missing ${missing[*]}; install them as root (apt-get install -y ${missing[*]})" >&2
    exit 1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null \
    || { apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null; }
fi

# A smoke run: namespaces must be allowed on this host (some container hosts forbid them).
if ! bwrap --ro-bind /usr /usr --symlink usr/lib /lib --symlink usr/lib64 /lib64 \
    --symlink usr/bin /bin --unshare-net --unshare-pid --die-with-parent -- /bin/true; then
  echo "ensure_sandbox: bubblewrap is installed but cannot create namespaces here" >&2
  exit 1
fi
echo "sandbox ok: $(bwrap --version)"
