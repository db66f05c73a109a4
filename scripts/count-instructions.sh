#!/usr/bin/env bash
# Benchmark (not part of scripts/test.sh): instructions per generated token of the firmware,
# counted exactly under QEMU with a TCG plugin, and the firmware's stack high-water mark.
#
#   bash scripts/count-instructions.sh [BOARD...]   (default: every QEMU board)
#   TOKENS=32 bash scripts/count-instructions.sh     (tokens of the long run; default 16)
#   ACTIVATIONS=q8 KERNEL=portable bash scripts/count-instructions.sh mps2-an500
#       (LOGLINEAR_ACTIVATIONS / LOGLINEAR_KERNEL of the firmware build: f32 or q8 activations,
#       a pinned integer kernel path; default: the board's activations, the fastest path)
#   MODEL=target/ll-gdn-mcu-q4_0.gguf bash scripts/count-instructions.sh   (another model file)
#   bash scripts/count-instructions.sh --plugin-only  (only build the plugin; kernel-check.sh)
#
# 1. Builds QEMU's `insn` sample plugin in target/qemu-plugin/ from Debian's QEMU source package
#    (`apt-get source --download-only qemu/bookworm-backports`; only the upstream tarball is
#    needed: include/qemu/qemu-plugin.h and tests/tcg/plugins/insn.c), once. QEMU's files are
#    GPL-2.0-or-later and stay in target/ (see ../shared/spec/platform-notes.md, "Counting
#    instructions under QEMU"). Needs deb-src lines for bookworm-backports (added if missing)
#    and libglib2.0-dev (installed if missing).
# 2. For each board it builds firmware/ as scripts/qemu-test.sh does and runs it twice under
#    `-icount shift=0 -plugin libinsn.so,inline=on -d plugin` with `GEN n=0` and `GEN n=$TOKENS`
#    (greedy, prompt "X"). Boot, model parsing, stack painting and the prompt are the same in
#    both, so instructions per token = (total(n=TOKENS) - total(n=0)) / TOKENS: one sample, one
#    TOK line and one model step per token, averaged over positions t = 1..TOKENS.
#    Instructions per weight-MAC = that / the model's weight MACs per token (every 2-D tensor of
#    `loglinear inspect` but token_embd.weight, a lookup).
# 3. A third run without the plugin (`GEN n=$TOKENS`, then `STATUS`) reads stack_peak_bytes, the
#    firmware's painted-stack high-water mark, next to the board's firmware.stack_reserve.
# Prints a markdown table.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
FW_TARGET_DIR="$TARGET_DIR/firmware"
PLUGIN_DIR="$TARGET_DIR/qemu-plugin"
PLUGIN="$PLUGIN_DIR/libinsn.so"
WORK="$TARGET_DIR/count-instructions"
MODEL_ARG="${MODEL:-}"
ACTIVATIONS="${ACTIVATIONS:-}"
KERNEL="${KERNEL:-}"
TOKENS="${TOKENS:-16}"
PROMPT="X"
QEMU_TIMEOUT="${QEMU_TIMEOUT:-300}"

PLUGIN_ONLY=0
if [ "${1:-}" = --plugin-only ]; then
    PLUGIN_ONLY=1
    shift
fi
BOARDS=("$@")
if [ "${#BOARDS[@]}" -eq 0 ]; then
    BOARDS=(mps2-an386 mps2-an500 riscv-virt)
fi

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

bash "$ROOT/scripts/qemu-setup.sh" >/dev/null

# ---- 1. the plugin -------------------------------------------------------------------------
if [ ! -f "$PLUGIN" ]; then
    mkdir -p "$PLUGIN_DIR"
    if ! pkg-config --exists glib-2.0 2>/dev/null; then
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
            libglib2.0-dev pkg-config >/dev/null
    fi
    tarball=$(find "$PLUGIN_DIR" -maxdepth 1 -name 'qemu_*.orig.tar.*' | head -n1)
    if [ -z "$tarball" ]; then
        src_files=$(grep -lrs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/ || true)
        # shellcheck disable=SC2086 # a list of files
        if [ -z "$src_files" ] || ! grep -qs 'deb-src' $src_files; then
            uri="$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)"
            printf 'Types: deb-src\nURIs: %s\nSuites: bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
                "${uri:-http://deb.debian.org/debian}" |
                as_root tee /etc/apt/sources.list.d/bookworm-backports-src.sources >/dev/null
        fi
        as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null
        # Only the upstream tarball is used; some mirrors lack the .dsc / .debian.tar.xz, so a
        # failure is fatal only if the tarball did not arrive.
        (cd "$PLUGIN_DIR" && apt-get source --download-only qemu/bookworm-backports) \
            >"$PLUGIN_DIR/apt-source.log" 2>&1 || true
        tarball=$(find "$PLUGIN_DIR" -maxdepth 1 -name 'qemu_*.orig.tar.*' | head -n1)
        [ -n "$tarball" ] || fail "apt-get source qemu/bookworm-backports: $(tail -n 3 "$PLUGIN_DIR/apt-source.log")"
    fi
    rm -rf "$PLUGIN_DIR/src"
    mkdir -p "$PLUGIN_DIR/src"
    tar -xf "$tarball" -C "$PLUGIN_DIR/src" --strip-components=1 --wildcards \
        '*/include/qemu/qemu-plugin.h' '*/tests/tcg/plugins/insn.c'
    # shellcheck disable=SC2046 # pkg-config prints several flags
    gcc -O2 -shared -fPIC -I"$PLUGIN_DIR/src/include/qemu" $(pkg-config --cflags glib-2.0) \
        -o "$PLUGIN.tmp" "$PLUGIN_DIR/src/tests/tcg/plugins/insn.c"
    mv "$PLUGIN.tmp" "$PLUGIN"
    echo "built $PLUGIN from $(basename "$tarball")" >&2
