#!/usr/bin/env bash
# Proves the test installers (scripts/install-test-deps.sh, scripts/deps/) work on a fresh
# Debian 12 machine, as root, without installing anything into this one:
#
#   check-installers.sh           apt state of a fresh image in a private mount namespace
#                                 (resolution only, see below) and the failure cases (~1 min)
#   check-installers.sh --chroot  as well: a real install in a fresh debootstrap (minbase)
#                                 root, then the tests' build (~10 min; needs debootstrap)
#
# Namespace mode (unshare -m, private propagation): /etc/apt is a copy without any source but a
# stock deb822 debian.sources (no /etc/apt/sources.list), /var/lib/apt/lists and /var/cache/apt
# are empty tmpfs, /var/lib/dpkg is read-only. The installers run with VBMQ_DEPS_DRY_RUN=1:
# the sources and `apt-get update` are real, package installs are `apt-get -s` simulations
# against this machine's dpkg state, the kernel and cargo-fuzz are not fetched.
#
#   VBMQ_CHECK_ROOT   where --chroot bootstraps (default /var/tmp/vbmq-check-root; removed after
#                     unless VBMQ_CHECK_KEEP=1)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
# shellcheck source-path=SCRIPTDIR source=deps/lib.sh
source "$here/deps/lib.sh"

failures=0
ok() { echo "ok: $*"; }
fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}
keyring=/usr/share/keyrings/debian-archive-keyring.gpg

# A stock Debian 12 image's debian.sources; its comments hold URLs that are not the mirror.
stock_sources() {
    cat <<SRC
Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: $1
Suites: bookworm bookworm-updates
Components: main
Signed-By: $keyring

Types: deb
# http://snapshot.debian.org/archive/debian-security/20250520T000000Z
URIs: $2
Suites: bookworm-security
Components: main
Signed-By: $keyring
SRC
}

# Inside the namespace: /etc/apt without sources, empty apt lists and cache, read-only dpkg.
# Called again, it first takes its own mounts away (they hide this machine's state beneath).
fresh_mounts=()
fresh_apt() {
    local scratch=$1 dir
    for dir in "${fresh_mounts[@]}"; do umount "$dir"; done
    fresh_mounts=()
    mountpoint -q "$scratch" || mount -t tmpfs vbmq-check "$scratch"
    rm -rf "$scratch/etc-apt"
    cp -a /etc/apt "$scratch/etc-apt"
    rm -f "$scratch/etc-apt/sources.list" "$scratch/etc-apt/sources.list.d/"*
    mount --bind "$scratch/etc-apt" /etc/apt
    for dir in /var/lib/apt/lists /var/cache/apt; do
        mount -t tmpfs vbmq-check "$dir"
    done
    fresh_mounts=(/etc/apt /var/lib/apt/lists /var/cache/apt)
    mkdir -p /var/lib/apt/lists/partial /var/cache/apt/archives/partial
    if getent passwd _apt >/dev/null; then chown _apt /var/lib/apt/lists/partial; fi
    if ! mountpoint -q /var/lib/dpkg; then
        mount --bind /var/lib/dpkg /var/lib/dpkg
        mount -o remount,bind,ro /var/lib/dpkg
    fi
}

# The bookworm-backports source the installers wrote must be on MIRROR.
check_backports_source() {
    local file=/etc/apt/sources.list.d/bookworm-backports.sources uris
    [[ -f $file ]] || {
        fail "no $file"
        return
    }
    uris=$(awk '/^URIs:/ { print $2 }' "$file")
    if [[ $uris == "$1" ]]; then ok "$file: URIs: $uris"; else fail "$file: URIs '$uris', not '$1'"; fi
}

