//! Integer-kernel check and microbenchmark for the board (`cargo xtask kernel-check` runs it
//! under QEMU; built only with `--features kernel-check`).
//!
//! Reads one request line on semihosting stdin:
//!
//! * `check N SEED`: N random cases (rows 1..=7, 1..=19 blocks a row, so the DSP kernel's
//!   8-block chunks, an odd last row and a partial chunk all occur; random f16 scales
//!   including subnormal ones, weight quants over the whole i8 range, activation blocks from
//!   random vectors of random magnitude, some all zero, some saturated at ±127). Every kernel
//!   path the target runs is compared with `portable`, bit for bit, for Q8_0 and Q4_0, and
//!   entries of `out` past the rows must stay untouched. Prints `ok <path> <cases>` per path
//!   and `PASS`, or `FAIL ...`; exits 0 or 1. Then the f16 ↔ f32 conversions of the state
//!   (`half_convert`, VCVTB/VCVTT where the core has them) against `half`'s software ones, bit
//!   for bit: every one of the 65,536 halves widened, and, for every pair of neighbouring
//!   finite halves of either sign, f32 values at the lower one and at, one ulp below and one
//!   ulp above their midpoint narrowed (the rounding boundaries), with infinities, NaNs of
//!   every kind and f32 subnormals; each one value at a time and a block at a time. Prints
//!   `ok f16 hardware|software <widened> <narrowed>`. Then, where the build has them, the
//!   f16 state's pass kernels (`state_kernels`): a fused decode step (`step_delta`,
//!   `step_decay`) and merge against the plain separate steps (transition, insert, read) and
//!   an element-by-element merge, bit for bit
//!   in the state and the readout, over 40 tokens of random keys, queries, values, gates and
//!   level weights (small enough for subnormal halves too) on a 5-level state, for row
//!   lengths that the kernel covers whole (16, 24), in part (12) and not at all (7), and with
//!   the state a word aligned and off a word (where the f16 kernel declines), for f16 and f32
//!   storage. Prints `ok state kernels f16|f32 <cases> steps` or `ok state kernels: none in
//!   this build`.
//! * `bench q8_0|q4_0 PATH ROWS BLOCKS REPS`: REPS matvecs of a ROWS × 32·BLOCKS matrix on
//!   PATH (a `KernelPath` name). Instructions per MAC = the difference of the instruction
//!   counts of REPS and 0 repetitions / (REPS · ROWS · 32 · BLOCKS).
#![no_std]
#![no_main]

use loglinear_runtime::fenwick::{state_len, FenwickState, HeadStep, StateElem};
use loglinear_runtime::half_convert;
use loglinear_runtime::quant::{
    self, portable, quantize_activations, ActBlock, BlockQ4_0, BlockQ8_0, KernelPath, QK,
};
use loglinear_runtime::state_kernels;
use loglinear_runtime::LevelPolicy;
use semihosting::io::Read as _;
use semihosting::println;

#[cfg(target_arch = "arm")]
use cortex_m as _;

/// Largest case of `check`: 7 rows × 19 blocks.
const CHECK_ROWS: usize = 7;
const CHECK_BLOCKS: usize = 19;
/// Largest `bench` matrix, in blocks (on the stack: ~70 KB on the 4 MiB MPS2 boards, ~3 KB
/// on the 16 KiB micro:bit).
#[cfg(target_abi = "eabihf")]
const BENCH_BLOCKS: usize = 2048;
#[cfg(not(target_abi = "eabihf"))]
const BENCH_BLOCKS: usize = 96;
const BENCH_COLS_BLOCKS: usize = 32;

/// xorshift32.
struct Rng(u32);

impl Rng {
    fn next(&mut self) -> u32 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.0 = x;
        x
    }

    fn below(&mut self, n: u32) -> u32 {
        self.next() % n
    }

    /// A finite f16 scale: any exponent but inf/NaN (subnormals included), either sign.
    fn scale(&mut self) -> half::f16 {
        let exp = self.below(31) as u16;
        let bits = ((self.next() as u16) & 0x83FF) | (exp << 10);
        half::f16::from_bits(bits)
    }

    fn i8(&mut self) -> i8 {
        self.next() as i8
    }
}

