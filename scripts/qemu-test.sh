#!/usr/bin/env bash
# Firmware under QEMU, token for token against the host runtime.
#
#   bash scripts/qemu-test.sh [BOARD...]      (default: every QEMU board below)
#   QEMU_TEST_MODEL=FILE bash scripts/qemu-test.sh BOARD   (another model file, e.g. a fine-tune)
#
# For each QEMU board in boards/ it builds firmware/ for the board's target (the board's levels
# and state type from its board.toml), runs it under QEMU with semihosting, and speaks the serial
# protocol of docs/serial-protocol.md to it on semihosting stdin/stdout:
#   * token identity: `GEN` streams exactly the token ids that the host `loglinear generate`
#     prints for the same model file, prompt, sampler settings, seed, levels and state type, and
#     `STATUS` reports the same state bytes (every board);
#   * hostile input: an oversized line, invalid UTF-8, an unknown command, bad parameter values
#     and a line cut short by end of input each get `ERR <code>`, and the board keeps serving:
#     greedy `GEN n=1` between them continue the host's greedy text token for token (every
#     board);
#   * microbit (Cortex-M0, 16 KiB RAM) cannot hold the shipped model: it runs the test-sized model
#     named by `model = ...` in its board.toml, on the firmware and on the host alike;
#   * a session (mps2-an386): GEN, STATUS, GEN continuing the context (together equal to one
#     host run), RESET, GEN again equal to the first; and `loglinear serial --qemu-board`, the
#     host client, prints byte for byte what `loglinear generate` prints;
#   * the UART transport (every board with `uart = ...` in its board.toml): the firmware built
#     with LOGLINEAR_TRANSPORT=uart (its own target dir, target/firmware-uart) runs under the
#     board's `uart_runner` (`-serial stdio`: the emulated UART on QEMU's stdin/stdout; semihosting
#     only for the logs and the exit code) and must give the same tokens and state bytes as the
#     host for every request above; hostile input over the UART (an unknown command, a line cut
#     short and ended by the next host's resync newline, an oversized line) gets ERR and the
#     board keeps serving; and `loglinear serial --port /dev/pts/N`, the host client, talks to
#     the UART through a QEMU pty chardev (`-serial pty`), ends a line cut short that a
#     previous host left (its sync: a blank line and STATUS) and prints what `loglinear
#     generate` prints. Requests go out once the board has printed READY (a UART drops what
#     comes before its receiver is on);
#   * sustained input (b-l475e-iot01a: `uart_sustained_bytes` in its board.toml): a 64 KiB
#     prompt sent at full speed over the STM32L475's interrupt-driven USART, in `GEN n=0` lines,
#     then a greedy GEN: every line answered, the token count and the tokens equal the host's;
#   * the integer matvec kernels (scripts/kernel-check.sh, Arm boards): every kernel path the
#     core runs equals the portable one bit for bit on random shapes, on the board's own CPU;
#   * activations: a board with `activations = "q8"` under [firmware] runs its quantized
#     matvecs on Q8 activations (the integer kernels), and the host reference then runs
#     `loglinear generate --activations q8`;
#   * stack: the deepest `stack_peak_bytes` any STATUS reports (the stack painted at boot) stays
#     within the memory planner's stack estimate for the board (`loglinear plan`: sampler
#     scratch + the board's firmware.stack_reserve), so the planner's RAM sum covers the stack.
# Installs QEMU and the targets first if missing (scripts/qemu-setup.sh), and checks the firmware
# crate's formatting and clippy (it is outside the main workspace).
# It prints the QEMU wall time of every run and `size` of every ELF.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
FW_TARGET_DIR="$TARGET_DIR/firmware"
# UART images: their own target dir, so switching transports rebuilds nothing.
FW_UART_TARGET_DIR="$TARGET_DIR/firmware-uart"
WORK="$TARGET_DIR/qemu-test"
DEFAULT_MODEL="${QEMU_TEST_MODEL:-models/ll-gdn-mcu16k-q8_0.gguf}" # QEMU_TEST_MODEL: run another model file
# Seconds one QEMU run may take before it counts as hung (the slowest, riscv-virt, needs ~20 s).
QEMU_TIMEOUT="${QEMU_TIMEOUT:-120}"

