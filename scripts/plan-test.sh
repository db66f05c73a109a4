#!/usr/bin/env bash
# The memory planner against the linked firmware, and the firmware size snapshot.
#
#   bash scripts/plan-test.sh [BOARD...]            check (default: every QEMU board below)
#   bash scripts/plan-test.sh --update [BOARD...]   rewrite boards/<board>/size.txt
#
# For each board it builds firmware/ exactly as scripts/qemu-test.sh does (same flags and
# target dir, so after qemu-test.sh this is a no-op), reads the ELF's sections with `size -A`
# (or `llvm-size -A`) and checks:
#
# 0. the image would boot (`cargo xtask image-check`, xtask/src/image.rs): every loaded segment
#    in the board's memory regions, a valid vector table at the code memory's origin (Cortex-M)
#    or entry point (RISC-V).
# 1. planner vs ELF: `loglinear plan --board B --model M` reports the session arena that the
#    firmware links as `static ARENA`; the ELF's .bss + .data must lie within
#    [arena, arena + other statics] (the planner's "other statics" allowance, OTHER_STATICS in
#    planner/src/lib.rs, read from the report). And the code the ELF holds besides the model
#    (text + rodata + data − model bytes) must fit the planner's code estimate (the board's
#    firmware.code_reserve).
# 2. size snapshot (the RTIC way): text (code: .vector_table, .text, .init.rust, .eh_frame...),
#    rodata (model + constants), data and bss must match boards/<board>/size.txt: bss exactly
#    (it is the arena), the others within max(4096 B, 2 %). On a mismatch it prints a diff;
#    after an intended change run `bash scripts/plan-test.sh --update` and commit the
#    size.txt files (and the "Firmware sizes" table in BENCHMARKS.md).
# 3. a model that does not fit fails the firmware build with the planner's report: building
#    microbit (16 KiB RAM, 256 KiB flash) with the shipped model must fail, and the build's
#    stderr must hold every line of `loglinear plan --board microbit --model <shipped model>`
#    up to its verdict (the first line, which names the board.toml path as each found it, by
#    its start; the levels recommendation after the verdict is the CLI's alone).
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
FW_TARGET_DIR="$TARGET_DIR/firmware"
DEFAULT_MODEL="models/ll-gdn-mcu16k-q8_0.gguf" # unless the board.toml names its own `model`

UPDATE=0
if [ "${1:-}" = "--update" ]; then
    UPDATE=1
    shift
fi
BOARDS=("$@")
if [ "${#BOARDS[@]}" -eq 0 ]; then
    mapfile -t BOARDS < <(qemu_boards)
fi

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

command -v size >/dev/null 2>&1 || command -v llvm-size >/dev/null 2>&1 ||
    fail "neither size (binutils) nor llvm-size is installed"

for t in thumbv7em-none-eabihf riscv32imac-unknown-none-elf thumbv6m-none-eabi thumbv8m.main-none-eabihf; do
    rustup target list --installed 2>/dev/null | grep -qx "$t" || rustup target add "$t"
done

echo "building the host CLI"
cargo build --release -q -p loglinear-converter --bin loglinear
LOGLINEAR="$TARGET_DIR/release/loglinear"
make_board_models "$LOGLINEAR"

failed=0
for board in "${BOARDS[@]}"; do
    toml="boards/$board/board.toml"
    [ -f "$toml" ] || fail "no board $board ($toml missing)"
    target="$(board_value "$toml" target)"
    MODEL="$(board_value "$toml" model)"
    MODEL="${MODEL:-$DEFAULT_MODEL}"
    model_bytes=$(stat -c %s "$MODEL")
    echo
    echo "==== $board ($target) ===="
    LOGLINEAR_BOARD="$board" LOGLINEAR_MODEL="$MODEL" LOGLINEAR_LEVELS="" LOGLINEAR_STATE="" \
        RUSTFLAGS="$(board_value "$toml" rustflags)" \
        cargo build --release -q --manifest-path firmware/Cargo.toml --target "$target" \
        --target-dir "$FW_TARGET_DIR"
    elf="$FW_TARGET_DIR/$target/release/loglinear-firmware"
    # 0. the image would boot: segments in the board's memory, vector table or entry point
    cargo xtask image-check --board "$board" "$elf" || failed=1

    read -r text rodata data bss < <(elf_sizes "$elf")

    # 1. planner vs ELF
    plan_out="$("$LOGLINEAR" plan --board "$board" --model "$MODEL")" ||
        fail "$board: loglinear plan failed: $plan_out"
    arena=$(sed -n 's/^  session arena *\([0-9]*\) B.*/\1/p' <<<"$plan_out")
    code=$(sed -n 's/^  code estimate *\([0-9]*\) B.*/\1/p' <<<"$plan_out")
    other=$(sed -n 's/^  other statics *\([0-9]*\) B.*/\1/p' <<<"$plan_out")
    [ -n "$arena" ] && [ -n "$code" ] && [ -n "$other" ] ||
        fail "$board: no arena/code/other statics figure in the plan:
