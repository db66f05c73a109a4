#!/usr/bin/env bash
# The integer matvec kernels on the boards themselves, under QEMU: every kernel path a board's
# core runs (portable; arm-dsp on the Cortex-M4F/M7/M33/M55, helium on the M55, arm-m0 on the
# Cortex-M0) against `portable`, bit for bit, for Q8_0 and Q4_0 weights on random shapes
# (firmware/src/bin/kernel_check.rs). Called by scripts/qemu-test.sh; a few seconds.
#
#   bash scripts/kernel-check.sh [BOARD...]           (default: every Arm QEMU board)
#   CASES=2000 bash scripts/kernel-check.sh           (random cases per board; default 400)
#   bash scripts/kernel-check.sh --bench [BOARD...]   instructions per MAC of the kernels alone
#
# --bench counts instructions with QEMU's insn plugin (built by scripts/count-instructions.sh
# --plugin-only) for `bench KIND PATH ROWS BLOCKS REPS` and REPS = 0, and prints
# (difference) / (REPS · ROWS · 32 · BLOCKS) per kernel path and weight type: the matvec
# itself, activation widening and row loop included, the quantization of the input excluded.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
FW_TARGET_DIR="$TARGET_DIR/firmware-kernel-check"
WORK="$TARGET_DIR/kernel-check"
PLUGIN="$TARGET_DIR/qemu-plugin/libinsn.so"
CASES="${CASES:-400}"
QEMU_TIMEOUT="${QEMU_TIMEOUT:-300}"

BENCH=0
if [ "${1:-}" = --bench ]; then
    BENCH=1
    shift
fi
BOARDS=("$@")
if [ "${#BOARDS[@]}" -eq 0 ]; then
    for board in $(qemu_boards); do
        case "$(board_value "boards/$board/board.toml" target)" in
        thumb*) BOARDS+=("$board") ;;
        esac
    done
fi

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

bash "$ROOT/scripts/qemu-setup.sh" >/dev/null
if [ "$BENCH" = 1 ] && [ ! -f "$PLUGIN" ]; then
    bash "$ROOT/scripts/count-instructions.sh" --plugin-only
fi
mkdir -p "$WORK"

# Instructions of one run of the request $1 (with the plugin).
count() {
    # shellcheck disable=SC2086 # the runner is a command line
    printf '%s\n' "$1" |
        timeout "$QEMU_TIMEOUT" $runner "$elf" -icount shift=0 -plugin "$PLUGIN,inline=on" -d plugin \
            >"$WORK/bench.out" 2>"$WORK/bench.err" || fail "$board: '$1' failed: $(cat "$WORK/bench.out")"
    grep -q '^DONE' "$WORK/bench.out" || fail "$board: '$1': $(cat "$WORK/bench.out")"
    sed -n 's/^total insns: \([0-9]*\)$/\1/p' "$WORK/bench.err" | tail -n1
}

rows=()
for board in "${BOARDS[@]}"; do
    toml="boards/$board/board.toml"
    [ -f "$toml" ] || fail "no board $board"
    target="$(board_value "$toml" target)"
    runner="$(board_value "$toml" runner)"
    model="$(board_value "$toml" model)"
    LOGLINEAR_BOARD="$board" LOGLINEAR_MODEL="${model:-}" LOGLINEAR_LEVELS="" LOGLINEAR_STATE="" \
        LOGLINEAR_TRANSPORT=semihosting RUSTFLAGS="$(board_value "$toml" rustflags)" \
        cargo build --release -q --manifest-path firmware/Cargo.toml --target "$target" \
        --target-dir "$FW_TARGET_DIR" --features kernel-check --bin kernel-check
    elf="$WORK/$board.elf"
    cp "$FW_TARGET_DIR/$target/release/kernel-check" "$elf"
    if [ "$BENCH" = 0 ]; then
        out="$WORK/$board.out"
        # shellcheck disable=SC2086 # the runner is a command line
        printf 'check %d %d\n' "$CASES" "$RANDOM" | timeout "$QEMU_TIMEOUT" $runner "$elf" >"$out" 2>&1 ||
            {
                cat "$out" >&2
                fail "$board: kernel check failed"
            }
        grep -qx PASS "$out" || fail "$board: no PASS: $(cat "$out")"
        sed "s/^/  $board: /" "$out" | grep -v ': PASS$'
        continue
    fi
    # Kernel-only instructions per MAC on two shapes of the shipped model (ffn_down: 128 rows
    # × 512 columns; attn_v / attn_gate: 256 × 128), REPS matvecs minus none; 8 × 256 on the
    # micro:bit's 16 KiB.
    if [ "$target" = thumbv6m-none-eabi ]; then
        shapes=("8 8") paths=(portable arm-m0)
    else
        shapes=("128 16" "256 4") paths=(portable arm-dsp)
        # Helium on the cores that have it (the kernel-check binary refuses an unavailable path).
        case "$(board_value "$toml" core)" in
        cortex-m55 | cortex-m85) paths+=(helium) ;;
        esac
    fi
    reps=10
    for shape in "${shapes[@]}"; do
        read -r r b <<<"$shape"
        for path in "${paths[@]}"; do
            for kind in q8_0 q4_0; do
                i0=$(count "bench $kind $path $r $b 0")
                i1=$(count "bench $kind $path $r $b $reps")
                macs=$((reps * r * b * 32))
                per=$(awk -v a="$((i1 - i0))" -v m="$macs" 'BEGIN { printf "%.3f", a / m }')
                rows+=("| $board | $(board_value "$toml" core) | $path | $kind | $r × $((b * 32)) | $reps | $((i1 - i0)) | $per |")
            done
        done
    done
done

if [ "$BENCH" = 1 ]; then
    echo
    echo "| board | core | kernel path | weights | matrix | reps | instructions | instructions / MAC |"
    echo "| --- | --- | --- | --- | --- | ---: | ---: | ---: |"
    printf '%s\n' "${rows[@]}"
else
    echo "kernel-check: all paths bit-identical to portable on ${BOARDS[*]}"
fi