fn fill_q8(rng: &mut Rng, w: &mut [BlockQ8_0]) {
    for b in w {
        b.d = rng.scale();
        for q in b.qs.iter_mut() {
            *q = rng.i8();
        }
    }
}

fn fill_q4(rng: &mut Rng, w: &mut [BlockQ4_0]) {
    for b in w {
        b.d = rng.scale();
        for q in b.qs.iter_mut() {
            *q = rng.next() as u8;
        }
    }
}

/// Activation blocks: quantized random vectors of random magnitude; now and then an all-zero
/// block or one whose quants are all ±127.
fn fill_act(rng: &mut Rng, act: &mut [ActBlock]) {
    let mut x = [0f32; QK];
    for a in act.iter_mut() {
        match rng.below(8) {
            0 => *a = ActBlock::default(),
            1 => {
                let s = if rng.below(2) == 0 { 127 } else { -127 };
                *a = ActBlock {
                    d: 0.01,
                    sum: 32 * s as i32,
                    qs: [s; QK],
                };
            }
            _ => {
                let mag = (1u32 << rng.below(12)) as f32 / 64.0;
                for v in x.iter_mut() {
                    *v = (rng.next() as i32 >> 8) as f32 / (1u32 << 23) as f32 * mag;
                }
                let _ = quantize_activations(&x, core::slice::from_mut(a));
            }
        }
    }
}

const SENTINEL: f32 = -1234.5;

fn check(cases: u32, seed: u32) -> bool {
    let mut rng = Rng(seed | 1);
    let mut w8 = [BlockQ8_0 {
        d: half::f16::ZERO,
        qs: [0; QK],
    }; CHECK_ROWS * CHECK_BLOCKS];
    let mut w4 = [BlockQ4_0 {
        d: half::f16::ZERO,
        qs: [0; QK / 2],
    }; CHECK_ROWS * CHECK_BLOCKS];
    let mut act = [ActBlock::default(); CHECK_BLOCKS];
    let mut want = [0f32; CHECK_ROWS + 1];
    let mut got = [0f32; CHECK_ROWS + 1];
    let mut tested = [0u32; KernelPath::ALL.len()];
    let mut failed = [0u32; KernelPath::ALL.len()];
    for case in 0..cases {
        let rows = 1 + rng.below(CHECK_ROWS as u32) as usize;
        let blocks = 1 + rng.below(CHECK_BLOCKS as u32) as usize;
        let (w8, w4) = (&mut w8[..rows * blocks], &mut w4[..rows * blocks]);
        fill_q8(&mut rng, w8);
        fill_q4(&mut rng, w4);
        let act = &mut act[..blocks];
        fill_act(&mut rng, act);
        for (i, path) in KernelPath::ALL.iter().enumerate() {
            if !path.is_available() {
                continue;
            }
            for kind in ["q8_0", "q4_0"] {
                want.fill(SENTINEL);
                got.fill(SENTINEL);
                let (want, got) = (&mut want[..rows + 1], &mut got[..rows + 1]);
                if kind == "q8_0" {
                    portable::matvec_q8_0(w8, act, want);
                    quant::matvec_q8_0_on(*path, w8, act, got);
                } else {
                    portable::matvec_q4_0(w4, act, want);
                    quant::matvec_q4_0_on(*path, w4, act, got);
                }
                for (r, (a, b)) in want.iter().zip(got.iter()).enumerate() {
                    if a.to_bits() != b.to_bits() {
                        println!(
                            "FAIL {} {} case {} ({} rows x {} blocks) row {}: portable {:e} ({:#010x}), got {:e} ({:#010x})",
                            path.name(), kind, case, rows, blocks, r, a, a.to_bits(), b, b.to_bits()
                        );
                        failed[i] += 1;
                    }
                }
            }
            tested[i] += 1;
        }
    }
    for ((path, n), f) in KernelPath::ALL.iter().zip(tested).zip(failed) {
        if n > 0 && f == 0 {
            println!(
                "ok {} {} cases bit-identical to portable (q8_0, q4_0)",
                path.name(),
                n
            );
        } else if n > 0 {
            println!("FAIL {} {} of {} rows differ", path.name(), f, n);
        }
    }
    failed.iter().all(|&f| f == 0)
}

