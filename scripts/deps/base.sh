#!/usr/bin/env bash
# Debian's bookworm-backports (QEMU 10) next to bookworm, on the same mirror, and the tools
# every test area shares.
set -euo pipefail
if ! grep -rqs bookworm-backports /etc/apt/sources.list /etc/apt/sources.list.d/; then
    mirror=$(grep -rhoE 'https?://[^ ]+/debian/?' /etc/apt/sources.list.d/ /etc/apt/sources.list 2>/dev/null | head -n1)
    mirror=${mirror:-http://deb.debian.org/debian}
    cat > /etc/apt/sources.list.d/backports.sources <<SRC
Types: deb
URIs: ${mirror%/}
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    rm -f /var/lib/apt/lists/.vbmq-updated
fi
if [ ! -e /var/lib/apt/lists/.vbmq-updated ]; then
    apt-get update -qq
    touch /var/lib/apt/lists/.vbmq-updated
fi
