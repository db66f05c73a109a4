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

# The boards that run under QEMU (`kind = "qemu"` in their board.toml), one name a line, sorted.
qemu_boards() {
    local toml
    for toml in boards/*/board.toml; do
        [ "$(board_value "$toml" kind)" = qemu ] && basename "$(dirname "$toml")"
    done
    return 0
}

# Makes the model files that board profiles name under target/models/ (derived from the
# checkpoints in models/, so none of them is committed): the Q4_0 conversion of
# models/ll-gdn-mcu16k for boards whose flash cannot hold the Q8_0 file. $1: the loglinear CLI.
# Converting takes milliseconds, so it always runs; an unchanged file is left alone, so that its
# timestamp does not make cargo rebuild the firmware that embeds it.
make_board_models() {
    local cli="$1" out=target/models/ll-gdn-mcu16k-q4_0.gguf
    mkdir -p target/models
    "$cli" convert models/ll-gdn-mcu16k -o "$out.new" --type q4_0 --no-eval >/dev/null
    if cmp -s "$out.new" "$out"; then
        rm "$out.new"
    else
        mv "$out.new" "$out"
        echo "made $out ($(stat -c %s "$out") B) from models/ll-gdn-mcu16k"
    fi
}