/// Shapes of the state check, (heads, dk, dv): rows of 16 and 24 columns are whole kernel
/// blocks, 12 is one block and a rest for the Rust pass, 7 (odd) has no kernel at all. Small,
/// so that the two f32 states (5 KiB) fit the stack of the smallest board that runs the check:
/// most of the b-l475e-iot01a's 96 KiB is its session arena, and board.toml reserves 12 KiB
/// for the stack.
const STATE_SHAPES: [(usize, usize, usize); 4] = [(2, 4, 16), (1, 5, 24), (2, 5, 12), (1, 4, 7)];
/// Levels of the state check: 40 tokens fill the 4 exact levels and saturate the top one.
const STATE_LEVELS: usize = 5;
const STATE_TOKENS: u64 = 40;
/// Elements of the largest state of the check.
const STATE_MAX: usize = STATE_LEVELS * 2 * 4 * 16;

/// f16 storage that starts on a word, so that an offset of one element starts off one.
#[repr(C, align(4))]
struct Halves([half::f16; STATE_MAX + 1]);

/// The state kernels against the plain steps (module doc), for f16 and f32 storage.
fn check_state() -> bool {
    if !state_kernels::AVAILABLE {
        println!("ok state kernels: none in this build");
        return true;
    }
    let f16 = check_state_f16();
    let f32 = check_state_f32();
    f16 && f32
}

// Not inlined, so that the states take stack only on the boards that run them, one type at
// a time.
#[inline(never)]
fn check_state_f16() -> bool {
    let mut fused = Halves([half::f16::ZERO; STATE_MAX + 1]);
    let mut plain = Halves([half::f16::ZERO; STATE_MAX + 1]);
    check_state_of(&mut fused.0, &mut plain.0)
}

#[inline(never)]
fn check_state_f32() -> bool {
    let mut fused = [0f32; STATE_MAX + 1];
    let mut plain = [0f32; STATE_MAX + 1];
    check_state_of(&mut fused, &mut plain)
}

/// §4.2's merge one element at a time, as `FenwickState::merge` states it (S[target] +=
/// 0 + S[0] + … + S[target − 1], then the lower levels zeroed), without its kernel.
fn plain_merge<E: StateElem>(data: &mut [E], policy: LevelPolicy, t: u64, level_len: usize) {
    let Some(target) = policy.merge_target(t) else {
        return;
    };
    let target = target as usize;
    let (low, high) = data.split_at_mut(target * level_len);
    for (j, d) in high[..level_len].iter_mut().enumerate() {
        let mut acc = 0.0f32;
        for level in low.chunks_exact(level_len) {
            acc += level[j].load();
        }
        *d = E::store(d.load() + acc);
    }
    low.fill(E::default());
}

/// A random f32 in ±mag.
fn signed(rng: &mut Rng, mag: f32) -> f32 {
    (rng.next() as i32 >> 8) as f32 / (1u32 << 23) as f32 * mag
}