BOARDS=("$@")
if [ "${#BOARDS[@]}" -eq 0 ]; then
    mapfile -t BOARDS < <(qemu_boards)
fi

# Requests: "GEN parameters|host CLI arguments". The same `\n` escapes work in both.
# Keep them short: every token costs ~0.4 s on riscv-virt (soft float under TCG).
CASES=(
    "n=16 temperature=0 prompt=JULIET:\n|--prompt JULIET:\n -n 16 --temperature 0"
    "n=24 temperature=0.8 seed=7 top_k=40 top_p=0.95 prompt=ROMEO:\n|--prompt ROMEO:\n -n 24 --temperature 0.8 --seed 7 --top-k 40 --top-p 0.95"
)

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

# Runs "$elf" under "$runner" with the protocol script on stdin ($1, a printf format), output in
# $2.out and $2.err; sets ms (wall time). Any exit code but 0 fails the test. With wait_ready=1
# (set by uart_test) the script is sent only once the board has printed READY: a UART drops what
# arrives before the firmware has enabled its receiver (the STM32L4 USART model, like the chip).
qemu_run() {
    local script="$1" base="$2" start rc=0 fifo qpid fd
    start=$(date +%s%N)
    if [ "${wait_ready:-0}" -eq 1 ]; then
        fifo="$base.in"
        rm -f "$fifo"
        mkfifo "$fifo"
        # shellcheck disable=SC2086 # the runner is a command line
        timeout "$QEMU_TIMEOUT" $runner "$elf" <"$fifo" >"$base.out" 2>"$base.err" &
        qpid=$!
        exec {fd}>"$fifo"
        for _ in $(seq $((QEMU_TIMEOUT * 20))); do
            grep -q '^READY ' "$base.out" 2>/dev/null && break
            kill -0 "$qpid" 2>/dev/null || break
            sleep 0.05
        done
        # shellcheck disable=SC2059 # the script is a format
        printf "$script" >&"$fd" || true
        exec {fd}>&-
        wait "$qpid" || rc=$?
        rm -f "$fifo"
    else
        # shellcheck disable=SC2086,SC2059 # the runner is a command line; the script a format
        printf "$script" | timeout "$QEMU_TIMEOUT" $runner "$elf" >"$base.out" 2>"$base.err" || rc=$?
    fi
    ms=$((($(date +%s%N) - start) / 1000000))
    [ "$rc" -eq 0 ] || {
        cat "$base.err" >&2
        fail "$board: QEMU exited with $rc (124 = timeout after ${QEMU_TIMEOUT}s), output in $base.out"
    }
}

# Raises stack_peak to the largest stack_peak_bytes of the STATUS lines in reply file $1.
note_stack() {
    local p
    for p in $(sed -n 's/^STATUS .*stack_peak_bytes=\([0-9]*\).*/\1/p' "$1"); do
        [ "$p" -le "$stack_peak" ] || stack_peak=$p
    done
}

# Milliseconds as seconds with one decimal.
secs() { printf '%d.%01d s' "$(($1 / 1000))" "$(($1 % 1000 / 100))"; }

# Token ids of the TOK lines of reply file $1, from the $2-th TOK line on, $3 of them.
tok_ids() {
    grep '^TOK ' "$1" | tail -n "+$2" | head -n "$3" | cut -d' ' -f2 | tr '\n' ' ' | sed 's/ $//'
}

# The generated bytes of a host `loglinear generate` output $1 (prompt of $2 bytes, generated
# text, newline) as token ids (byte-level vocabulary: id = byte).
host_ids() {
    local n
    n=$(stat -c %s "$1")
    head -c "$((n - 1))" "$1" | tail -c "+$(($2 + 1))" | od -An -tu1 -v | tr -s ' \n' ' ' |
        sed 's/^ //; s/ $//'
}

