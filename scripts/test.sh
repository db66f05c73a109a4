#!/usr/bin/env bash
# The single "run every test" command of the loglinear workspace.
#
#   bash scripts/test.sh
#
# On a fresh Debian 12 machine with rustup (cargo 1.95) and root it installs what it needs
# (rustfmt, clippy, the four bare-metal targets, a C linker if missing) and then runs, in order:
#
#   1. cargo fmt --check                        (workspace + the no-alloc probe)
#   2. cargo clippy -D warnings                 (workspace, all targets; runtime also as no_std)
#   3. no_std builds of loglinear-runtime for thumbv7em-none-eabihf, thumbv6m-none-eabi,
#      riscv32imac-unknown-none-elf and thumbv8m.main-none-eabihf, each with a check that no
#      `alloc` crate is linked
#   4. cargo test --workspace --release         (release: the golden tests step long sequences)
#   5. gguf-py (ggml's reference Python reader, installed with pip) reads and dequantizes model
#      files written by `loglinear convert` at every tensor type
#   6. the firmware under QEMU (token identity with the host, every integer kernel against the
#      portable one on the Arm boards), snapshots, the memory planner, the hardware board builds
#   7. the AArch64 NEON/sdot kernels under qemu-user
#
# The host-gpu tests (step 4) run the WGSL kernels through wgpu; on a machine without a GPU they
# run on lavapipe (Mesa's software Vulkan), which the setup step installs.
#
# It stops at the first failing step. Re-running is cheap: installed pieces are detected and
# cargo reuses its build cache. `CI=true`, no stdin and a read-only `../shared` are fine.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

TARGETS=(thumbv7em-none-eabihf thumbv6m-none-eabi riscv32imac-unknown-none-elf thumbv8m.main-none-eabihf)
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
PROBE_DIR="$ROOT/scripts/no-alloc-probe"
START=$SECONDS

section() {
    printf '\n==== %s ====\n' "$*"
}

# ---------------------------------------------------------------------------------------------
section "Setup: toolchain, components and targets"
if ! command -v rustup >/dev/null 2>&1 || ! command -v cargo >/dev/null 2>&1; then
    echo "error: rustup and cargo are required (https://rustup.rs)" >&2
    exit 1
fi
# Host test binaries need a C linker (`cc`); Debian's rustup images usually have one.
if ! command -v cc >/dev/null 2>&1; then
    echo "installing gcc (C linker for host builds)"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends gcc libc6-dev
fi
installed_components="$(rustup component list --installed)"
for c in rustfmt clippy; do
    if ! grep -q "^${c}" <<<"$installed_components"; then
        rustup component add "$c"
    fi
done
installed_targets="$(rustup target list --installed)"
missing_targets=()
for t in "${TARGETS[@]}"; do
    if ! grep -qx "$t" <<<"$installed_targets"; then
        missing_targets+=("$t")
    fi
done
if [ "${#missing_targets[@]}" -gt 0 ]; then
    rustup target add "${missing_targets[@]}"
fi
# wgpu needs a Vulkan driver: lavapipe (software, CPU) is enough and is what CI uses.
if ! ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1 || ! ldconfig -p | grep -q libvulkan.so.1; then
    echo "installing mesa-vulkan-drivers and libvulkan1 (lavapipe, for the wgpu tests)"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        mesa-vulkan-drivers libvulkan1
fi
# Mesa warns about a missing XDG_RUNTIME_DIR on headless machines; any writable folder does.
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"
rustc --version
cargo --version
# A clean run writes about 9 GB (build caches, QEMU images, the board tools); a full disk shows up
# later as a linker killed by SIGBUS, so say it here first.
mkdir -p "$TARGET_DIR"
free_kb="$(df -Pk "$TARGET_DIR" | awk 'NR == 2 { print $4 }')"
echo "free disk space under $TARGET_DIR: $((free_kb / 1024 / 1024)) GiB"
if [ "$free_kb" -lt $((10 * 1024 * 1024)) ]; then
    echo "warning: less than 10 GiB free under $TARGET_DIR; the build may run out of disk" >&2
fi

# ---------------------------------------------------------------------------------------------
section "cargo fmt --check"
cargo fmt --all -- --check
# The probe is not a workspace member, so `cargo fmt --all` does not see it.
rustfmt --edition 2021 --check "$PROBE_DIR/lib.rs"

# ---------------------------------------------------------------------------------------------
section "cargo clippy (workspace, all targets, -D warnings)"
cargo clippy --workspace --all-targets -- -D warnings
# The runtime again as firmware sees it (no `std` feature), so cfg-dependent warnings show too:
# on thumbv7em (the SMLAD kernels) and on a Cortex-M55 (the SMLAD and Helium kernels, which
# runtime/build.rs enables from the rustflags).
cargo clippy -p loglinear-runtime --no-default-features --target "${TARGETS[0]}" -- -D warnings
RUSTFLAGS="-C target-cpu=cortex-m55" cargo clippy -p loglinear-runtime --no-default-features \
    --target thumbv8m.main-none-eabihf -- -D warnings

