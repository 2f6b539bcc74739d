#!/usr/bin/env bash
# install.sh — install a built vbmq: the binary, the systemd unit, and QEMU's vhost-user
# descriptor of type "fs" (libvirt then starts vbmq for <filesystem><driver type='virtiofs'/>
# without a <binary>: it takes the first fs descriptor by file name, and 40-vbmq-fs.json comes
# before virtiofsd's 50-*.json), and one of type "block", 50-vbmq-blk.json, whose binary is the
# link $PREFIX/libexec/vbmq-vhost-user-blk to vbmq (started by that name, vbmq is QEMU's block
# backend program: --socket-path|--fd, --blk-file, --read-only, --print-capabilities).
#
# Usage (as root, after `cargo build --release`): scripts/install.sh [--no-descriptor]
# Knobs: PREFIX=/usr/local (the binary goes to $PREFIX/bin/vbmq), DESCRIPTORS=/usr/share/qemu/vhost-user,
#        UNITS=/etc/systemd/system, DESTDIR= (staged installs), BIN=target/release/vbmq.
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX=${PREFIX:-/usr/local} DESCRIPTORS=${DESCRIPTORS:-/usr/share/qemu/vhost-user}
UNITS=${UNITS:-/etc/systemd/system} DESTDIR=${DESTDIR:-}
BIN=${BIN:-target/release/vbmq}
[ -x "$BIN" ] || { echo "$0: $BIN missing: run cargo build --release first" >&2; exit 2; }
install -D -m 0755 "$BIN" "$DESTDIR$PREFIX/bin/vbmq"
install -d -m 0755 "$DESTDIR/etc/vbmq" "$DESTDIR/var/lib/vbmq"
install -D -m 0644 contrib/vbmq.service "$DESTDIR$UNITS/vbmq.service"
if [ "${1:-}" != --no-descriptor ]; then
  install -d -m 0755 "$DESTDIR$DESCRIPTORS"
  # JSON string: the path holds no quote or backslash (checked), so it goes in as it is.
  case $PREFIX in *'"'* | *\\*) echo "$0: PREFIX must not hold a quote or backslash" >&2; exit 2 ;; esac
  sed "s|@BINARY@|$PREFIX/bin/vbmq|" contrib/vhost-user/40-vbmq-fs.json \
    > "$DESTDIR$DESCRIPTORS/40-vbmq-fs.json"
  chmod 0644 "$DESTDIR$DESCRIPTORS/40-vbmq-fs.json"
  echo "installed $DESCRIPTORS/40-vbmq-fs.json -> $PREFIX/bin/vbmq"
  install -d -m 0755 "$DESTDIR$PREFIX/libexec"
  ln -sfn ../bin/vbmq "$DESTDIR$PREFIX/libexec/vbmq-vhost-user-blk"
  sed "s|@BINARY@|$PREFIX/libexec/vbmq-vhost-user-blk|" contrib/vhost-user/50-vbmq-blk.json \
    > "$DESTDIR$DESCRIPTORS/50-vbmq-blk.json"
  chmod 0644 "$DESTDIR$DESCRIPTORS/50-vbmq-blk.json"
  echo "installed $DESCRIPTORS/50-vbmq-blk.json -> $PREFIX/libexec/vbmq-vhost-user-blk"
fi
echo "installed $PREFIX/bin/vbmq and $UNITS/vbmq.service"