# The UART checks of one board (the loop's variables: board, target, MODEL, levels, state,
# uart_runner, toml): builds the UART image, runs the CASES, hostile input and the host client
# over the emulated UART.
uart_test() {
    local uart_elf base i case request got want pty qpid rc pty_runner line
    local wait_ready=1
    echo "  -- UART transport ($(board_value "$toml" uart)): $uart_runner"
    LOGLINEAR_BOARD="$board" LOGLINEAR_MODEL="$MODEL" LOGLINEAR_LEVELS="" LOGLINEAR_STATE="" \
        LOGLINEAR_TRANSPORT=uart RUSTFLAGS="$(board_value "$toml" rustflags)" \
        cargo build --release -q --manifest-path firmware/Cargo.toml --target "$target" \
        --target-dir "$FW_UART_TARGET_DIR"
    uart_elf="$WORK/$board-uart.elf"
    cp "$FW_UART_TARGET_DIR/$target/release/loglinear-firmware" "$uart_elf"
    local runner="$uart_runner" elf="$uart_elf"

    # Token identity: every request of CASES, against the host outputs of the runs above.
    i=0
    for case in "${CASES[@]}"; do
        i=$((i + 1))
        request="${case%%|*}"
        base="$WORK/$board-uart-$i"
        qemu_run "GEN ${request//\\/\\\\}\nSTATUS\nQUIT\n" "$base"
        grep -q '^READY .* transport=uart$' "$base.out" ||
            fail "$board UART case $i: no 'READY ... transport=uart' line: $(head -n1 "$base.out")"
        read -r t g < <(sed -n 's/^STATUS tokens=\([0-9]*\) generated=\([0-9]*\).*/\1 \2/p' "$base.out") ||
            fail "$board UART case $i: no STATUS line: $(cat "$base.out")"
        got=$(tok_ids "$base.out" 1 "$g")
        want=$(host_ids "$WORK/$board-$i.host.out" "$((t - g))")
        [ "$want" = "$got" ] || fail "$board UART case $i: token ids differ
  host:     $want
  firmware: $got"
        grep -qx "DONE $g" "$base.out" || fail "$board UART case $i: no 'DONE $g'"
        grep -qx BYE "$base.out" || fail "$board UART case $i: no BYE after QUIT"
        want=$(sed -n 's/.*state \([0-9]*\) B live \/ \([0-9]*\) B allocated.*/\1 \2/p' \
            "$WORK/$board-$i.host.err")
        got=$(sed -n 's/.*state_live_bytes=\([0-9]*\) state_allocated_bytes=\([0-9]*\).*/\1 \2/p' \
            "$base.out")
        [ "$want" = "$got" ] ||
            fail "$board UART case $i: state bytes differ (host '$want', firmware '$got')"
        note_stack "$base.out"
        printf '  ok: UART case %d, %2d tokens identical to the host, QEMU %s\n' "$i" "$g" "$(secs "$ms")"
    done

    # Hostile input. A UART has no end of input, so a line cut short is ended by whatever comes
    # next: here the newline a host sends first to end any partial line (docs/serial-protocol.md).
    base="$WORK/$board-uart-hostile"
    local one='GEN n=1 temperature=0\n' long script
    long=$(head -c 1500 /dev/zero | tr '\0' a)
    script="HELLO world\nGEN n=1 temperature=0 prompt=A\n"
    script+="GEN n=3 tempera\n\n$one"
    script+="GEN prompt=$long\n$one"
    script+="STATUS\nQUIT\n"
    qemu_run "$script" "$base"
    got=$(awk '{ print ($1 == "ERR") ? "ERR" $2 : $1 }' "$base.out" | tr '\n' ' ' | sed 's/ $//')
    want="READY ERR3 TOK DONE ERR4 TOK DONE ERR1 TOK DONE STATUS BYE"
    [ "$got" = "$want" ] || {
        cat "$base.out" >&2
        fail "$board UART hostile input: replies
  got:      $got
  expected: $want"
    }
    [ "$(tok_ids "$base.out" 1 3)" = "$(host_ids "$WORK/$board-hostile.host.out" 1 | cut -d' ' -f1-3)" ] ||
        fail "$board UART hostile input: the GENs between bad lines differ from the host's greedy text"
    grep -q '^STATUS tokens=4 generated=3 ' "$base.out" ||
        fail "$board UART hostile input: the bad lines changed the session: $(grep '^STATUS' "$base.out")"
    note_stack "$base.out"
    echo "  ok: UART hostile input answered with ERR, board kept serving (QEMU $(secs "$ms")):"
    grep '^ERR' "$base.out" | cut -c1-60 | sed 's/^/      /'

    # Sustained input (board.toml `uart_sustained_bytes`, with `uart_sustained_model`): a prompt
    # of that many bytes, sent at full speed as `GEN n=0` lines of 480 bytes, then a greedy GEN.
    # Every byte must get through the interrupt-driven receive: a `DONE 0` per line, and the
    # tokens and the token count equal the host's for the whole prompt. The prompt is printable
    # ASCII from the repository's docs, without `\` and `%` (the protocol's and printf's escapes).
    local sustained sustained_model chunk lines
    sustained="$(board_value "$toml" uart_sustained_bytes)"
    if [ -n "$sustained" ]; then
        sustained_model="$(board_value "$toml" uart_sustained_model)"
        sustained_model="${sustained_model:-$MODEL}"
        base="$WORK/$board-uart-sustained"
        # (`head` ends the pipe early: the SIGPIPE of the others is expected; the size is checked.)
        cat docs/*.md ./*.md | tr '\n' ' ' | tr -cd ' -$&-[]-~' | head -c "$sustained" >"$base.prompt" ||
            true
        [ "$(stat -c %s "$base.prompt")" -eq "$sustained" ] ||
            fail "$board: the docs hold fewer than $sustained bytes for the sustained-input prompt"
        LOGLINEAR_BOARD="$board" LOGLINEAR_MODEL="$sustained_model" LOGLINEAR_LEVELS="" \
            LOGLINEAR_STATE="" LOGLINEAR_TRANSPORT=uart RUSTFLAGS="$(board_value "$toml" rustflags)" \
            cargo build --release -q --manifest-path firmware/Cargo.toml --target "$target" \
            --target-dir "$FW_UART_TARGET_DIR-sustained"
        elf="$WORK/$board-uart-sustained.elf"
        cp "$FW_UART_TARGET_DIR-sustained/$target/release/loglinear-firmware" "$elf"
        script=""
        lines=0
        while IFS= read -r chunk || [ -n "$chunk" ]; do
            script+="GEN n=0 prompt=$chunk\n"
            lines=$((lines + 1))
        done < <(fold -b -w 480 "$base.prompt")
        script+="GEN n=16 temperature=0\nSTATUS\nQUIT\n"
        # 65 536 model steps: minutes under QEMU, not the per-request limit.
        QEMU_TIMEOUT=$((QEMU_TIMEOUT * 8)) qemu_run "$script" "$base"
        "$LOGLINEAR" generate --model "$sustained_model" --prompt "$(cat "$base.prompt")" -n 16 \
            --temperature 0 --levels "$levels" --state "$state" --activations "$acts" \
            >"$base.host.out" 2>/dev/null
        [ "$(grep -cx 'DONE 0' "$base.out")" -eq "$lines" ] ||
            fail "$board sustained input: $(grep -cx 'DONE 0' "$base.out") of $lines prompt lines answered DONE 0: $(grep -v '^TOK' "$base.out" | grep -v '^DONE 0$' | head -5)"
        [ "$(tok_ids "$base.out" 1 16)" = "$(host_ids "$base.host.out" "$sustained")" ] ||
            fail "$board sustained input: the tokens after the $sustained-byte prompt differ from the host's"
        grep -q "^STATUS tokens=$((sustained + 16)) generated=16 " "$base.out" ||
            fail "$board sustained input: bytes lost: $(grep '^STATUS' "$base.out")"
        note_stack "$base.out"
        echo "  ok: sustained input: $sustained B of prompt in $lines lines at full speed over the interrupt-driven UART, none lost, 16 tokens identical to the host ($(basename "$sustained_model"), QEMU $(secs "$ms"))"
        elf="$uart_elf"
    fi

    # The host client on a pty: QEMU's `-serial pty` chardev, `loglinear serial --port`.
    base="$WORK/$board-uart-client"
    "$LOGLINEAR" generate --model "$MODEL" --prompt 'JULIET:\n' -n 16 --temperature 0 \
        --levels "$levels" --state "$state" --activations "$acts" >"$base.host.out" 2>/dev/null
    pty_runner="${uart_runner/-serial stdio/-serial pty}"
    [ "$pty_runner" != "$uart_runner" ] || fail "$toml: uart_runner has no '-serial stdio'"
    # shellcheck disable=SC2086 # the runner is a command line
    timeout "$QEMU_TIMEOUT" $pty_runner "$uart_elf" </dev/null >"$base.qemu.out" 2>"$base.qemu.err" &
    qpid=$!
    pty=""
    for _ in $(seq 100); do
        pty=$(sed -n 's/.*char device redirected to \(\/dev\/[^ ]*\) .*/\1/p' "$base.qemu.out" "$base.qemu.err")
        [ -z "$pty" ] || break
        sleep 0.1
    done
    [ -n "$pty" ] || {
        kill "$qpid" 2>/dev/null || true
        fail "$board: QEMU printed no pty path: $(cat "$base.qemu.out" "$base.qemu.err")"
    }
    # A previous host that died mid-request: a line cut short, left in the board's line buffer.
    # The pty stays open on fd 9 until QEMU has exited (QEMU polls a pty's connection, and
    # drops what a closed pty held).
    exec 9<>"$pty"
    # The firmware's READY: its UART is on (what comes before it may be dropped).
    for _ in $(seq 60); do
        IFS= read -r -t 1 line <&9 || true
        [ "${line#READY }" = "$line" ] || break
    done
    printf 'GEN n=2 tempera' >&9
    start=$(date +%s%N)
    rc=0
    timeout "$QEMU_TIMEOUT" "$LOGLINEAR" serial --port "$pty" --prompt 'JULIET:\n' -n 16 \
        --temperature 0 --status >"$base.out" 2>"$base.err" || rc=$?
    ms=$((($(date +%s%N) - start) / 1000000))
    printf 'QUIT\n' >&9
    wait "$qpid" || rc=$((rc == 0 ? 1 : rc))
    exec 9<&-
    [ "$rc" -eq 0 ] || fail "$board: loglinear serial over the pty or QEMU failed (exit $rc): $(cat "$base.err" "$base.qemu.err")"
    cmp -s "$base.out" "$base.host.out" ||
        fail "$board: loglinear serial --port $pty printed other text than loglinear generate"
    grep -q '^\[ERR 4 .*tempera\]$' "$base.err" ||
        fail "$board: loglinear serial did not end the cut line first (no ERR 4 for it): $(cat "$base.err")"
    sed -n '/^\[STATUS /{ s/^\[//; s/\]$//; p; }' "$base.err" >"$base.status"
    note_stack "$base.status"
    echo "  ok: loglinear serial --port $pty (QEMU -serial pty), after a line cut short by a previous host, prints what loglinear generate prints ($(secs "$ms"))"
}

