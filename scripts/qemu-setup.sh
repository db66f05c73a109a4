#!/usr/bin/env bash
# Installs what the QEMU firmware test needs, idempotently:
#   * qemu-system-arm and qemu-system-riscv32 (package qemu-system-misc) from bookworm-backports
#     (Debian's plain bookworm QEMU conflicts with the preinstalled qemu-utils from backports;
#     see ../shared/spec/platform-notes.md, "QEMU for firmware");
#   * the Rust targets of the QEMU boards, rustfmt and clippy.
# Skips every piece that is already there.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

if command -v qemu-system-arm >/dev/null 2>&1 && command -v qemu-system-riscv32 >/dev/null 2>&1; then
    echo "qemu: $(qemu-system-arm --version | head -n1) (already installed)"
else
    ensure_backports
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        -t bookworm-backports qemu-system-arm qemu-system-misc
    qemu-system-arm --version | head -n1
fi

targets=(thumbv7em-none-eabihf thumbv6m-none-eabi riscv32imac-unknown-none-elf thumbv8m.main-none-eabihf)
installed="$(rustup target list --installed)"
missing=()
for t in "${targets[@]}"; do
    grep -qx "$t" <<<"$installed" || missing+=("$t")
done
if [ "${#missing[@]}" -gt 0 ]; then
    rustup target add "${missing[@]}"
fi

# qemu-test.sh also checks the firmware crate with rustfmt and clippy.
installed_components="$(rustup component list --installed)"
for c in rustfmt clippy; do
    grep -q "^${c}" <<<"$installed_components" || rustup component add "$c"
done
