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
#
# Then the board's A/B snapshot store (boards with a `[snapshot]` region): in one QEMU run,
# (a) SAVE, RESET, LOAD, then GEN equals the uninterrupted run; (c) a RESTORE upload cut short by
# another request and a corrupt one (a flipped byte: CRC) get ERR, and LOAD still gives the
# previous snapshot; (d) two SAVEs, LOAD gives the newer; (b) the host's `--save-snapshot`
# uploaded with RESTORE continues exactly as the host's `--resume`. Last, the same upload and a
# SNAP download through `loglinear serial --restore FILE --snap FILE`.
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
MODEL="${MODEL:-models/ll-gdn-mcu16k-q8_0.gguf}"

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

# --- The board's A/B snapshot store: SAVE, LOAD, RESTORE (docs/serial-protocol.md) ---------
# One QEMU run: the store (the PSRAM region of board.toml's [snapshot]) lives as long as the
# machine. `gen_blocks` prints the token ids of each GEN of a transcript, one GEN a line.
gen_blocks() {
    awk '/^TOK /{ids = ids (ids == "" ? "" : " ") $2} /^DONE /{print ids; ids = ""}' "$1"
}
hex_lines() { xxd -p -c 64 "$1" | sed 's/^/HEX /'; }
# The host's snapshot and a copy with one byte of its body flipped (CRC mismatch).
snap_len=$(stat -c %s "$WORK/host.snap")
cp "$WORK/host.snap" "$WORK/bad.snap"
at=$((snap_len / 2))
old=$(od -An -tu1 -j "$at" -N1 "$WORK/bad.snap" | tr -d ' ')
# shellcheck disable=SC2059 # the format is the escaped byte
printf "\\x$(printf %02x $((old ^ 0x5a)))" | dd of="$WORK/bad.snap" bs=1 seek="$at" conv=notrunc status=none
hex_lines "$WORK/host.snap" >"$WORK/host.hex"
hex_lines "$WORK/bad.snap" >"$WORK/bad.hex"
half=$(($(wc -l <"$WORK/host.hex") / 2))
n3=5
{
    printf 'GEN n=%d temperature=0 prompt=ROMEO:\\n\n' "$n1"      # block 1
    printf 'SAVE\n'                                                 # seq 1 at t = 7 + n1
    printf 'GEN n=%d temperature=0\n' "$n2"                         # block 2: uninterrupted
    printf 'RESET\nLOAD\n'
    printf 'GEN n=%d temperature=0\n' "$n2"                         # block 3: = block 2 (a)
    printf 'RESTORE bytes=%d\n' "$snap_len"                         # cut short (c)
    sed -n "1,${half}p" "$WORK/host.hex"
    printf 'STATUS\n'
    printf 'RESTORE bytes=%d\n' "$snap_len"                         # corrupt (c)
    cat "$WORK/bad.hex"
    printf 'END\nRESET\nLOAD\n'                                     # still seq 1 (c)
    printf 'GEN n=%d temperature=0\n' "$n2"                         # block 4: = block 2
    printf 'SAVE\nGEN n=%d temperature=0\nSAVE\n' "$n3"             # block 5; seq 2, seq 3 (d)
    printf 'GEN n=%d temperature=0\n' "$n2"                         # block 6: after seq 3
    printf 'RESET\nLOAD\n'                                          # seq 3 (d)
    printf 'GEN n=%d temperature=0\n' "$n2"                         # block 7: = block 6
    printf 'RESTORE bytes=%d\n' "$snap_len"                         # host → board (b)
    cat "$WORK/host.hex"
    printf 'END\n'
    printf 'GEN n=%d temperature=0\n' "$n2"                         # block 8: = host --resume
    printf 'STATUS\nQUIT\n'
} >"$WORK/store.in"
rc=0
# shellcheck disable=SC2086 # the runner is a command line
timeout "$QEMU_TIMEOUT" $runner "$elf" <"$WORK/store.in" >"$WORK/store.out" 2>"$WORK/store.err" || rc=$?
[ "$rc" -eq 0 ] || {
    cat "$WORK/store.err" >&2
    fail "$board: QEMU exited with $rc (store test), output in $WORK/store.out"
}
mapfile -t blocks < <(gen_blocks "$WORK/store.out")
[ "${#blocks[@]}" -eq 8 ] || fail "$board: ${#blocks[@]} GEN replies, want 8 ($WORK/store.out)"
replies=$(grep -v '^TOK \|^DONE \|^READY \|^\[' "$WORK/store.out")
expect_reply() { # the k-th reply of a kind matches a pattern
    local k="$1" prefix="$2" pattern="$3" got
    got=$(grep "^$prefix" <<<"$replies" | sed -n "${k}p")
    [[ "$got" =~ $pattern ]] || fail "$board: reply $k of $prefix is [$got], want /$pattern/ ($WORK/store.out)"
}
t1=$((7 + n1)) t3=$((7 + n1 + n2 + n3))
expect_reply 1 SAVED "^SAVED seq=1 slot=A bytes=[0-9]+ t=$t1\$"
expect_reply 1 LOADED "^LOADED seq=1 slot=A bytes=[0-9]+ t=$t1\$"
[ "${blocks[2]}" = "${blocks[1]}" ] ||
    fail "$board: after SAVE, RESET, LOAD the board gives [${blocks[2]}], uninterrupted [${blocks[1]}]"