bash "$ROOT/scripts/qemu-setup.sh"
mkdir -p "$WORK"

echo "building the host CLI"
cargo build --release -q -p loglinear-converter --bin loglinear
LOGLINEAR="$TARGET_DIR/release/loglinear"
make_board_models "$LOGLINEAR"

# firmware/ is not a workspace member, so the workspace's fmt and clippy steps do not see it.
echo "firmware: cargo fmt --check"
cargo fmt --manifest-path firmware/Cargo.toml -- --check
# thumbv6m has no default board (the shipped model fits none of its boards): microbit's.
# thumbv8m.main has no default board either: mps3-an547's (the model in its own flash region).
# thumbv7em once more as b-l475e-iot01a: its interrupt-driven USART driver.
for tb in thumbv7em-none-eabihf: riscv32imac-unknown-none-elf: thumbv6m-none-eabi:microbit \
    thumbv8m.main-none-eabihf:mps3-an547 thumbv7em-none-eabihf:b-l475e-iot01a; do
    t="${tb%%:*}" b="${tb#*:}"
    m="$DEFAULT_MODEL"
    flags=""
    if [ -n "$b" ]; then
        m="$(board_value "boards/$b/board.toml" model)"
        m="${m:-$DEFAULT_MODEL}"
        flags="$(board_value "boards/$b/board.toml" rustflags)"
    fi
    echo "firmware: cargo clippy --target $t -D warnings"
    LOGLINEAR_BOARD="$b" LOGLINEAR_MODEL="$m" LOGLINEAR_LEVELS="" LOGLINEAR_STATE="" \
        RUSTFLAGS="$flags" \
        cargo clippy --release -q --manifest-path firmware/Cargo.toml --target "$t" \
        --target-dir "$FW_TARGET_DIR" --features kernel-check -- -D warnings
    # The same target with its QEMU board's UART driver (src/uart.rs), where it has one.
    ub="${b:-$([ "$t" = riscv32imac-unknown-none-elf ] && echo riscv-virt || echo mps2-an386)}"
    [ -n "$(board_value "boards/$ub/board.toml" uart)" ] || continue
    echo "firmware: cargo clippy --target $t -D warnings, UART transport ($ub)"
    LOGLINEAR_BOARD="$ub" LOGLINEAR_MODEL="$m" LOGLINEAR_LEVELS="" LOGLINEAR_STATE="" \
        LOGLINEAR_TRANSPORT=uart \
        cargo clippy --release -q --manifest-path firmware/Cargo.toml --target "$t" \
        --target-dir "$FW_UART_TARGET_DIR" -- -D warnings
