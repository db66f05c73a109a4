#!/usr/bin/env bash
# The single "run every test" command of the loglinear workspace.
#
#   bash scripts/test.sh
#
# On a fresh Debian 12 machine with rustup (cargo 1.95) and root it installs what the tests
# need from outside cargo: rustfmt and clippy, the Rust targets, a C linker, lavapipe (Mesa's
# software Vulkan, for the wgpu tests on a machine without a GPU), QEMU for the firmware
# (scripts/qemu-setup.sh), the AArch64 cross linker and qemu-user, and gguf-py. Then it runs
# `cargo xtask ci` (xtask/src/ci.rs), which runs every test in order and stops at the first
# failure: fmt, clippy, the no_std/no-alloc builds, `cargo test --workspace --release`, gguf-py
# on our model files, the firmware under QEMU, the integer kernels on the boards' cores, session
# snapshots, the memory planner and size snapshots, the real-chip board builds and their images,
# and the AArch64 kernels under qemu-user.
#
# Re-running is cheap: installed pieces are detected and cargo reuses its build cache.
# `CI=true`, no stdin and a read-only `../shared` are fine.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# `cargo xtask ci` counts the set-up in its table of stage times from here.
LOGLINEAR_TEST_START="$(date +%s)"
export LOGLINEAR_TEST_START
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"

echo "==== Setup: toolchain, targets and system packages ===="
if ! command -v rustup >/dev/null 2>&1 || ! command -v cargo >/dev/null 2>&1; then
    echo "error: rustup and cargo are required (https://rustup.rs)" >&2
    exit 1
fi
apt_missing=()
# Host test binaries need a C linker (`cc`); Debian's rustup images usually have one.
command -v cc >/dev/null 2>&1 || apt_missing+=(gcc libc6-dev)
# wgpu needs a Vulkan driver: lavapipe (software, CPU) is enough and is what CI uses.
if ! ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1 || ! ldconfig -p | grep -q libvulkan.so.1; then
    apt_missing+=(mesa-vulkan-drivers libvulkan1)
fi
# The AArch64 Linux board and the NEON/sdot kernel tests: the cross linker and libc.
command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || apt_missing+=(gcc-aarch64-linux-gnu)
[ -e /usr/aarch64-linux-gnu/lib/libc.so.6 ] || apt_missing+=(libc6-dev-arm64-cross)
if [ "${#apt_missing[@]}" -gt 0 ]; then
    echo "installing ${apt_missing[*]}"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        "${apt_missing[@]}"
fi
# QEMU for the firmware (qemu-system-arm, -riscv32), the firmware targets, rustfmt and clippy.
bash scripts/qemu-setup.sh
# qemu-user for the AArch64 kernels, from bookworm-backports like the rest of QEMU.
if ! command -v qemu-aarch64 >/dev/null 2>&1; then
    ensure_backports
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        -t bookworm-backports qemu-user
fi
grep -qx aarch64-unknown-linux-gnu <<<"$(rustup target list --installed)" ||
    rustup target add aarch64-unknown-linux-gnu
# gguf-py, ggml's reference reader of our model files.
if ! python3 -c "import gguf, numpy, safetensors" 2>/dev/null; then
    python3 -m pip install --quiet --disable-pip-version-check "gguf==0.19.0" numpy safetensors
fi
# Mesa warns about a missing XDG_RUNTIME_DIR on headless machines; any writable folder does.
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"
rustc --version
cargo --version
# A clean run writes about 9 GB (build caches, QEMU images); a full disk shows up
# later as a linker killed by SIGBUS, so say it here first.
mkdir -p "$TARGET_DIR"
free_kb="$(df -Pk "$TARGET_DIR" | awk 'NR == 2 { print $4 }')"
echo "free disk space under $TARGET_DIR: $((free_kb / 1024 / 1024)) GiB"
if [ "$free_kb" -lt $((10 * 1024 * 1024)) ]; then
    echo "warning: less than 10 GiB free under $TARGET_DIR; the build may run out of disk" >&2
fi

exec cargo xtask ci