echo "  ok (a): board SAVE (t = $t1), RESET, LOAD: $n2 greedy tokens equal the uninterrupted run"
expect_reply 1 "ERR" "^ERR 5 RESTORE: upload cut short after [0-9]+ bytes"
expect_reply 1 STATUS "^STATUS tokens=$((t1 + n2)) "
expect_reply 2 "ERR" "^ERR 7 RESTORE: corrupt: CRC mismatch"
expect_reply 2 LOADED "^LOADED seq=1 slot=A bytes=[0-9]+ t=$t1\$"
[ "${blocks[3]}" = "${blocks[1]}" ] || fail "$board: LOAD after the bad uploads gives [${blocks[3]}]"
echo "  ok (c): a RESTORE cut short (then STATUS runs) and a corrupt one (CRC): ERR, LOAD still gives seq 1"
expect_reply 2 SAVED "^SAVED seq=2 slot=B "
expect_reply 3 SAVED "^SAVED seq=3 slot=A bytes=[0-9]+ t=$t3\$"
expect_reply 3 LOADED "^LOADED seq=3 slot=A bytes=[0-9]+ t=$t3\$"
[ "${blocks[6]}" = "${blocks[5]}" ] || fail "$board: LOAD of seq 3 gives [${blocks[6]}], want [${blocks[5]}]"
echo "  ok (d): SAVE twice, LOAD gives the newer (seq 3, t = $t3) and continues it"
expect_reply 1 RESTORED "^RESTORED seq=4 slot=B bytes=$snap_len t=$t1\$"
"$LOGLINEAR" generate --model "$MODEL" --resume "$WORK/host.snap" -n "$n2" --temperature 0 \
    >"$WORK/host-resumed2.out" 2>"$WORK/host-resumed2.err" ||
    fail "host resume of its own snapshot: $(cat "$WORK/host-resumed2.err")"
n=$(stat -c %s "$WORK/host-resumed2.out")
host_ids=$(head -c "$((n - 1))" "$WORK/host-resumed2.out" | od -An -tu1 -v | tr -s ' \n' ' ' |
    sed 's/^ //; s/ $//')
[ "${blocks[7]}" = "$host_ids" ] ||
    fail "$board: after RESTORE of the host's snapshot the board gives [${blocks[7]}], the host's --resume [$host_ids]"
echo "  ok (b): host --save-snapshot ($snap_len bytes) uploaded with RESTORE: the board's $n2 greedy tokens equal the host's --resume"
echo "  stack: $(grep -o 'stack_peak_bytes=[0-9]*' "$WORK/store.out" | tail -n1) after SAVE/LOAD/RESTORE"

# The same round trip with the host CLI: `loglinear serial --restore` uploads the host's
# snapshot, the board continues it, and `--snap` fetches the board's session back.
"$LOGLINEAR" serial --qemu-board "$board" --elf "$elf" --restore "$WORK/host.snap" -n "$n2" \
    --temperature 0 --snap "$WORK/cli.snap" >"$WORK/cli.out" 2>"$WORK/cli.err" ||
    fail "loglinear serial --restore/--snap: $(cat "$WORK/cli.err")"
cli_ids=$(head -c "$(($(stat -c %s "$WORK/cli.out") - 1))" "$WORK/cli.out" | od -An -tu1 -v |
    tr -s ' \n' ' ' | sed 's/^ //; s/ $//')
[ "$cli_ids" = "$host_ids" ] ||
    fail "$board: loglinear serial --restore gives [$cli_ids], the host's --resume [$host_ids]"
"$LOGLINEAR" generate --model "$MODEL" --resume "$WORK/host.snap" -n "$n2" --temperature 0 \
    --save-snapshot "$WORK/host-after.snap" >/dev/null 2>&1 ||
    fail "host --resume --save-snapshot failed"
echo "  ok: loglinear serial --restore FILE --snap FILE: the board continues the host's snapshot ($n2 tokens equal)"
if cmp -s "$WORK/cli.snap" "$WORK/host-after.snap"; then
    echo "  ok: the board's snapshot fetched with --snap equals the host's after the same $n2 tokens"
else
    echo "  note: the snapshot fetched with --snap differs from the host's in $(cmp -l "$WORK/cli.snap" "$WORK/host-after.snap" | wc -l) bytes (float rounding differs across targets); tokens agree"
fi