done

# The integer kernels on the Arm boards' own cores, bit for bit against the portable ones.
kernel_boards=()
for board in "${BOARDS[@]}"; do
    case "$(board_value "boards/$board/board.toml" target)" in
    thumb*) kernel_boards+=("$board") ;;
    esac
done
if [ "${#kernel_boards[@]}" -gt 0 ]; then
    echo
    echo "==== integer kernels vs portable under QEMU (scripts/kernel-check.sh) ===="
    bash "$ROOT/scripts/kernel-check.sh" "${kernel_boards[@]}"
fi

for board in "${BOARDS[@]}"; do
    toml="boards/$board/board.toml"
    [ -f "$toml" ] || fail "no board $board ($toml missing)"
    target="$(board_value "$toml" target)"
    runner="$(board_value "$toml" runner)"
    state="$(board_value "$toml" state)"
    levels="$(board_value "$toml" levels)"
    # The board's own model if it names one (microbit: a test-sized model), else the shipped one.
    MODEL="$(board_value "$toml" model)"
    MODEL="${MODEL:-$DEFAULT_MODEL}"
    # How the board's quantized matvecs treat their input (`activations` under [firmware]):
    # the host reference runs the same mode, so the tokens stay identical.
    acts="$(board_value "$toml" activations)"
    acts="${acts:-f32}"
    [ -n "$target" ] && [ -n "$runner" ] && [ -n "$state" ] && [ -n "$levels" ] ||
        fail "$toml: target, runner, state or levels missing"

    echo
    echo "==== $board: $target, $state state, $levels levels, $acts activations, $MODEL ===="
    LOGLINEAR_BOARD="$board" LOGLINEAR_MODEL="$MODEL" LOGLINEAR_LEVELS="" LOGLINEAR_STATE="" \
        LOGLINEAR_TRANSPORT="" RUSTFLAGS="$(board_value "$toml" rustflags)" \
        cargo build --release -q --manifest-path firmware/Cargo.toml --target "$target" \
        --target-dir "$FW_TARGET_DIR"
    elf="$WORK/$board.elf"
    cp "$FW_TARGET_DIR/$target/release/loglinear-firmware" "$elf"
    stack_peak=0
    stack_estimate=$("$LOGLINEAR" plan --board "$board" --model "$MODEL" |
        sed -n 's/^  stack reserve .*stack estimate with the sampler scratch \([0-9]*\) B.*/\1/p')
    [ -n "$stack_estimate" ] || fail "$board: no stack estimate in loglinear plan's report"
    if command -v size >/dev/null 2>&1; then
        # .bss is the session arena plus small statics; riscv-rt's .stack (the rest of RAM) is
        # left out of this list.
        size -A "$elf" | awk '$1 ~ /^\.(vector_table|text|rodata|data|bss)$/ { printf "  %-14s %9d B\n", $1, $2 }'
    fi

    i=0
    for case in "${CASES[@]}"; do
        i=$((i + 1))
        request="${case%%|*}"
        # shellcheck disable=SC2206 # word splitting of the CLI arguments is intended
        host_args=(${case#*|})
        base="$WORK/$board-$i"
        "$LOGLINEAR" generate --model "$MODEL" "${host_args[@]}" --levels "$levels" \
            --state "$state" --activations "$acts" >"$base.host.out" 2>"$base.host.err"
        # printf format: the request's `\n` escapes must reach the firmware as `\n`.
        qemu_run "GEN ${request//\\/\\\\}\nSTATUS\nQUIT\n" "$base"
        read -r t g < <(sed -n 's/^STATUS tokens=\([0-9]*\) generated=\([0-9]*\).*/\1 \2/p' "$base.out") ||
            fail "$board case $i: no STATUS line: $(cat "$base.out")"
        fw_ids=$(tok_ids "$base.out" 1 "$g")
        want=$(host_ids "$base.host.out" "$((t - g))")
        [ "$want" = "$fw_ids" ] || fail "$board case $i: token ids differ
  host:     $want
  firmware: $fw_ids"
        grep -qx "DONE $g" "$base.out" || fail "$board case $i: no 'DONE $g'"
        note_stack "$base.out"
        # State bytes: the host's stderr line "... state L B live / A B allocated]".
        host_state=$(sed -n 's/.*state \([0-9]*\) B live \/ \([0-9]*\) B allocated.*/\1 \2/p' \
            "$base.host.err")
        fw_state=$(sed -n 's/.*state_live_bytes=\([0-9]*\) state_allocated_bytes=\([0-9]*\).*/\1 \2/p' \
            "$base.out")
        [ -n "$host_state" ] && [ "$host_state" = "$fw_state" ] ||
            fail "$board case $i: state bytes differ (host '$host_state', firmware '$fw_state')"
        printf '  ok: case %d, %2d tokens identical to the host, QEMU %s  [GEN %s]\n' \
            "$i" "$g" "$(secs "$ms")" "$request"
        sed -n 's/^STATUS /      STATUS /p' "$base.out"
    done

    # Hostile input: each bad line gets ERR <code>, the session is untouched, and the greedy
    # `GEN n=1` between them continue the host's greedy text for prompt "A".
    base="$WORK/$board-hostile"
    "$LOGLINEAR" generate --model "$MODEL" --prompt A -n 4 --temperature 0 --levels "$levels" \
        --state "$state" --activations "$acts" >"$base.host.out" 2>/dev/null
    long=$(head -c 1500 /dev/zero | tr '\0' a)
    one='GEN n=1 temperature=0\n'
    script="GEN prompt=$long\nGEN n=1 temperature=0 prompt=A\n"
    script+="GEN prompt=\xff\xfe\n$one"
    script+="HELLO world\n$one"
    script+='GEN n=5000\nGEN temperature=-1\nGEN top_p=0\nGEN colour=blue\nGEN prompt=\n'
    script+='GEN prompt=a\\q\nRESET levels=99\nSTATUS now\n'
    script+="${one}STATUS\nGEN n=3 prompt=abc"
    qemu_run "$script" "$base"
    got=$(awk '{ print ($1 == "ERR") ? "ERR" $2 : $1 }' "$base.out" | tr '\n' ' ' | sed 's/ $//')
    want="READY ERR1 TOK DONE ERR2 TOK DONE ERR3 TOK DONE"
    want+=" ERR4 ERR4 ERR4 ERR4 ERR4 ERR4 ERR4 ERR4 TOK DONE STATUS ERR5"
    [ "$got" = "$want" ] || {
        cat "$base.out" >&2
        fail "$board hostile input: replies
  got:      $got
  expected: $want"
    }
    [ "$(tok_ids "$base.out" 1 4)" = "$(host_ids "$base.host.out" 1)" ] ||
        fail "$board hostile input: the GENs between bad lines differ from the host's greedy text"
    grep -q '^STATUS tokens=5 generated=4 ' "$base.out" ||
        fail "$board hostile input: the bad lines changed the session: $(grep '^STATUS' "$base.out")"
    note_stack "$base.out"
    echo "  ok: hostile input answered with ERR, board kept serving (QEMU $(secs "$ms")):"
    grep '^ERR' "$base.out" | sed 's/^/      /'

    # A session (one board: riscv-virt costs ~0.4 s a token): GEN, STATUS, GEN continuing,
    # RESET, GEN again; and the host client.
    if [ "$board" = mps2-an386 ]; then
        base="$WORK/$board-session"
        "$LOGLINEAR" generate --model "$MODEL" --prompt 'JULIET:\n' -n 16 --temperature 0 \
            --levels "$levels" --state "$state" --activations "$acts" >"$base.host.out" 2>/dev/null
        gen1='GEN n=8 temperature=0 prompt=JULIET:\\n\n'
        qemu_run "${gen1}STATUS\nGEN n=8 temperature=0\nSTATUS\nRESET\nSTATUS\n${gen1}QUIT\n" "$base"
        got=$(awk '{ print $1 }' "$base.out" | uniq | tr '\n' ' ' | sed 's/ $//')
        want="READY TOK DONE STATUS TOK DONE STATUS OK STATUS TOK DONE BYE"
        [ "$got" = "$want" ] || fail "$board session: replies '$got', expected '$want'"
        [ "$(tok_ids "$base.out" 1 16)" = "$(host_ids "$base.host.out" 8)" ] ||
            fail "$board session: GEN + continuing GEN differ from one host run of 16 tokens"
        [ "$(tok_ids "$base.out" 17 8)" = "$(tok_ids "$base.out" 1 8)" ] ||
            fail "$board session: GEN after RESET differs from the first GEN"
        [ "$(sed -n 's/^STATUS \(tokens=[0-9]* generated=[0-9]*\).*/\1/p' "$base.out" | tr '\n' ' ')" = \
            "tokens=16 generated=8 tokens=24 generated=16 tokens=0 generated=0 " ] ||
            fail "$board session: STATUS counts: $(grep '^STATUS' "$base.out")"
        note_stack "$base.out"
        echo "  ok: session GEN, STATUS, GEN continuing (= host), RESET, GEN (= first), QEMU $(secs "$ms")"

        start=$(date +%s%N)
        "$LOGLINEAR" serial --qemu-board "$board" --elf "$elf" --prompt 'JULIET:\n' -n 16 \
            --temperature 0 --status >"$base.client.out" 2>"$base.client.err" ||
            fail "$board: loglinear serial failed: $(cat "$base.client.err")"
        ms=$((($(date +%s%N) - start) / 1000000))
        cmp -s "$base.client.out" "$base.host.out" ||
            fail "$board: loglinear serial printed other text than loglinear generate"
        echo "  ok: loglinear serial --qemu-board prints what loglinear generate prints ($(secs "$ms"))"
    fi

    # The UART transport: the same requests over the board's emulated UART.
    uart_runner="$(board_value "$toml" uart_runner)"
    if [ -n "$(board_value "$toml" uart)" ] && [ -n "$uart_runner" ]; then
        uart_test
    fi

    [ "$stack_peak" -gt 0 ] || fail "$board: no STATUS line reported stack_peak_bytes"
    [ "$stack_peak" -le "$stack_estimate" ] ||
        fail "$board: stack peak $stack_peak B exceeds the planner's stack estimate $stack_estimate B (raise firmware.stack_reserve in $toml)"
    echo "  ok: stack peak $stack_peak B ≤ planner stack estimate $stack_estimate B ($((stack_peak * 100 / stack_estimate)) %)"
done

echo
echo "qemu-test: all boards passed (${BOARDS[*]})"
