#!/usr/bin/env bash
# Firmware under QEMU, token for token against the host runtime.
#
#   bash scripts/qemu-test.sh [BOARD...]      (default: every QEMU board below)
#
# For each QEMU board in boards/ it builds firmware/ for the board's target (the board's levels
# and state type from its board.toml), runs it under QEMU with semihosting, feeds it requests on
# semihosting stdin, and checks that the text and token ids it prints are exactly what the host
# `loglinear generate` prints for the same model file, prompt, sampler settings, seed, levels
# and state type, and that it reports the same state bytes. A malformed request must end the
# run with exit code 2. Installs QEMU and the targets first if missing (scripts/qemu-setup.sh),
# and checks the firmware crate's formatting and clippy (it is outside the main workspace).
# It prints the QEMU wall time of every run and `size` of every ELF.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
FW_TARGET_DIR="$TARGET_DIR/firmware"
WORK="$TARGET_DIR/qemu-test"
MODEL="models/ll-gdn-mcu-q8_0.gguf"
# Seconds one QEMU run may take before it counts as hung (the slowest, riscv-virt, needs ~20 s).
QEMU_TIMEOUT="${QEMU_TIMEOUT:-120}"

BOARDS=("$@")
if [ "${#BOARDS[@]}" -eq 0 ]; then
    BOARDS=(mps2-an386 mps2-an500 riscv-virt)
fi

# Requests: "firmware request line|host CLI arguments". The same `\n` escapes work in both.
# Keep them short: every token costs ~0.4 s on riscv-virt (soft float under TCG).
CASES=(
    "n=16 temperature=0 prompt=JULIET:\n|--prompt JULIET:\n -n 16 --temperature 0"
    "n=24 temperature=0.8 seed=7 top_k=40 top_p=0.95 prompt=ROMEO:\n|--prompt ROMEO:\n -n 24 --temperature 0.8 --seed 7 --top-k 40 --top-p 0.95"
)

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

# board.toml value of a top-level or [firmware] key (the files keep `key = value` one per line).
board_value() {
    local file="$1" key="$2"
    sed -n "s/^${key}[[:space:]]*=[[:space:]]*\"\{0,1\}\([^\"#]*\)\"\{0,1\}.*/\1/p" "$file" | head -n1 |
        sed 's/[[:space:]]*$//'
}

bash "$ROOT/scripts/qemu-setup.sh"
mkdir -p "$WORK"

echo "building the host CLI"
cargo build --release -q -p loglinear-converter --bin loglinear
LOGLINEAR="$TARGET_DIR/release/loglinear"

# firmware/ is not a workspace member, so the workspace's fmt and clippy steps do not see it.
echo "firmware: cargo fmt --check"
cargo fmt --manifest-path firmware/Cargo.toml -- --check
for t in thumbv7em-none-eabihf riscv32imac-unknown-none-elf; do
    echo "firmware: cargo clippy --target $t -D warnings"
    LOGLINEAR_BOARD="" LOGLINEAR_MODEL="$MODEL" LOGLINEAR_LEVELS="" LOGLINEAR_STATE="" \
        cargo clippy --release -q --manifest-path firmware/Cargo.toml --target "$t" \
        --target-dir "$FW_TARGET_DIR" -- -D warnings
done