/// The fused steps and merge on `fused` against the plain ones on `plain` (module doc).
fn check_state_of<E: StateElem>(fused: &mut [E], plain: &mut [E]) -> bool {
    let mut rng = Rng(0x5eed_1234);
    let (mut steps, mut failed) = (0u32, 0u32);
    let policy = LevelPolicy::new(STATE_LEVELS).expect("5 levels");
    for &(heads, dk, dv) in &STATE_SHAPES {
        for offset in [0usize, 1] {
            for delta in [true, false] {
                let n = state_len(STATE_LEVELS, heads, dk, dv);
                let a = &mut fused[offset..offset + n];
                let b = &mut plain[offset..offset + n];
                a.fill(E::default());
                b.fill(E::default());
                let mut sa = FenwickState::new(a, policy, heads, dk, dv).expect("sized");
                let mut sb = FenwickState::new(b, policy, heads, dk, dv).expect("sized");
                for t in 0..STATE_TOKENS {
                    sa.merge(t);
                    plain_merge(sb.as_mut_slice(), policy, t, heads * dk * dv);
                    for head in 0..heads {
                        // Now and then tiny values, whose products narrow to subnormal halves.
                        let mag = if rng.below(4) == 0 { 1.0e-4 } else { 1.0 };
                        let mut k = [0f32; 16];
                        let mut q = [0f32; 16];
                        let mut v = [0f32; 32];
                        let mut lams = [0f32; STATE_LEVELS];
                        k.iter_mut().for_each(|x| *x = signed(&mut rng, mag));
                        q.iter_mut().for_each(|x| *x = signed(&mut rng, 1.0));
                        v.iter_mut().for_each(|x| *x = signed(&mut rng, 2.0));
                        lams.iter_mut().for_each(|x| *x = signed(&mut rng, 1.5));
                        let alpha = 0.5 + signed(&mut rng, 0.5).abs();
                        let beta = signed(&mut rng, 1.0).abs();
                        let (k, q) = (&k[..dk], &q[..dk]);
                        let lambda = |l: u32| lams[l as usize];
                        let mut got = v;
                        let step = HeadStep {
                            t,
                            head,
                            k,
                            q,
                            lambda,
                            v_out: &mut got[..dv],
                        };
                        let mut want = [0f32; 32];
                        let mut u = [0f32; 32];
                        if delta {
                            sa.step_delta(step, alpha, beta);
                            sb.transition_delta(t, head, alpha, beta, k, &mut u);
                            sb.insert(head, k, &v[..dv], beta);
                        } else {
                            sa.step_decay(step, alpha);
                            sb.transition_decay(t, head, alpha);
                            sb.insert(head, k, &v[..dv], 1.0);
                        }
                        sb.read(t, head, q, lambda, &mut want[..dv]);
                        let out_ok = got[..dv]
                            .iter()
                            .zip(&want[..dv])
                            .all(|(x, y)| x.to_bits() == y.to_bits());
                        // Widening is exact and one-to-one, so equal bits after it are
                        // equal stored bits.
                        let state_ok = sa
                            .as_slice()
                            .iter()
                            .zip(sb.as_slice())
                            .all(|(x, y)| x.load().to_bits() == y.load().to_bits());
                        if !(out_ok && state_ok) {
                            failed += 1;
                            if failed <= 5 {
                                println!(
                                    "FAIL state {} {} {heads}x{dk}x{dv} offset {offset} t {t} head {head}: readout {} state {}",
                                    E::NAME,
                                    if delta { "delta" } else { "decay" },
                                    if out_ok { "same" } else { "differs" },
                                    if state_ok { "same" } else { "differs" },
                                );
                            }
                        }
                        steps += 1;
                    }
                }
            }
        }
    }
    if failed == 0 {
        println!("ok state kernels {} {steps} steps", E::NAME);
    } else {
        println!(
            "FAIL state kernels {}: {failed} of {steps} steps differ",
            E::NAME
        );
    }
    failed == 0
}

/// Values per block of the slice conversions: odd, so that each block has pairs and a last
/// single value.
const F16_BLOCK: usize = 15;