# ---------------------------------------------------------------------------------------------
# no_std builds and the no-alloc check.
#
# A successful `cargo build --target thumbv6m-none-eabi` proves there is no `std`, because these
# targets have no `std` at all. It does not prove there is no `alloc`: their sysroots ship
# `alloc`, so any crate with `extern crate alloc` still compiles as an rlib. Two checks close
# that gap:
#
# (a) Authoritative: build `scripts/no-alloc-probe`, a `#![no_std]` *staticlib* that links
#     `loglinear-runtime` (no default features) and defines no `#[global_allocator]`. A final
#     artifact (staticlib, bin, cdylib) makes rustc load the whole crate graph, and if the
#     `alloc` crate is anywhere in it (the runtime or any dependency, however deep) rustc stops
#     with "no global memory allocator found but one is required". A staticlib needs no linker
#     or memory map, so this works for every bare-metal target. The probe uses the workspace's
#     Cargo.lock (copied), so it checks exactly the dependency versions the workspace builds.
#     (Verified by hand: adding `extern crate alloc;`, or a dependency that enables `half`'s
#     `alloc` feature, makes the probe fail with that error.)
# (b) Early warning with a readable answer: `cargo tree` lists the features each non-proc-macro
#     dependency of the runtime is built with for that target. A feature named `std` or `alloc`
#     on any of them fails the step and names the crate. (Proc-macros run on the host and may
#     use std, so they are excluded.) This is a heuristic, hence (a).
no_alloc_features() {
    local t="$1" out bad
    out="$(cargo tree -p loglinear-runtime --no-default-features --target "$t" \
        -e normal,no-proc-macro --prefix none --no-dedupe -f '{p}|{f}')"
    bad="$(awk -F'|' '{ n = split($2, f, ","); for (i = 1; i <= n; i++) if (f[i] == "std" || f[i] == "alloc") print "  " $1 " has feature \"" f[i] "\"" }' <<<"$out" | sort -u)"
    if [ -n "$bad" ]; then
        echo "error: a dependency of loglinear-runtime enables std/alloc on $t:" >&2
        echo "$bad" >&2
        return 1
    fi
    echo "dependencies and enabled features on $t (none may be std/alloc):"
    sort -u <<<"$out" | sed 's/^/  /'
}

for t in "${TARGETS[@]}"; do
    section "no_std build: $t"
    cargo build -p loglinear-runtime --no-default-features --target "$t" --release
    no_alloc_features "$t"
    cp "$ROOT/Cargo.lock" "$PROBE_DIR/Cargo.lock"
    cargo build --manifest-path "$PROBE_DIR/Cargo.toml" --target "$t" --release \
        --target-dir "$TARGET_DIR"
    echo "ok: loglinear-runtime links without alloc on $t"
done

# ---------------------------------------------------------------------------------------------
section "cargo test --workspace --release"
cargo test --workspace --release

# ---------------------------------------------------------------------------------------------
section "gguf-py reads our model files (every tensor type)"
if ! python3 -c "import gguf, numpy, safetensors" 2>/dev/null; then
    python3 -m pip install --quiet --disable-pip-version-check "gguf==0.19.0" numpy safetensors
fi
GGUF_DIR="$TARGET_DIR/gguf-py-check"
mkdir -p "$GGUF_DIR"
LOGLINEAR="$TARGET_DIR/release/loglinear"
for ckpt in models/ll-gdn-mcu tests/golden/model/hattention_stress tests/golden/model/gated_deltanet_stress; do
    for t in f32 f16 q8_0 q4_0; do
        out="$GGUF_DIR/$(basename "$ckpt")-$t.gguf"
        "$LOGLINEAR" convert "$ckpt" -o "$out" --type "$t" --no-eval >/dev/null
        python3 tests/gguf_py_check.py "$out" "$ckpt"
    done
done

section "Firmware under QEMU, token-identical to the host (scripts/qemu-test.sh)"
bash "$ROOT/scripts/qemu-test.sh"

section "Snapshots under QEMU (scripts/snapshot-test.sh)"
bash "$ROOT/scripts/snapshot-test.sh"

section "Memory planner vs the linked firmware, size snapshots (scripts/plan-test.sh)"
bash "$ROOT/scripts/plan-test.sh"

section "Real-chip board crates build, and their flashable images check (scripts/boards-build.sh; nothing flashed)"
bash "$ROOT/scripts/boards-build.sh"

section "AArch64 integer kernels (NEON, sdot) under qemu-user (scripts/aarch64-test.sh)"
bash "$ROOT/scripts/aarch64-test.sh"

section "All checks passed in $((SECONDS - START)) s"
