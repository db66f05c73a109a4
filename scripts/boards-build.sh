#!/usr/bin/env bash
# Builds every hardware board profile (they cannot run here) and prints `size` of every ELF:
#
#   bash scripts/boards-build.sh [BOARD...]     (default: every board below)
#
#   * stm32h743, nrf52840, rp2040 (thumbv6m, with the `rp2040` feature: second-stage
#     bootloader), esp32c3 (riscv32imc): the firmware, with the model, state type and levels of
#     each boards/<board>/board.toml (`model = ...` or the shipped model), so build.rs's fit
#     check runs against the real memory map. Checks that `.bss` (the session arena) starts at
#     the board's [memory.ram] origin, and RP2040's 256-byte `.boot2` at 0x1000_0000, and that
#     the image would boot (`cargo xtask image-check`: segments in the memory map, the vector
#     table, the RP2040 second stage's CRC; not esp32c3, whose image is not bootable yet). Each is
#     built with the board's `transport` (all four: `uart`, their UART driver in
#     firmware/src/uart.rs, never run: there is no hardware here), and clippy checks the
#     firmware with each board's driver and features (-D warnings).
#   * linux-aarch64: a std build of loglinear-runtime and of the `loglinear` CLI for
#     aarch64-unknown-linux-gnu (linked with Debian's gcc-aarch64-linux-gnu).
#
# Installs what it needs on Debian 12 (the Rust targets; gcc-aarch64-linux-gnu and
# libc6-dev-arm64-cross with apt). probe-rs, the runner of real boards (their
# .cargo/config.toml), is neither installed nor run.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
# Own target dir: scripts/qemu-test.sh builds other boards into target/firmware, and the
# firmware's ELF path is the same for every board of one target.
FW_TARGET_DIR="$TARGET_DIR/boards-build"
WORK="$FW_TARGET_DIR/elf"
DEFAULT_MODEL="models/ll-gdn-mcu16k-q8_0.gguf"
AARCH64=aarch64-unknown-linux-gnu

BOARDS=("$@")
if [ "${#BOARDS[@]}" -eq 0 ]; then
    BOARDS=(stm32h743 nrf52840 rp2040 esp32c3 linux-aarch64)
fi

fail() {
    echo "boards-build: error: $*" >&2
    exit 1
}