fi
[ "$PLUGIN_ONLY" = 0 ] || exit 0

# ---- weight MACs per token -----------------------------------------------------------------
cargo build --release -q -p loglinear-converter --bin loglinear
# Weight MACs per token of model file $1.
weight_macs() {
    "$TARGET_DIR/release/loglinear" inspect "$1" | awk '
        $2 ~ /^\[[0-9]+,$/ && $1 != "token_embd.weight" {
            a = $2; b = $3; gsub(/[^0-9]/, "", a); gsub(/[^0-9]/, "", b); s += a * b
        }
        END { print s + 0 }'
}

# ---- 2./3. the runs --------------------------------------------------------------------------
mkdir -p "$WORK"
# Total instructions of one run; $1 = GEN parameters.
count() {
    local out="$WORK/$board-n$1"
    # shellcheck disable=SC2086 # the runner is a command line
    printf 'GEN n=%s temperature=0 prompt=%s\nQUIT\n' "$1" "$PROMPT" |
        timeout "$QEMU_TIMEOUT" $runner "$elf" -icount shift=0 -plugin "$PLUGIN,inline=on" -d plugin \
            >"$out.out" 2>"$out.err" || fail "$board: QEMU failed, see $out.err"
    grep -qx "DONE $1" "$out.out" || fail "$board: no 'DONE $1' in $out.out"
    sed -n 's/^total insns: \([0-9]*\)$/\1/p' "$out.err" | tail -n1
}

rows=()
for board in "${BOARDS[@]}"; do
    toml="boards/$board/board.toml"
    [ -f "$toml" ] || fail "no board $board"
    target="$(board_value "$toml" target)"
    runner="$(board_value "$toml" runner)"
    core="$(board_value "$toml" core)"
    state="$(board_value "$toml" state)"
    levels="$(board_value "$toml" levels)"
    reserve="$(board_value "$toml" stack_reserve)"
    # The board's own model (`model = ...`, the micro:bit's test-sized one) unless MODEL is set.
    board_model="$(board_value "$toml" model)"
    MODEL="${MODEL_ARG:-${board_model:-models/ll-gdn-mcu16k-q8_0.gguf}}"
    macs=$(weight_macs "$MODEL")
    [ "$macs" -gt 0 ] || fail "no matrix tensors in $MODEL"
    acts="${ACTIVATIONS:-$(board_value "$toml" activations)}"
    echo "$board: building and counting" >&2
    LOGLINEAR_BOARD="$board" LOGLINEAR_MODEL="$MODEL" LOGLINEAR_LEVELS="" LOGLINEAR_STATE="" \
        LOGLINEAR_ACTIVATIONS="$ACTIVATIONS" LOGLINEAR_KERNEL="$KERNEL" LOGLINEAR_TRANSPORT="" \
        RUSTFLAGS="$(board_value "$toml" rustflags)" \
        cargo build --release -q --manifest-path firmware/Cargo.toml --target "$target" \
        --target-dir "$FW_TARGET_DIR"
    elf="$WORK/$board.elf"
    cp "$FW_TARGET_DIR/$target/release/loglinear-firmware" "$elf"
    i0=$(count 0)
    i1=$(count "$TOKENS")
    [ -n "$i0" ] && [ -n "$i1" ] || fail "$board: no 'total insns' line from the plugin"
    per_tok=$(((i1 - i0) / TOKENS))
    per_mac=$(awk -v a="$per_tok" -v b="$macs" 'BEGIN { printf "%.1f", a / b }')
    # shellcheck disable=SC2086
    peak=$(printf 'GEN n=%s temperature=0 prompt=%s\nSTATUS\nQUIT\n' "$TOKENS" "$PROMPT" |
        timeout "$QEMU_TIMEOUT" $runner "$elf" 2>/dev/null |
        sed -n 's/^STATUS .* stack_peak_bytes=\([0-9]*\).*/\1/p')
    kpath=$(sed -n 's/.*integer kernels \([a-z0-9-]*\).*/\1/p' "$WORK/$board-n0.err" | head -n1)
    rows+=("| $board | $core | $(basename "$MODEL") | $macs | ${acts:-f32} | ${kpath:-?} | $state | $levels | $i0 | $i1 | $per_tok | $per_mac | ${peak:-?} | ${reserve:-?} |")
done

echo
echo "Runs: \`GEN n=0\` and \`GEN n=$TOKENS\`, temperature 0, prompt \"$PROMPT\"."
echo
echo "| board | core | model | weight MACs / token | activations | integer kernels | state | levels | insns, n=0 | insns, n=$TOKENS | insns / token | insns / weight-MAC | stack peak B | stack reserve B |"
echo "| --- | --- | --- | ---: | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
printf '%s\n' "${rows[@]}"