$plan_out"
    statics=$((bss + data))
    if [ "$statics" -lt "$arena" ] || [ "$statics" -gt $((arena + other)) ]; then
        echo "FAIL: $board: ELF .bss + .data = $statics B, planner arena = $arena B (allowed: arena .. arena + other statics $other B)" >&2
        failed=1
    else
        echo "  ok: planner RAM matches the ELF: .bss + .data = $statics B = arena $arena B + $((statics - arena)) B (other statics allowance $other B)"
    fi
    code_used=$((text + rodata + data - model_bytes))
    if [ "$code_used" -gt "$code" ]; then
        echo "FAIL: $board: code and constants take $code_used B of flash besides the model, more than the planner's code estimate $code B (firmware.code_reserve in $toml)" >&2
        failed=1
    else
        echo "  ok: flash besides the model $code_used B ≤ planner code estimate $code B"
    fi

    # 2. size snapshot
    size_snapshot "$board" "$elf" "$MODEL" "$UPDATE" "bash scripts/plan-test.sh --update $board" ||
        failed=1
done

# 3. A model that does not fit: the firmware build fails with the planner's report. Same flags
# and target dir as microbit's build above (its next build reruns the build script and
# recompiles the firmware crate alone: seconds).
echo
echo "==== microbit with the shipped model: the build must fail with the planner's report ===="
nofit="$TARGET_DIR/plan-test-nofit"
mkdir -p "$nofit"
rc=0
LOGLINEAR_BOARD=microbit LOGLINEAR_MODEL="$DEFAULT_MODEL" LOGLINEAR_LEVELS="" LOGLINEAR_STATE="" \
    cargo build --release -q --manifest-path firmware/Cargo.toml --target thumbv6m-none-eabi \
    --target-dir "$FW_TARGET_DIR" >"$nofit/build.out" 2>"$nofit/build.err" || rc=$?
rc_plan=0
"$LOGLINEAR" plan --board microbit --model "$DEFAULT_MODEL" >"$nofit/plan.out" 2>/dev/null || rc_plan=$?
if [ "$rc" -eq 0 ]; then
    echo "FAIL: the microbit firmware built with $DEFAULT_MODEL, which does not fit it" >&2
    failed=1
elif [ "$rc_plan" -eq 0 ] || ! grep -q '^verdict: does NOT fit' "$nofit/plan.out"; then
    echo "FAIL: loglinear plan says $DEFAULT_MODEL fits microbit:" >&2
    cat "$nofit/plan.out" >&2
    failed=1
else
    # Cargo indents a build script's stderr by two spaces.
    sed 's/^  //' "$nofit/build.err" >"$nofit/build.err.plain"
    missing=""
    first=$(head -n1 "$nofit/plan.out")
    grep -qF "${first%% (*} (" "$nofit/build.err.plain" || missing+="  $first"$'\n'
    while IFS= read -r line; do
        [ -z "$line" ] || grep -qxF -- "$line" "$nofit/build.err.plain" || missing+="  $line"$'\n'
    done < <(sed -n '2,/^verdict:/p' "$nofit/plan.out")
    if [ -n "$missing" ]; then
        echo "FAIL: the failed microbit build does not print the planner's report; missing lines:" >&2
        printf '%s' "$missing" >&2
        echo "build stderr:" >&2
        cat "$nofit/build.err" >&2
        failed=1
    else
        echo "  ok: the build fails (exit $rc) with the planner's report, $(wc -l <"$nofit/plan.out") lines, ending:"
        grep -E '^(  (flash|RAM) total|largest context|most levels|verdict)' "$nofit/plan.out" | sed 's/^ */    /'
    fi
fi

[ "$failed" -eq 0 ] || fail "plan-test: see above"
echo
echo "plan-test: all boards passed (${BOARDS[*]}), and a model that does not fit fails the build with the planner's report"