# apt must offer PACKAGE 1:10.x from bookworm-backports.
check_candidate() {
    local pkg=$1 policy version candidate
    policy=$(apt-cache policy "$pkg")
    # Backports are pinned at 100: the 1:10 version is in the version table, while the
    # Candidate stays bookworm's. A version line ("VERSION PRIORITY") precedes its sources.
    version=$(awk '
        NF <= 3 && !/:\/\// && !/dpkg\/status/ && /^ +(\*\*\* )?[0-9]/ { v = $(NF - 1); next }
        / bookworm-backports\// && v ~ /^1:10\./ && !found { found = v }
        END { print found }' <<<"$policy")
    if [[ -n $version ]]; then
        ok "apt-cache policy $pkg: $version from bookworm-backports"
    else
        fail "apt-cache policy $pkg has no 1:10.x from bookworm-backports:"$'\n'"$policy"
    fi
    candidate=$(apt-cache -t bookworm-backports policy "$pkg" | awk '/Candidate:/ { print $2 }')
    if [[ $candidate == 1:10.* ]]; then
        ok "apt-cache -t bookworm-backports policy $pkg: Candidate: $candidate"
    else
        fail "apt-cache -t bookworm-backports policy $pkg: Candidate: '$candidate'"
    fi
}

# Runs COMMAND..., expecting it to fail with a message matching PATTERN on stderr.
expect_failure() {
    local what=$1 pattern=$2 status=0 err
    shift 2
    err=$(mktemp)
    "$@" >/dev/null 2>"$err" || status=$?
    if ((status == 0)); then
        fail "$what: exit status 0"
    elif grep -Eq "$pattern" "$err"; then
        ok "$what: status $status, says: $(grep -E "$pattern" "$err" | head -n1)"
    else
        fail "$what: status $status without /$pattern/; stderr: $(cat "$err")"
    fi
    rm -f "$err"
}

# --- inside the namespace -------------------------------------------------------------------

inside_namespace() {
    local scratch=$1 mirror=$2 security=$3 start out
    export VBMQ_DEPS_DRY_RUN=1 VBMQ_GUEST_CACHE=$scratch/guest-cache

    say "fresh image: stock deb822 debian.sources on $mirror, no sources.list, empty lists"
    fresh_apt "$scratch"
    stock_sources "$mirror" "$security" >/etc/apt/sources.list.d/debian.sources
    start=$SECONDS
    out=$scratch/first.log
    bash "$repo/scripts/install-test-deps.sh" 2>&1 | tee "$out"
    say "first run: $((SECONDS - start)) s"
    check_backports_source "$mirror"
    check_candidate qemu-system-x86
    check_candidate qemu-utils
    if grep -q 'snapshot' /etc/apt/sources.list.d/bookworm-backports.sources; then
        fail "a comment's snapshot URL made it into the backports source"
    fi

    start=$SECONDS
    local before after
    before=$(cd /etc/apt/sources.list.d && sha256sum ./*)
    out=$scratch/second.log
    bash "$repo/scripts/install-test-deps.sh" 2>&1 | tee "$out"
    after=$(cd /etc/apt/sources.list.d && sha256sum ./*)
    say "second run: $((SECONDS - start)) s"
    if [[ $before == "$after" ]] && ! grep -Eq 'adding|apt-get update' "$out"; then
        ok "second run: sources unchanged, no apt-get update"
    else
        fail "second run changed the sources or updated apt's lists again"
    fi

    say "fresh image with a one-line /etc/apt/sources.list (a commented-out deb line first)"
    fresh_apt "$scratch"
    {
        echo "# deb http://wrong.example/debian bookworm main"
        echo "deb $mirror bookworm main # the mirror"
        echo "deb $security bookworm-security main"
    } >/etc/apt/sources.list
    bash "$repo/scripts/deps/base.sh"
    check_backports_source "$mirror"

    say "failure cases: each must stop with a message"
    fresh_apt "$scratch"
    sed 's/^/# /' <(stock_sources "$mirror" "$security") >/etc/apt/sources.list.d/debian.sources
    expect_failure "only commented-out sources" "error: no enabled 'bookworm' source" \
        bash "$repo/scripts/deps/base.sh"

    fresh_apt "$scratch"
    stock_sources http://127.0.0.1:9/debian "$security" >/etc/apt/sources.list.d/debian.sources
    expect_failure "unreachable mirror" "error: after apt-get update apt has no index of 'bookworm'" \
        bash "$repo/scripts/deps/base.sh"

    fresh_apt "$scratch"
    stock_sources "$mirror" "$security" >/etc/apt/sources.list.d/debian.sources
    printf 'Types deb\nthis is not deb822\n' >/etc/apt/sources.list.d/garbage.sources
    expect_failure "a malformed .sources file" "error: '.*apt-get.* update -q' failed with status 100" \
        bash "$repo/scripts/deps/guest.sh"

    fresh_apt "$scratch"
    stock_sources "$mirror" "$security" >/etc/apt/sources.list.d/debian.sources
    expect_failure "a mirror without bookworm-backports (VBMQ_DEBIAN_MIRROR=$security)" \
        "error: ('.*apt-get.* update -q' failed with status 100|.*no index of 'bookworm-backports')" \
        env VBMQ_DEBIAN_MIRROR="${security}" bash "$repo/scripts/deps/bench.sh"

    ((failures == 0)) || die "$failures check(s) failed"
}

# --- a real install in a debootstrap root ---------------------------------------------------

inside_chroot() {
    local root=$1 mirror=$2 security=$3 start
    export LC_ALL=C
    say "debootstrap --variant=minbase bookworm $root $mirror"
    start=$SECONDS
    debootstrap --variant=minbase bookworm "$root" "$mirror" >"$root.debootstrap.log" 2>&1 ||
        die "debootstrap failed: see $root.debootstrap.log"
    say "debootstrap: $((SECONDS - start)) s"

    # What a fresh Debian 12 image has: deb822 sources, no sources.list, no apt lists.
    rm -f "$root/etc/apt/sources.list"
    stock_sources "$mirror" "$security" >"$root/etc/apt/sources.list.d/debian.sources"
    find "$root/var/lib/apt/lists" -maxdepth 1 -type f -delete
    cp /etc/resolv.conf "$root/etc/resolv.conf"
    # Rust as rustup leaves it: this machine's toolchains (read-only) and rustup's proxies; a
    # CARGO_HOME of its own, so crates, cargo-fuzz and virtiofsd are fetched and built afresh.
    mkdir -p "$root/root/.cargo/bin" "$root/root/.rustup"
    cp -a "${CARGO_HOME:-$HOME/.cargo}/bin/." "$root/root/.cargo/bin/"
    rm -f "$root/root/.cargo/bin/cargo-fuzz" "$root/root/.cargo/bin/virtiofsd"
    mount --bind "${RUSTUP_HOME:-$HOME/.rustup}" "$root/root/.rustup"
    mount -o remount,bind,ro "$root/root/.rustup"
    # The project, without build output.
    mkdir -p "$root/src"
    tar -C "$repo" --exclude=./target --exclude=./fuzz/target --exclude=./fuzz/corpus \
        --exclude=./fuzz/artifacts -c . | tar -C "$root/src" -x
    mount -t proc proc "$root/proc"
    mount --rbind /dev "$root/dev"
    mount --bind /sys "$root/sys"
    mount -o remount,bind,ro "$root/sys"

    # This machine may reach crates.io through a TLS-intercepting proxy whose CA only its own
    # trust store holds: cargo in the root trusts this machine's bundle too (apt uses http).
    local cainfo=()
    if [[ -f /etc/ssl/certs/ca-certificates.crt ]]; then
        cp /etc/ssl/certs/ca-certificates.crt "$root/etc/vbmq-check-host-ca.crt"
        cainfo=(CARGO_HTTP_CAINFO=/etc/vbmq-check-host-ca.crt)
    fi
    in_root() {
        chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb LC_ALL=C.UTF-8 "${cainfo[@]}" \
            PATH=/root/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
            bash -c "cd /src && $1"
    }
    start=$SECONDS
    in_root 'bash scripts/install-test-deps.sh'
    say "first install in the chroot: $((SECONDS - start)) s"
    start=$SECONDS
    in_root 'bash scripts/install-test-deps.sh' | tee "$root.second.log"
    say "second install in the chroot: $((SECONDS - start)) s"
    if grep -Eq 'adding|apt-get (update|install)|cargo install' "$root.second.log"; then
        fail "the second run in the chroot installed or updated something"
    else
        ok "second run in the chroot: nothing to do"
    fi

    local v
    v=$(in_root 'qemu-system-x86_64 --version' | head -n1)
    if [[ $v == *"version 10."* ]]; then ok "chroot: $v"; else fail "chroot: qemu-system-x86_64: '$v'"; fi
    v=$(in_root 'qemu-storage-daemon --version' | head -n1)
    if [[ $v == *"version 10."* ]]; then ok "chroot: $v"; else fail "chroot: qemu-storage-daemon: '$v'"; fi
    v=$(in_root 'cd /root/.cache/vbmq-guest/kernel/boot && echo vmlinuz-*')
    if [[ $v == vmlinuz-* ]]; then ok "chroot: guest kernel $v"; else fail "chroot: no guest kernel"; fi

    # What the installers are for: the tests and the fuzz targets build.
    start=$SECONDS
    if in_root 'cargo test --release --locked --workspace --all-targets --no-run'; then
        ok "chroot: cargo test --release --workspace --all-targets --no-run ($((SECONDS - start)) s)"
    else
        fail "chroot: the tests do not build"
    fi
    start=$SECONDS
    if in_root 'cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz build'; then
        ok "chroot: cargo fuzz build ($((SECONDS - start)) s)"
    else
        fail "chroot: the fuzz targets do not build"
    fi
    ((failures == 0)) || die "$failures check(s) failed"
}

# --- entry ----------------------------------------------------------------------------------

if [[ ${1:-} == --inside-namespace ]]; then
    shift
    inside_namespace "$@"
    exit 0
elif [[ ${1:-} == --inside-chroot ]]; then
    shift
    inside_chroot "$@"
    exit 0
fi

chroot_mode=0
case ${1:-} in
"") ;;
--chroot) chroot_mode=1 ;;
*) die "usage: check-installers.sh [--chroot]" ;;
esac
[[ $(id -u) -eq 0 ]] || die "needs root (mount namespaces, apt)"
command -v unshare >/dev/null || die "unshare missing (package util-linux)"

# The mirror and security mirror this machine uses (or Debian's own).
mirror=$(VBMQ_DEBIAN_MIRROR=${VBMQ_DEBIAN_MIRROR:-} debian_mirror 2>/dev/null || echo http://deb.debian.org/debian)
security=$(apt_sources | awk '$2 == "bookworm-security" && !m { m = $1 } END { print m }')
security=${security:-http://deb.debian.org/debian-security}
security=${security%/}
say "mirror $mirror, security $security"

total=$SECONDS
scratch=$(mktemp -d)
trap 'rmdir "$scratch" 2>/dev/null || true' EXIT
unshare -m --propagation private bash "$0" --inside-namespace "$scratch" "$mirror" "$security"
say "namespace checks passed in $((SECONDS - total)) s"

if ((chroot_mode)); then
    command -v debootstrap >/dev/null ||
        die "--chroot needs debootstrap: apt-get install debootstrap"
    root=${VBMQ_CHECK_ROOT:-/var/tmp/vbmq-check-root}
    [[ ! -e $root ]] || die "$root exists: remove it first"
    start=$SECONDS
    status=0
    # The mounts live in the namespace: they are gone when it ends, before anything is removed.
    unshare -m --propagation private bash "$0" --inside-chroot "$root" "$mirror" "$security" ||
        status=$?
    if [[ ${VBMQ_CHECK_KEEP:-0} == 1 ]]; then
        say "kept $root"
    elif [[ $(findmnt -rn -o TARGET) == *"$root"* ]]; then
        say "not removing $root: something is still mounted under it"
    else
        rm -rf "$root" "$root.debootstrap.log" "$root.second.log"
    fi
    ((status == 0)) || die "the chroot checks failed (status $status)"
    say "chroot checks passed in $((SECONDS - start)) s"
fi
say "all checks passed in $((SECONDS - total)) s"