for board in "${BOARDS[@]}"; do
    toml="boards/$board/board.toml"
    [ -f "$toml" ] || fail "no board $board ($toml missing)"
    target="$(board_value "$toml" target)"
    runner="$(board_value "$toml" runner)"
    state="$(board_value "$toml" state)"
    levels="$(board_value "$toml" levels)"
    [ -n "$target" ] && [ -n "$runner" ] && [ -n "$state" ] && [ -n "$levels" ] ||
        fail "$toml: target, runner, state or levels missing"

    echo
    echo "==== $board: $target, $state state, $levels levels ===="
    LOGLINEAR_BOARD="$board" LOGLINEAR_MODEL="$MODEL" LOGLINEAR_LEVELS="" LOGLINEAR_STATE="" \
        cargo build --release -q --manifest-path firmware/Cargo.toml --target "$target" \
        --target-dir "$FW_TARGET_DIR"
    elf="$WORK/$board.elf"
    cp "$FW_TARGET_DIR/$target/release/loglinear-firmware" "$elf"
    if command -v size >/dev/null 2>&1; then
        # .bss is the session arena plus small statics; riscv-rt's .stack (the rest of RAM) is
        # left out of this list.
        size -A "$elf" | awk '$1 ~ /^\.(vector_table|text|rodata|data|bss)$/ { printf "  %-14s %9d B\n", $1, $2 }'
    fi

    i=0
    for case in "${CASES[@]}"; do
        i=$((i + 1))
        request="${case%%|*}"
        # shellcheck disable=SC2206 # word splitting of the CLI arguments is intended
        host_args=(${case#*|})
        host_out="$WORK/$board-$i.host.out"
        fw_out="$WORK/$board-$i.fw.out"
        fw_err="$WORK/$board-$i.fw.err"

        "$LOGLINEAR" generate --model "$MODEL" "${host_args[@]}" --levels "$levels" \
            --state "$state" >"$host_out" 2>"$WORK/$board-$i.host.err"

        start=$(date +%s%N)
        rc=0
        # shellcheck disable=SC2086 # the runner is a command line
        printf '%s\n' "$request" | timeout "$QEMU_TIMEOUT" $runner "$elf" >"$fw_out" 2>"$fw_err" ||
            rc=$?
        ms=$((($(date +%s%N) - start) / 1000000))
        [ "$rc" -eq 0 ] || {
            cat "$fw_err" >&2
            fail "$board case $i: QEMU exited with $rc (124 = timeout after ${QEMU_TIMEOUT}s)"
        }

        # Text: the host prints prompt + generated text + "\n"; the firmware the same bytes,
        # then its `tokens:` and `status:` lines.
        n=$(stat -c %s "$host_out")
        cmp -s <(head -c "$n" "$fw_out") "$host_out" || {
            echo "host:" >&2
            cat "$host_out" >&2
            echo "firmware:" >&2
            cat "$fw_out" >&2
            fail "$board case $i: generated text differs from the host"
        }
        # Token ids: the host's generated bytes (byte-level vocabulary: id = byte).
        prompt_len=$(grep -o 'prompt=[0-9]*' "$fw_out" | cut -d= -f2)
        host_ids=$(head -c "$((n - 1))" "$host_out" | tail -c "+$((prompt_len + 1))" |
            od -An -tu1 -v | tr -s ' \n' ' ' | sed 's/^ //; s/ $//')
        fw_ids=$(sed -n 's/^tokens: *//p' "$fw_out")
        [ "$host_ids" = "$fw_ids" ] || fail "$board case $i: token ids differ
  host:     $host_ids
  firmware: $fw_ids"
        # State bytes: the host's stderr line "... state L B live / A B allocated]".
        host_state=$(sed -n 's/.*state \([0-9]*\) B live \/ \([0-9]*\) B allocated.*/\1 \2/p' \
            "$WORK/$board-$i.host.err")
        fw_state=$(sed -n 's/.*state_live_bytes=\([0-9]*\) state_allocated_bytes=\([0-9]*\).*/\1 \2/p' \
            "$fw_out")
        [ -n "$host_state" ] && [ "$host_state" = "$fw_state" ] ||
            fail "$board case $i: state bytes differ (host '$host_state', firmware '$fw_state')"
        ntok=$(wc -w <<<"$fw_ids")
        printf '  ok: case %d, %2d tokens identical to the host, QEMU %d.%01d s  [%s]\n' \
            "$i" "$ntok" "$((ms / 1000))" "$((ms % 1000 / 100))" "$request"
        sed -n 's/^status: /      status: /p' "$fw_out"
    done

    # Malformed requests are refused with exit code 2 and a message, not a guess.
    for bad in "n=4 colour=blue|unknown key colour" "levels=16|levels=16 but this image has room for $levels" \
        "n=4 temperature=hot|bad value for temperature"; do
        rc=0
        # shellcheck disable=SC2086
        printf '%s\n' "${bad%%|*}" | timeout "$QEMU_TIMEOUT" $runner "$elf" >"$WORK/$board-bad.out" \
            2>"$WORK/$board-bad.err" || rc=$?
        [ "$rc" -eq 2 ] || fail "$board: request '${bad%%|*}' gave exit code $rc, expected 2"
        grep -qF "${bad#*|}" "$WORK/$board-bad.err" ||
            fail "$board: request '${bad%%|*}': no '${bad#*|}' on stderr"
        echo "  ok: bad request refused, exit 2: $(grep -o 'request: .*' "$WORK/$board-bad.err")"
    done
done

echo
echo "qemu-test: all boards passed (${BOARDS[*]})"
