# Helpers shared by the bootstrap scripts in this folder; source it, do not run it:
#   . "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Runs a command as root: directly when we are root (CI, the dev machines), else through sudo.
as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        echo "error: need root to run: $*" >&2
        return 1
    fi
}

# Adds Debian's bookworm-backports (packages and sources) to apt if no source list names it, and
# refreshes the package lists then. QEMU comes from there: Debian's plain bookworm QEMU conflicts
# with the preinstalled qemu-utils from backports (../shared/spec/platform-notes.md).
ensure_backports() {
    local src=/etc/apt/sources.list.d/bookworm-backports.sources uri
    grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/ && return 0
    uri="$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)"
    uri="${uri:-http://deb.debian.org/debian}"
    printf 'Types: deb deb-src\nURIs: %s\nSuites: bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
        "$uri" | as_root tee "$src" >/dev/null
    echo "added $src ($uri)"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
}
