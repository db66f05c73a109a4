#!/usr/bin/env bash
# Builds every hardware board profile (they cannot run here) and prints `size` of every ELF:
#
#   bash scripts/boards-build.sh [BOARD...]     (default: every board below)
#   bash scripts/boards-build.sh --update [BOARD...]   rewrite the boards' size.txt
#
#   * stm32h743, nrf52840, rp2040, esp32c3: each board's own crate (boards/<board>/Cargo.toml,
#     on its vendor's HAL: embassy-stm32, embassy-nrf, embassy-rp, esp-hal), built from its
#     folder, with the model, state type and levels of its board.toml, so firmware/build.rs's
#     fit check runs against the real memory map. Checks that `.bss` (the session arena) lies in
#     the board's [memory.ram], RP2040's 256-byte `.boot2` at 0x1000_0000, that the image has no
#     semihosting trap (it must run without a probe), and that it would boot (`cargo xtask
#     image-check`: segments in the memory map, the vector table, the RP2040 second stage's
#     CRC). `cargo fmt --check` and clippy (-D warnings) check every board crate, and the
#     firmware library as they build it. Each image's sizes must match boards/<board>/size.txt
#     (bss exactly, the others within max(4 KiB, 2 %); scripts/lib.sh, as for the QEMU boards).
#   * linux-aarch64: a std build of loglinear-runtime and of the `loglinear` CLI for
#     aarch64-unknown-linux-gnu (linked with Debian's gcc-aarch64-linux-gnu).
#   * for each hardware board, its runner (board.toml and .cargo/config.toml agree) names a
#     chip that the tool itself lists: `probe-rs chip info`, `espflash flash --chip` values.
#   * rp2040: elf2uf2-rs writes the UF2 file, and `cargo xtask uf2-check` checks what it would
#     write to flash (vector table, second stage's CRC). esp32c3: `espflash save-image` writes
#     the app image, and `cargo xtask esp-image` reads it back (header, segments, checksum,
#     SHA-256, app descriptor).
#
# Installs what it needs on Debian 12: the Rust targets; gcc-aarch64-linux-gnu,
# libc6-dev-arm64-cross and libudev-dev with apt; espflash, elf2uf2-rs and probe-rs-tools with
# cargo install. Nothing is flashed: no board is attached here.
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

UPDATE=0
if [ "${1:-}" = "--update" ]; then
    UPDATE=1
    shift
fi
BOARDS=("$@")
if [ "${#BOARDS[@]}" -eq 0 ]; then
    BOARDS=(stm32h743 nrf52840 rp2040 esp32c3 linux-aarch64)
fi

fail() {
    echo "boards-build: error: $*" >&2
    exit 1
}

