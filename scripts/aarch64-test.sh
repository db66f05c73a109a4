#!/usr/bin/env bash
# Runs the quantized-kernel tests of loglinear-runtime for aarch64-unknown-linux-gnu under
# qemu-user, twice:
#
#   bash scripts/aarch64-test.sh
#
#   * `-cpu max` (Armv8.x with the dot-product extension): the NEON and the `sdot` kernels
#     both run, and each is checked bit for bit against the portable one;
#   * `-cpu cortex-a53` (Armv8.0, no `dotprod`): the run-time check must find no `sdot`, and
#     the NEON kernel (and the `sdot` entry points' fallback) is checked.
#
# LOGLINEAR_EXPECT_KERNELS makes the test `expected_kernel_paths_are_available` fail if the
# detected paths differ from what the emulated core has, so neither run can pass vacuously.
#
# Installs what it needs on Debian 12, skipping what is there: gcc-aarch64-linux-gnu and
# libc6-dev-arm64-cross (the linker and libc), qemu-user from bookworm-backports (Debian's plain
# bookworm QEMU conflicts with the backports qemu-utils that scripts/qemu-setup.sh installs),
# and the Rust target.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
TARGET=aarch64-unknown-linux-gnu

apt_missing=()
command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || apt_missing+=(gcc-aarch64-linux-gnu)
[ -e /usr/aarch64-linux-gnu/lib/libc.so.6 ] || apt_missing+=(libc6-dev-arm64-cross)
if [ "${#apt_missing[@]}" -gt 0 ]; then
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        "${apt_missing[@]}"
fi
if ! command -v qemu-aarch64 >/dev/null 2>&1; then
    if ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
        uri="$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)"
        uri="${uri:-http://deb.debian.org/debian}"
        printf 'Types: deb deb-src\nURIs: %s\nSuites: bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
            "$uri" | as_root tee /etc/apt/sources.list.d/bookworm-backports.sources >/dev/null
    fi
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        -t bookworm-backports qemu-user
fi
grep -qx "$TARGET" <<<"$(rustup target list --installed)" || rustup target add "$TARGET"
echo "qemu: $(qemu-aarch64 --version | head -n1)"

export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
run_on() {
    local cpu="$1" expect="$2"
    echo "== loglinear-runtime quant tests on qemu-aarch64 -cpu $cpu (expect: $expect)"
    CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu -cpu $cpu" \
        LOGLINEAR_EXPECT_KERNELS="$expect" \
        cargo test -q -p loglinear-runtime --release --target "$TARGET" --lib quant
}
run_on max 'portable,neon,neon-sdot,!avx2'
run_on cortex-a53 'portable,neon,!neon-sdot'
echo "aarch64 kernel tests passed"