/// `half_convert` against `half`'s software conversion (module doc).
fn check_f16() -> bool {
    let mut failed = 0u32;
    // f16 → f32: every half, scalar and a block at a time.
    let mut halves = [half::f16::ZERO; F16_BLOCK];
    let mut wide = [0f32; F16_BLOCK];
    let mut widened = 0u32;
    let mut next = 0u32;
    while next <= 0xFFFF {
        let n = (0x1_0000 - next).min(F16_BLOCK as u32) as usize;
        for (i, h) in halves[..n].iter_mut().enumerate() {
            *h = half::f16::from_bits((next + i as u32) as u16);
        }
        half_convert::widen_slice(&halves[..n], &mut wide[..n]);
        for (h, w) in halves[..n].iter().zip(&wide[..n]) {
            let want = h.to_f32().to_bits();
            let one = half_convert::widen(*h).to_bits();
            if one != want || w.to_bits() != want {
                if failed < 10 {
                    println!(
                        "FAIL f16 widen {:#06x}: half {:#010x}, one {:#010x}, block {:#010x}",
                        h.to_bits(),
                        want,
                        one,
                        w.to_bits()
                    );
                }
                failed += 1;
            }
        }
        widened += n as u32;
        next += n as u32;
    }
    // f32 → f16: a block of test values at a time.
    let mut narrowed = 0u32;
    let mut block = F32Block::default();
    for sign in [0u16, 0x8000] {
        for h in 0..0x7C00u16 {
            let lo = half::f16::from_bits(sign | h).to_f32();
            let hi = if h == 0x7BFF {
                // The next value past the largest half, where an infinity rounds from.
                if sign == 0 {
                    65536.0
                } else {
                    -65536.0
                }
            } else {
                half::f16::from_bits(sign | (h + 1)).to_f32()
            };
            let mid = (lo + hi) * 0.5;
            for x in [
                lo,
                f32::from_bits(mid.to_bits() - 1),
                mid,
                f32::from_bits(mid.to_bits() + 1),
            ] {
                block.push(x, &mut failed);
            }
        }
    }
    const SPECIAL: [u32; 16] = [
        0x7F80_0000,
        0xFF80_0000, // infinities
        0x7FC0_0000,
        0xFFC0_0000,
        0x7FFF_FFFF,
        0x7FC0_2001, // quiet NaNs, payloads
        0x7F80_0001,
        0x7FA0_0000,
        0xFF80_2000,
        0x7FBF_FFFF, // signalling NaNs
        0x0000_0001,
        0x807F_FFFF,
        0x0080_0000, // f32 subnormals, the smallest normal
        0x7F7F_FFFF,
        0x4780_0000,
        0x477F_F000, // the largest f32, 65536, 65520 (a tie: to inf)
    ];
    for bits in SPECIAL {
        block.push(f32::from_bits(bits), &mut failed);
    }
    block.flush(&mut failed);
    narrowed += block.tested;
    let mode = if half_convert::HARDWARE {
        "hardware"
    } else {
        "software"
    };
    if failed == 0 {
        println!(
            "ok f16 {} {} widened {} narrowed bit-identical to half",
            mode, widened, narrowed
        );
    } else {
        println!("FAIL f16 {} {} conversions differ from half", mode, failed);
    }
    failed == 0
}

/// f32 values collected for [`half_convert::narrow_slice_read_back`], checked a block at a time.
#[derive(Default)]
struct F32Block {
    x: [f32; F16_BLOCK],
    len: usize,
    tested: u32,
}

impl F32Block {
    fn push(&mut self, x: f32, failed: &mut u32) {
        self.x[self.len] = x;
        self.len += 1;
        if self.len == F16_BLOCK {
            self.flush(failed);
        }
    }

    /// Narrows the block's values scalar and as a slice, and compares both and the values read
    /// back with `half`.
    fn flush(&mut self, failed: &mut u32) {
        let n = self.len;
        let mut back = self.x;
        let mut halves = [half::f16::ZERO; F16_BLOCK];
        half_convert::narrow_slice_read_back(&mut back[..n], &mut halves[..n]);
        for ((x, h), b) in self.x[..n].iter().zip(&halves[..n]).zip(&back[..n]) {
            let want = half::f16::from_f32(*x);
            let one = half_convert::narrow(*x);
            let ok = one.to_bits() == want.to_bits()
                && h.to_bits() == want.to_bits()
                && b.to_bits() == want.to_f32().to_bits();
            if !ok {
                if *failed < 10 {
                    println!(
                        "FAIL f16 narrow {:#010x}: half {:#06x}, one {:#06x}, block {:#06x} read back {:#010x}",
                        x.to_bits(), want.to_bits(), one.to_bits(), h.to_bits(), b.to_bits()
                    );
                }
                *failed += 1;
            }
        }
        self.tested += n as u32;
        self.len = 0;
    }
}