# `origin` / `length` of a [memory.NAME] table, as a number.
region_key() {
    local file="$1" name="$2" key="$3"
    awk -v t="[memory.$name]" -v k="$key" '
        index($0, t) == 1 { in_t = 1; next }
        /^\[/ { in_t = 0 }
        in_t && $1 == k { v = $3; gsub("_", "", v); print v; exit }' "$file"
}
region_origin() { region_key "$1" "$2" origin; }
region_length() { region_key "$1" "$2" length; }

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
# The boards' tools, at fixed versions (cargo install, a few minutes each on a fresh machine):
# espflash turns the ESP32-C3 ELF into the app image its bootloader boots, elf2uf2-rs the RP2040
# ELF into the UF2 file of its BOOTSEL drive, and probe-rs (the other boards' runner) lists the
# chips it knows. Each flashes boards too; no board is attached here.
TOOLS=("espflash 4.7.0 espflash" "elf2uf2-rs 2.2.0 elf2uf2-rs" "probe-rs 0.32.0 probe-rs-tools")
for tool in "${TOOLS[@]}"; do
    read -r bin version crate <<<"$tool"
    command -v "$bin" >/dev/null 2>&1 && cargo install --list | grep -qx "$crate v$version:" &&
        continue
    if ! pkg-config --exists libudev 2>/dev/null; then
        echo "installing libudev-dev (the tools' serial and USB access)"
        as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
            libudev-dev pkg-config
    fi
    echo "installing $crate $version (cargo install)"
    cargo install --locked --quiet "$crate@$version"
done
mkdir -p "$WORK"

# A HAL board crate (boards/<board>/Cargo.toml: embassy or esp-hal) uses its board's model; the
# ones converted at test time (target/models/, scripts/lib.sh) need the host CLI.
for board in "${BOARDS[@]}"; do
    m="$(board_value "boards/$board/board.toml" model)"
    if [ "${m#target/models/}" != "$m" ]; then
        echo "building the host CLI (to convert $m)"
        cargo build --release -q -p loglinear-converter --bin loglinear
        make_board_models "$TARGET_DIR/release/loglinear"
        break
    fi
done

# Clippy, -D warnings: the firmware library as the HAL board crates build it (feature `link`,
# defmt over RTT), each HAL board crate (from its folder, whose .cargo/config.toml names the
# target and the board), and the firmware package with the UART drivers of the hardware boards
# without one (scripts/qemu-test.sh covers the QEMU boards' configurations).
echo "firmware (library, features link + defmt-rtt): cargo clippy -D warnings"
LOGLINEAR_BOARD=stm32h743 LOGLINEAR_MODEL="" LOGLINEAR_LEVELS="" LOGLINEAR_STATE="" \
    LOGLINEAR_TRANSPORT="" \
    cargo clippy --release -q --manifest-path firmware/Cargo.toml --lib \
    --target thumbv7em-none-eabihf --target-dir "$FW_TARGET_DIR" --no-default-features \
    --features link,defmt-rtt -- -D warnings
for board in "${BOARDS[@]}"; do
    toml="boards/$board/board.toml"
    [ "$(board_value "$toml" kind)" = hardware ] || continue
    t="$(board_value "$toml" target)"
    if [ -f "boards/$board/Cargo.toml" ]; then
        echo "boards/$board: cargo fmt --check, cargo clippy -D warnings"
        (cd "boards/$board" && cargo fmt --check &&
            LOGLINEAR_TRANSPORT="" cargo clippy --release -q --target-dir "$FW_TARGET_DIR" \
                -- -D warnings)
        continue
    fi
    m="$(board_value "$toml" model)"
    echo "firmware: cargo clippy --target $t -D warnings ($board, uart $(board_value "$toml" uart))"
    LOGLINEAR_BOARD="$board" LOGLINEAR_MODEL="${m:-$DEFAULT_MODEL}" LOGLINEAR_LEVELS="" \
        LOGLINEAR_STATE="" LOGLINEAR_TRANSPORT="" \
        cargo clippy --release -q --manifest-path firmware/Cargo.toml --target "$t" \
        --target-dir "$FW_TARGET_DIR" -- -D warnings
done

# --- runners --------------------------------------------------------------------------------
# `cargo run` in a board's folder runs its .cargo/config.toml runner, which must be board.toml's
# and must name a chip its tool knows: probe-rs's own target list (`probe-rs chip info`),
# espflash's (the values of `espflash flash --chip`). board.toml's `probe_rs_chip` too.
for board in "${BOARDS[@]}"; do
    toml="boards/$board/board.toml"
    [ "$(board_value "$toml" kind)" = hardware ] || continue
    runner="$(board_value "$toml" runner)"
    cargo_runner="$(board_value "boards/$board/.cargo/config.toml" runner)"
    [ "$runner" = "$cargo_runner" ] ||
        fail "$board: .cargo/config.toml runs '$cargo_runner', board.toml says '$runner'"
    chips=("probe-rs $(board_value "$toml" probe_rs_chip)")
    case "$runner" in
    "probe-rs run --chip "*) chips+=("probe-rs ${runner#probe-rs run --chip }") ;;
    "espflash flash --chip "*) read -r _ _ _ chip _ <<<"$runner" && chips+=("espflash $chip") ;;
    *) fail "$board: runner '$runner' is neither probe-rs nor espflash" ;;
    esac
    for entry in "${chips[@]}"; do
        read -r tool chip <<<"$entry"
        if [ "$tool" = probe-rs ]; then
            probe-rs chip info "$chip" >/dev/null 2>&1 ||
                fail "$board: probe-rs does not know chip '$chip' (probe-rs chip list)"
        else
            espflash flash --help | grep -qE "^ +- $chip: " ||
                fail "$board: espflash does not know chip '$chip' (espflash flash --help)"
        fi
        echo "$board: $tool knows chip $chip"
    done
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
    state="$(board_value "$toml" state)"
    levels="$(board_value "$toml" levels)"
    chip="$(board_value "$toml" probe_rs_chip)"
    transport="$(board_value "$toml" transport)"
    transport="${transport:-semihosting}"
    [ -f "$model" ] || fail "$toml: model $model is missing"
    elf="$WORK/$board.elf"
    echo
    if [ -f "boards/$board/Cargo.toml" ]; then
        echo "==== $board ($chip): its HAL crate boards/$board, $target, $state state, $levels levels, model $model, transport $transport ===="
        (cd "boards/$board" && LOGLINEAR_TRANSPORT="" cargo build --release -q \
            --target-dir "$FW_TARGET_DIR")
        cp "$FW_TARGET_DIR/$target/release/loglinear-$board" "$elf"
    else
        [ "$transport" != uart ] || transport="uart $(board_value "$toml" uart)"
        echo "==== $board ($chip): firmware/, $target, $state state, $levels levels, model $model, transport $transport ===="
        LOGLINEAR_BOARD="$board" LOGLINEAR_MODEL="$model" LOGLINEAR_LEVELS="" LOGLINEAR_STATE="" \
            LOGLINEAR_TRANSPORT="" \
            cargo build --release -q --manifest-path firmware/Cargo.toml --target "$target" \
            --target-dir "$FW_TARGET_DIR"
        cp "$FW_TARGET_DIR/$target/release/loglinear-firmware" "$elf"
    fi
    size "$elf" | sed 's/^/  /'
    sections="$(size -A "$elf")"
    awk '$1 ~ /^\.(boot2|vector_table|text|rodata|data|bss)$/ { printf "  %-14s %9d B at 0x%08x\n", $1, $2, $3 }' <<<"$sections"
    ram_origin=$(($(region_origin "$toml" ram)))
    ram_end=$((ram_origin + $(region_length "$toml" ram)))
    read -r bss_size bss_addr < <(awk '$1 == ".bss" { print $2, $3 }' <<<"$sections")
    [ "$((bss_addr))" -ge "$ram_origin" ] && [ "$((bss_addr + bss_size))" -le "$ram_end" ] ||
        fail "$board: .bss (the arena) at $bss_addr + $bss_size B is not inside [memory.ram]"
    # The image would boot. Arm and RP2040: segments in the board's memory, the vector table,
    # the second stage's CRC (`cargo xtask image-check`). ESP32-C3: the app image that espflash
    # makes from the ELF (and that `cargo run` flashes) reads back with its header, segments,
    # checksum, SHA-256 and app descriptor (`cargo xtask esp-image`).
    if [ "$board" = esp32c3 ]; then
        espflash save-image --chip esp32c3 "$elf" "$WORK/$board.bin" 2>&1 | sed 's/^/  espflash: /'
        cargo xtask esp-image --board "$board" "$WORK/$board.bin"
    else
        cargo xtask image-check --board "$board" "$elf"
    fi
    if [ "$board" = rp2040 ]; then
        elf2uf2-rs "$elf" "$WORK/$board.uf2" >/dev/null
        echo "  $WORK/$board.uf2 ($(stat -c %s "$WORK/$board.uf2") B, elf2uf2-rs):"
        cargo xtask uf2-check --board "$board" "$WORK/$board.uf2"
    fi
    if [ "$board" = rp2040 ]; then
        read -r b2_size b2_addr < <(awk '$1 == ".boot2" { print $2, $3 }' <<<"$sections")
        [ "${b2_size:-0}" -eq 256 ] && [ "$((b2_addr))" -eq $((0x10000000)) ] ||
            fail "rp2040: no 256-byte .boot2 at 0x10000000 (got ${b2_size:-none} at ${b2_addr:-none})"
    fi
    # A UART or USB image uses no semihosting (firmware/build.rs): no `bkpt` / `ebreak` trap in
    # its code, so it runs on a board with no debug probe attached.
    if [ "$transport" != semihosting ] && command -v llvm-objdump >/dev/null 2>&1; then
        traps=$(llvm-objdump -d "$elf" | grep -cE '\s(bkpt|ebreak)\b' || true)
        [ "$traps" -eq 0 ] || fail "$board: $traps semihosting traps (bkpt/ebreak) in a $transport image"
        echo "  ok: no semihosting traps (bkpt/ebreak) in the code"
    fi
    if [ -f "boards/$board/Cargo.toml" ]; then
        size_snapshot "$board" "$elf" "$model" "$UPDATE" \
            "bash scripts/boards-build.sh --update $board" || fail "$board: size snapshot"
    fi
    # Flash: everything loaded from it; RAM: .data + .bss (riscv-rt's .stack, the rest of the
    # RAM region, is left out, as in `size -A` above).
    read -r flash ram < <(awk '$1 ~ /^\.(boot2|vector_table|text|rodata|data)$/ { f += $2 }
        $1 ~ /^\.(data|bss)$/ { r += $2 } END { print f, r }' <<<"$sections")
    summary+=("$board: flash $flash B, RAM $ram B (.data + .bss; $state x $levels levels, $(basename "$model")), $transport")
done

echo
echo "boards-build: all boards built and checked (nothing flashed: no board is attached):"
printf '  %s\n' "${summary[@]}"
