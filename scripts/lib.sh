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

# Size snapshots (the RTIC way) of a firmware ELF against boards/<board>/size.txt.
SNAPSHOT_TEXT_ABS=4096 # tolerance of text, rodata and data: max(SNAPSHOT_TEXT_ABS B, _PCT %);
SNAPSHOT_TEXT_PCT=2    # bss (the arena and the statics) must match exactly

# "text rodata data bss" of an ELF's allocated sections: text = code (.vector_table, .boot2,
# .text*, .init.rust, .eh_frame, .gnu.sgstubs; esp-hal's .rwtext and .trap), rodata = .rodata
# and .model (the model) and esp-hal's .flash.appdesc, data = .data, bss = .bss. riscv-rt's
# .stack and .heap (the rest of RAM) and the empty .uninit are not statics.
elf_sizes() {
    local size_tool=size
    command -v size >/dev/null 2>&1 || size_tool=llvm-size
    "$size_tool" -A "$1" | awk '
        $1 ~ /^\.(vector_table|boot2|text|text\..*|init\.rust|eh_frame|gnu\.sgstubs|rwtext|trap)$/ { t += $2 }
        $1 == ".rodata" || $1 == ".model" || $1 == ".flash.appdesc" { r += $2 }
        $1 == ".data"   { d += $2 }
        $1 == ".bss"    { b += $2 }
        END { printf "%d %d %d %d\n", t, r, d, b }'
}

# size_snapshot BOARD ELF MODEL UPDATE UPDATE_COMMAND: with UPDATE=1 writes
# boards/BOARD/size.txt from the ELF; else compares them and prints a diff on a mismatch
# (returns 1), telling to run UPDATE_COMMAND after an intended change.
size_snapshot() {
    local board="$1" elf="$2" model="$3" update="$4" update_cmd="$5"
    local snap="boards/$board/size.txt" text rodata data bss current bad="" key want got diff tol
    read -r text rodata data bss < <(elf_sizes "$elf")
    current="$(printf '%-6s %9d\n' text "$text" rodata "$rodata" data "$data" bss "$bss")"
    if [ "$update" -eq 1 ]; then
        {
            echo "# Firmware ELF sizes in bytes ($model, the board's [firmware] settings)."
            echo "# Checked in the tests; update with: $update_cmd"
            echo "# text = code sections; rodata = model + constants; bss = session arena + statics"
            echo "$current"
        } >"$snap"
        echo "  updated $snap"
        sed 's/^/    /' <<<"$current"
        return 0
    fi
    if [ ! -f "$snap" ]; then
        echo "FAIL: $board: no $snap (create it with: $update_cmd)" >&2
        return 1
    fi
    for key in text rodata data bss; do
        want=$(awk -v k="$key" '$1 == k { print $2 }' "$snap")
        got=$(awk -v k="$key" '$1 == k { print $2 }' <<<"$current")
        if [ -z "$want" ]; then
            bad+="  $key missing from $snap"$'\n'
            continue
        fi
        diff=$((got > want ? got - want : want - got))
        if [ "$key" = bss ]; then
            tol=0
        else
            tol=$((want * SNAPSHOT_TEXT_PCT / 100))
            [ "$tol" -ge "$SNAPSHOT_TEXT_ABS" ] || tol=$SNAPSHOT_TEXT_ABS
        fi
        if [ "$diff" -gt "$tol" ]; then
            bad+="  $key: snapshot $want B, build $got B (${diff} B apart, tolerance $tol B)"$'\n'
        fi
    done
    if [ -n "$bad" ]; then
        echo "FAIL: $board: firmware sizes differ from $snap:" >&2
        printf '%s' "$bad" >&2
        diff -u --label "$snap (snapshot)" --label "$board build" \
            <(grep -v '^#' "$snap") <(echo "$current") >&2 || true
        echo "  If the change is intended: $update_cmd, and commit $snap" >&2
        return 1
    fi
    echo "  ok: sizes match $snap (bss exact, others within max($SNAPSHOT_TEXT_ABS B, $SNAPSHOT_TEXT_PCT %))"
    sed 's/^/    /' <<<"$current"
}
