# shellcheck shell=bash
# Shared by the installers in scripts/deps/ (each sources it first): messages, a loud failure
# trap, the Debian mirror and bookworm-backports, and apt.
#
#   VBMQ_DEPS_DRY_RUN=1   packages are only simulated (apt-get -s), nothing is downloaded or
#                         built; sources and `apt-get update` still run for real
#   VBMQ_DEBIAN_MIRROR    the mirror for bookworm-backports, instead of the one the bookworm
#                         source uses

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
    echo "lib.sh is sourced by the installers in scripts/deps/, not run" >&2
    exit 2
fi

set -Eeuo pipefail
export PATH="$PATH:/usr/sbin:/sbin"
export DEBIAN_FRONTEND=noninteractive

deps_name=${0##*/}
dry_run=0
[[ ${VBMQ_DEPS_DRY_RUN:-0} == 0 ]] || dry_run=1
codename=bookworm
apt_lists=/var/lib/apt/lists
# Touched after each `apt-get update` made here: later runs skip the update for a day.
apt_stamp=$apt_lists/.vbmq-updated

say() { echo "== $deps_name: $*"; }
die() {
    echo "$deps_name: error: $*" >&2
    exit 1
}
# Any failing command ends the installer with its file, line and text (set -E: inside
# functions and command substitutions too), never silently.
deps_on_err() {
    echo "$deps_name: error: '$4' failed with status $1 (${2##*/} line $3)" >&2
    exit "$1"
}
trap 'deps_on_err $? "${BASH_SOURCE[0]}" "$LINENO" "$BASH_COMMAND"' ERR

sudo=()
if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || die "not root and no sudo: run as root"
    sudo=(sudo)
fi
# Runs a command as root; a failure names the command with its arguments expanded (the ERR
# trap could only show "${sudo[@]}" "$@").
as_root() { "${sudo[@]}" "$@" || die "'$*' failed with status $?"; }

# Every enabled `deb` source as "URI SUITE" lines: deb822 stanzas of /etc/apt/sources.list.d/
# *.sources, then `deb` lines of /etc/apt/sources.list and *.list. Comments (which in the stock
# debian.sources hold snapshot.debian.org URLs) and disabled stanzas are skipped.
apt_sources() {
    local etc=/etc/apt files=()
    shopt -s nullglob
    files=("$etc"/sources.list.d/*.sources)
    ((${#files[@]} == 0)) || awk '
        function flush(  n, m, i, j, u, s) {
            if (f["types"] ~ /(^|[ \t])deb([ \t]|$)/ && tolower(f["enabled"]) !~ /no/) {
                n = split(f["uris"], u, " ")
                m = split(f["suites"], s, " ")
                for (i = 1; i <= n; i++) for (j = 1; j <= m; j++) print u[i], s[j]
            }
            delete f
            key = ""
        }
        FNR == 1 { flush() }
        /^#/ { next }
        /^[ \t]*$/ { flush(); next }
        /^[ \t]/ { if (key != "") f[key] = f[key] " " $0; next }
        /^[A-Za-z0-9-]+:/ {
            key = tolower(substr($0, 1, index($0, ":") - 1))
            f[key] = substr($0, index($0, ":") + 1)
        }
        END { flush() }
    ' "${files[@]}" | awk '{ $1 = $1; print }'
    files=()
    [[ -e $etc/sources.list ]] && files+=("$etc/sources.list")
    files+=("$etc"/sources.list.d/*.list)
    shopt -u nullglob
    ((${#files[@]} == 0)) || awk '
        { sub(/#.*/, "") }
        $1 == "deb" {
            i = 2
            # Options: "[ key=value ... ]", possibly several fields.
            if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
            if (i + 1 <= NF) print $i, $(i + 1)
        }
    ' "${files[@]}"
}

# The mirror the bookworm source uses (the first one), without a trailing slash.
debian_mirror() {
    local mirror=${VBMQ_DEBIAN_MIRROR:-}
    if [[ -z $mirror ]]; then
        # (awk reads to the end: an early exit could kill apt_sources with SIGPIPE.)
        mirror=$(apt_sources | awk -v s="$codename" '$2 == s && m == "" { m = $1 } END { print m }')
        [[ -n $mirror ]] || die "no enabled '$codename' source in /etc/apt/sources.list.d/*.sources" \
            "or /etc/apt/sources.list (is this Debian 12?); set VBMQ_DEBIAN_MIRROR=URL to choose one"
    fi
    echo "${mirror%/}"
}