# `origin` of a [memory.NAME] table, as a number.
region_origin() {
    local file="$1" name="$2"
    awk -v t="[memory.$name]" '
        index($0, t) == 1 { in_t = 1; next }
        /^\[/ { in_t = 0 }
        in_t && $1 == "origin" { v = $3; gsub("_", "", v); print v; exit }' "$file"
}

# --- setup ---------------------------------------------------------------------------------
targets=()
for board in "${BOARDS[@]}"; do
    toml="boards/$board/board.toml"
    [ -f "$toml" ] || fail "no board $board ($toml missing)"
    targets+=("$(board_value "$toml" target)")
done
installed="$(rustup target list --installed)"
missing=()
for t in $(printf '%s\n' "${targets[@]}" | sort -u); do
    grep -qx "$t" <<<"$installed" || missing+=("$t")
done
if [ "${#missing[@]}" -gt 0 ]; then
    rustup target add "${missing[@]}"
fi
if printf '%s\n' "${targets[@]}" | grep -qx "$AARCH64" &&
    { ! command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 ||
        [ ! -e /usr/aarch64-linux-gnu/lib/libc.so ]; }; then
    echo "installing gcc-aarch64-linux-gnu and libc6-dev-arm64-cross (linker for $AARCH64)"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        gcc-aarch64-linux-gnu libc6-dev-arm64-cross
fi
command -v size >/dev/null 2>&1 || fail "size (binutils) is missing"
mkdir -p "$WORK"

# The hardware boards' UART drivers and the `rp2040` feature (src/boot2.rs) are compiled only
# here: clippy them (scripts/qemu-test.sh covers the QEMU boards' configurations).
for board in "${BOARDS[@]}"; do
    toml="boards/$board/board.toml"
    [ "$(board_value "$toml" kind)" = hardware ] || continue
    t="$(board_value "$toml" target)"
    features="$(board_value "$toml" features)"
    m="$(board_value "$toml" model)"
    echo "firmware: cargo clippy --target $t${features:+ --features $features} -D warnings ($board, uart $(board_value "$toml" uart))"
    LOGLINEAR_BOARD="$board" LOGLINEAR_MODEL="${m:-$DEFAULT_MODEL}" LOGLINEAR_LEVELS="" \
        LOGLINEAR_STATE="" LOGLINEAR_TRANSPORT="" \
        cargo clippy --release -q --manifest-path firmware/Cargo.toml --target "$t" \
        --target-dir "$FW_TARGET_DIR" ${features:+--features "$features"} -- -D warnings
done

# --- boards --------------------------------------------------------------------------------
summary=()
for board in "${BOARDS[@]}"; do
    toml="boards/$board/board.toml"
    target="$(board_value "$toml" target)"
    kind="$(board_value "$toml" kind)"

    if [ "$kind" = "linux" ]; then
        linker="$(board_value "$toml" linker)"
        echo
        echo "==== $board: std build for $target (linker $linker) ===="
        cargo build --release -q -p loglinear-runtime --target "$target"
        env "CARGO_TARGET_$(tr 'a-z-' 'A-Z_' <<<"$target")_LINKER=$linker" \
            cargo build --release -q -p loglinear-converter --bin loglinear --target "$target"
        elf="$WORK/$board-loglinear"
        cp "$TARGET_DIR/$target/release/loglinear" "$elf"
        machine="$(LC_ALL=C readelf -h "$elf" | sed -n 's/^ *Machine: *//p')"
        [ "$machine" = "AArch64" ] || fail "$elf: machine is '$machine', not AArch64"
        echo "  loglinear-runtime rlib: $(ls "$TARGET_DIR/$target/release/"libloglinear_runtime.rlib)"
        echo "  loglinear CLI: $elf ($machine, $(stat -c %s "$elf") B)"
        size "$elf" | sed 's/^/  /'
        summary+=("$board: loglinear CLI $(stat -c %s "$elf") B ($machine)")
        continue
    fi

    model="$(board_value "$toml" model)"
    model="${model:-$DEFAULT_MODEL}"
    features="$(board_value "$toml" features)"
    state="$(board_value "$toml" state)"
    levels="$(board_value "$toml" levels)"
    chip="$(board_value "$toml" probe_rs_chip)"
    transport="$(board_value "$toml" transport)"
    transport="${transport:-semihosting}"
    [ "$transport" != uart ] || transport="uart $(board_value "$toml" uart)"
    [ -f "$model" ] || fail "$toml: model $model is missing"
    echo
    echo "==== $board ($chip): $target, $state state, $levels levels, model $model${features:+, features $features}, transport $transport ===="
    LOGLINEAR_BOARD="$board" LOGLINEAR_MODEL="$model" LOGLINEAR_LEVELS="" LOGLINEAR_STATE="" \
        LOGLINEAR_TRANSPORT="" \
        cargo build --release -q --manifest-path firmware/Cargo.toml --target "$target" \
        --target-dir "$FW_TARGET_DIR" ${features:+--features "$features"}
    elf="$WORK/$board.elf"
    cp "$FW_TARGET_DIR/$target/release/loglinear-firmware" "$elf"
    size "$elf" | sed 's/^/  /'
    sections="$(size -A "$elf")"
    awk '$1 ~ /^\.(boot2|vector_table|text|rodata|data|bss)$/ { printf "  %-14s %9d B at 0x%08x\n", $1, $2, $3 }' <<<"$sections"
    ram_origin=$(($(region_origin "$toml" ram)))
    bss_addr="$(awk '$1 == ".bss" { print $3 }' <<<"$sections")"
    [ "$((bss_addr))" -eq "$ram_origin" ] ||
        fail "$board: .bss (the arena) at $bss_addr, not at [memory.ram] origin $ram_origin"
    # The image would boot: segments in the board's memory, vector table, RP2040 boot2 CRC
    # (`cargo xtask image-check`). The ESP32-C3 image is a plain riscv-rt ELF that the ROM
    # bootloader would reject (no app image, docs/boards.md): nothing to check yet.
    if [ "$board" = esp32c3 ]; then
        echo "  not checked: the esp32c3 image is not bootable yet (docs/boards.md)"
    else
        cargo xtask image-check --board "$board" "$elf"
    fi
    if [ "$board" = rp2040 ]; then
        read -r b2_size b2_addr < <(awk '$1 == ".boot2" { print $2, $3 }' <<<"$sections")
        [ "${b2_size:-0}" -eq 256 ] && [ "$((b2_addr))" -eq $((0x10000000)) ] ||
            fail "rp2040: no 256-byte .boot2 at 0x10000000 (got ${b2_size:-none} at ${b2_addr:-none})"
    fi
    # A UART image uses no semihosting (firmware/build.rs): no `bkpt` / `ebreak` trap in its
    # code, so it runs on a board with no debug probe attached.
    if [ "${transport%% *}" = uart ] && command -v llvm-objdump >/dev/null 2>&1; then
        traps=$(llvm-objdump -d "$elf" | grep -cE '\s(bkpt|ebreak)\b' || true)
        [ "$traps" -eq 0 ] || fail "$board: $traps semihosting traps (bkpt/ebreak) in a UART image"
        echo "  ok: no semihosting traps (bkpt/ebreak) in the code"
    fi
    # Flash: everything loaded from it; RAM: .data + .bss (riscv-rt's .stack, the rest of the
    # RAM region, is left out, as in `size -A` above).
    read -r flash ram < <(awk '$1 ~ /^\.(boot2|vector_table|text|rodata|data)$/ { f += $2 }
        $1 ~ /^\.(data|bss)$/ { r += $2 } END { print f, r }' <<<"$sections")
    summary+=("$board: flash $flash B, RAM $ram B (.data + .bss; $state x $levels levels, $(basename "$model")), $transport")
done

echo
echo "boards-build: all boards built (probe-rs not run):"
printf '  %s\n' "${summary[@]}"
