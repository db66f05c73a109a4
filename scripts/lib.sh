# Helpers shared by the scripts in this folder; source it, do not run it:
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

# `key = "value"` or `key = value` from a board.toml (first match, comment stripped).
board_value() {
    local file="$1" key="$2"
    sed -n "s/^${key}[[:space:]]*=[[:space:]]*\"\{0,1\}\([^\"#]*\)\"\{0,1\}.*/\1/p" "$file" | head -n1 |
        sed 's/[[:space:]]*$//'
}