# Debian 12 is what these installers know: its backports carry the QEMU 10 the tests need.
check_debian12() {
    local id="" version_codename=""
    # shellcheck disable=SC1091
    [[ -r /etc/os-release ]] && id=$(. /etc/os-release && echo "${ID:-}") &&
        version_codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
    [[ $id == debian && $version_codename == "$codename" ]] ||
        die "written for Debian 12 ($codename); this is '${id:-?} ${version_codename:-?}' (/etc/os-release)"
}

# Adds bookworm-backports on the bookworm mirror unless a source has it already, then brings
# apt's lists up to date if they need it. Safe to call from every installer.
sources_changed=0
ensure_backports() {
    check_debian12
    local file=/etc/apt/sources.list.d/$codename-backports.sources mirror keyring
    if apt_sources | awk -v s="$codename-backports" '$2 == s { found = 1 } END { exit !found }'; then
        say "$codename-backports: already a source"
    else
        mirror=$(debian_mirror)
        keyring=/usr/share/keyrings/debian-archive-keyring.gpg
        [[ -r $keyring ]] || die "$keyring missing (package debian-archive-keyring)"
        say "adding $codename-backports on $mirror: $file"
        as_root tee "$file" >/dev/null <<SRC
Types: deb
URIs: $mirror
Suites: $codename-backports
Components: main
Signed-By: $keyring
SRC
        sources_changed=1
    fi
    apt_update_if_needed
}

# Whether apt's lists hold each given suite (a release line "n=SUITE," of apt-cache policy).
# (A here-string, not a pipe: grep -q would stop early and pipefail report apt-cache's SIGPIPE.)
apt_knows() {
    local policy suite
    policy=$(apt-cache policy)
    for suite; do grep -q "[ ,]n=$suite," <<<"$policy" || return 1; done
}

apt_update_if_needed() {
    local why=""
    if ((sources_changed)); then
        why="the sources changed"
    elif ! apt_knows "$codename" "$codename-backports"; then
        why="apt's lists lack $codename or $codename-backports"
    elif [[ -z $(find "$apt_stamp" -mmin -1440 2>/dev/null) ]]; then
        why="no update by these installers in the last day"
    fi
    if [[ -z $why ]]; then
        say "apt lists: up to date"
        return 0
    fi
    say "apt-get update ($why)"
    as_root apt-get -o DPkg::Lock::Timeout=600 update -q
    # apt-get update exits 0 even when a source failed: check what the tests need is there.
    local suite
    for suite in "$codename" "$codename-backports"; do
        apt_knows "$suite" ||
            die "after apt-get update apt has no index of '$suite' (see apt's errors above)"
    done
    as_root touch "$apt_stamp"
    sources_changed=0
}

# Whether a package is installed (any version).
installed() { [[ $(dpkg-query -W -f='${Status}' "$1" 2>/dev/null) == *" ok installed" ]]; }

# The given packages not installed yet.
missing_packages() {
    local p
    for p; do installed "$p" || echo "$p"; done
}

# apt_install [-t SUITE] PKG...: installs (or upgrades to SUITE's version) without recommends.
# A dry run only simulates it, printing what apt would install for the named packages.
apt_install() {
    local args=(-o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends)
    if [[ $1 == -t ]]; then
        args+=(-t "$2")
        shift 2
    fi
    if ((dry_run)); then
        say "(dry run) apt-get -s ${args[*]:2} $*"
        local out pkg
        out=$(apt-get -s "${args[@]}" "$@")
        for pkg; do
            grep -E "^Inst $pkg " <<<"$out" || say "(dry run) $pkg: nothing to do"
        done
        # (grep -c prints 0 and exits 1 when nothing would be installed.)
        say "(dry run) $(grep -c '^Inst ' <<<"$out" || true) packages in all would be installed"
        return 0
    fi
    say "apt-get ${args[*]:2} $*"
    as_root apt-get "${args[@]}" "$@"
}