fn bench(kind: &str, path: &str, rows: usize, blocks: usize, reps: u32) -> bool {
    let Some(path) = KernelPath::ALL.iter().copied().find(|p| p.name() == path) else {
        println!("FAIL unknown path {}", path);
        return false;
    };
    if !path.is_available() || rows * blocks > BENCH_BLOCKS || blocks > BENCH_COLS_BLOCKS {
        println!("FAIL path unavailable or matrix too large");
        return false;
    }
    let mut rng = Rng(12345);
    let mut act = [ActBlock::default(); BENCH_COLS_BLOCKS];
    let act = &mut act[..blocks];
    fill_act(&mut rng, act);
    let mut out = [0f32; BENCH_BLOCKS];
    let out = &mut out[..rows];
    let mut check = 0u32;
    match kind {
        "q8_0" => {
            let mut w = [BlockQ8_0 {
                d: half::f16::ZERO,
                qs: [0; QK],
            }; BENCH_BLOCKS];
            let w = &mut w[..rows * blocks];
            fill_q8(&mut rng, w);
            for _ in 0..reps {
                quant::matvec_q8_0_on(path, w, act, out);
                check ^= out[0].to_bits();
            }
        }
        "q4_0" => {
            let mut w = [BlockQ4_0 {
                d: half::f16::ZERO,
                qs: [0; QK / 2],
            }; BENCH_BLOCKS];
            let w = &mut w[..rows * blocks];
            fill_q4(&mut rng, w);
            for _ in 0..reps {
                quant::matvec_q4_0_on(path, w, act, out);
                check ^= out[0].to_bits();
            }
        }
        _ => {
            println!("FAIL kind {} is not q8_0 or q4_0", kind);
            return false;
        }
    }
    println!(
        "DONE {} {} {}x{} reps={} macs={} check={:#x}",
        kind,
        path.name(),
        rows,
        blocks * QK,
        reps,
        reps as usize * rows * blocks * QK,
        check
    );
    true
}

fn run() -> bool {
    let mut line = [0u8; 128];
    let mut len = 0;
    let Ok(mut stdin) = semihosting::io::stdin() else {
        return false;
    };
    while len < line.len() {
        match stdin.read(&mut line[len..len + 1]) {
            Ok(1) if line[len] != b'\n' => len += 1,
            _ => break,
        }
    }
    let Ok(line) = core::str::from_utf8(&line[..len]) else {
        return false;
    };
    let mut args = line.split_ascii_whitespace();
    let num = |args: &mut core::str::SplitAsciiWhitespace<'_>| -> u32 {
        args.next().and_then(|v| v.parse().ok()).unwrap_or(0)
    };
    match args.next() {
        Some("check") => {
            let n = num(&mut args);
            let seed = num(&mut args);
            // Both, so that a kernel failure still shows the conversions' result.
            let kernels = check(n, seed);
            let f16 = check_f16();
            check_state() && f16 && kernels
        }
        Some("bench") => {
            let kind = args.next().unwrap_or("");
            let path = args.next().unwrap_or("");
            let rows = num(&mut args) as usize;
            let blocks = num(&mut args) as usize;
            let reps = num(&mut args);
            bench(kind, path, rows, blocks, reps)
        }
        _ => {
            println!("FAIL request: check N SEED | bench KIND PATH ROWS BLOCKS REPS");
            false
        }
    }
}

#[cfg_attr(target_arch = "arm", cortex_m_rt::entry)]
#[cfg_attr(target_arch = "riscv32", riscv_rt::entry)]
fn main() -> ! {
    let pass = run();
    if pass {
        println!("PASS");
    }
    semihosting::process::exit(if pass { 0 } else { 1 })
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    semihosting::eprintln!("panic: {}", info);
    semihosting::process::exit(101)
}
