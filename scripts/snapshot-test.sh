#!/usr/bin/env bash
# Session snapshots across a board and the host, under QEMU.
#
#   bash scripts/snapshot-test.sh [BOARD]      (default: mps2-an386)
#
# The firmware (semihosting transport) runs `GEN` (greedy), then `SNAP`, which sends its
# session as a runtime snapshot in `HEX` lines (docs/serial-protocol.md, *Snapshots*), then a
# second `GEN`. The host turns the hex back into a file and resumes it with
# `loglinear generate --resume`: its tokens must be the board's second GEN, token for token.
# The host's own snapshot of the same run (`--save-snapshot`) is compared with the board's:
# identical bytes mean the board's state is bit for bit the host's.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
FW_TARGET_DIR="$TARGET_DIR/firmware"
WORK="$TARGET_DIR/snapshot-test"
QEMU_TIMEOUT="${QEMU_TIMEOUT:-300}"
board="${1:-mps2-an386}"

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

toml="boards/$board/board.toml"
[ -f "$toml" ] || fail "no board $board ($toml missing)"
target="$(board_value "$toml" target)"
runner="$(board_value "$toml" runner)"
state="$(board_value "$toml" state)"
levels="$(board_value "$toml" levels)"
MODEL="$(board_value "$toml" model)"
MODEL="${MODEL:-models/ll-gdn-mcu-q8_0.gguf}"

bash "$ROOT/scripts/qemu-setup.sh"
mkdir -p "$WORK"
echo "building the host CLI and the $board firmware ($state state, $levels levels, $MODEL)"
cargo build --release -q -p loglinear-converter --bin loglinear
LOGLINEAR="$TARGET_DIR/release/loglinear"
LOGLINEAR_BOARD="$board" LOGLINEAR_MODEL="$MODEL" LOGLINEAR_LEVELS="" LOGLINEAR_STATE="" \
    LOGLINEAR_TRANSPORT="" \
    cargo build --release -q --manifest-path firmware/Cargo.toml --target "$target" \
    --target-dir "$FW_TARGET_DIR"
elf="$WORK/$board.elf"
cp "$FW_TARGET_DIR/$target/release/loglinear-firmware" "$elf"

n1=20 n2=16
rc=0
# shellcheck disable=SC2086 # the runner is a command line
printf 'GEN n=%d temperature=0 prompt=ROMEO:\\n\nSNAP\nGEN n=%d temperature=0\nQUIT\n' "$n1" "$n2" |
    timeout "$QEMU_TIMEOUT" $runner "$elf" >"$WORK/board.out" 2>"$WORK/board.err" || rc=$?
[ "$rc" -eq 0 ] || {
    cat "$WORK/board.err" >&2
    fail "$board: QEMU exited with $rc, output in $WORK/board.out"
}
grep -q '^OK SNAP$' "$WORK/board.out" || fail "$board: no OK SNAP (output in $WORK/board.out)"
grep '^HEX ' "$WORK/board.out" | cut -c5- | tr -d '\n' | xxd -r -p >"$WORK/board.snap"
want_len=$(sed -n 's/^SNAP bytes=\([0-9]*\) .*/\1/p' "$WORK/board.out")
[ "$(stat -c %s "$WORK/board.snap")" = "$want_len" ] ||
    fail "$board: SNAP said $want_len bytes, $(stat -c %s "$WORK/board.snap") arrived"
board_ids=$(grep '^TOK ' "$WORK/board.out" | tail -n "+$((n1 + 1))" | cut -d' ' -f2 | tr '\n' ' ' |
    sed 's/ $//')

# Board → host: resume the board's snapshot on the host.
"$LOGLINEAR" generate --model "$MODEL" --resume "$WORK/board.snap" -n "$n2" --temperature 0 \
    >"$WORK/host-resumed.out" 2>"$WORK/host-resumed.err" ||
    fail "host resume of the board's snapshot: $(cat "$WORK/host-resumed.err")"
n=$(stat -c %s "$WORK/host-resumed.out")
host_ids=$(head -c "$((n - 1))" "$WORK/host-resumed.out" | od -An -tu1 -v | tr -s ' \n' ' ' |
    sed 's/^ //; s/ $//')
[ "$host_ids" = "$board_ids" ] ||
    fail "$board: host resumed from the board's snapshot gives [$host_ids], the board [$board_ids]"
echo "  ok: board SNAP ($want_len bytes at t = $((7 + n1))) resumed on the host: $n2 greedy tokens equal the board's"

# The host's own snapshot of the same run: bit-identical state?
"$LOGLINEAR" generate --model "$MODEL" --prompt 'ROMEO:\n' -n "$n1" --temperature 0 \
    --state "$state" --levels "$levels" --save-snapshot "$WORK/host.snap" >/dev/null 2>&1
if cmp -s "$WORK/host.snap" "$WORK/board.snap"; then
    echo "  ok: the board's snapshot equals the host's byte for byte (state, conv, logits)"
else
    echo "  note: the board's snapshot differs from the host's in $(cmp -l "$WORK/host.snap" "$WORK/board.snap" | wc -l) bytes (float rounding differs across targets); tokens agree"
fi
