//! The WGSL backward of the Log-Linear Gated DeltaNet operator (`grad::op_gdn`):
//! 1. every `gdn` case of golden/operator: dq, dk, dv, dg, dbeta, dlam against the fp64
//!    autograd gradients (relative L2 ≤ 1e-4), dlam exactly 0 above bitlen(T − 1);
//! 2. a longer random case (several chunk levels, partial last chunk) against central finite
//!    differences of L = Σ o·d_o through an fp64 recurrent forward (spec §4.2).

use loglinear_host_gpu::chunk_scan::{Form, ScanInputs, ScanShape};
use loglinear_host_gpu::grad::op_gdn::{run_backward, run_backward_grouped, GdnBackward};
use loglinear_host_gpu::grad::OpGradIo;
use loglinear_host_gpu::Gpu;
use loglinear_tests::random::{normal, SplitMix64};
use loglinear_tests::*;

const TOL: f64 = 1e-4;

/// ||a − b|| / ||b||.
fn rel_l2(a: &[f32], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    let mut num = 0.0;
    let mut den = 0.0;
    for (&x, &y) in a.iter().zip(b) {
        num += (x as f64 - y) * (x as f64 - y);
        den += y * y;
    }
    (num / den.max(1e-300)).sqrt()
}

fn bitlen(x: usize) -> usize {
    (usize::BITS - x.leading_zeros()) as usize
}

fn shape(t: usize, h: usize, dk: usize, dv: usize, cols: usize) -> ScanShape {
    ScanShape {
        form: Form::Gdn,
        t,
        heads: h,
        qk_heads: h,
        dk,
        dv,
        lambda_cols: cols,
        levels: cols,
    }
}

/// dlam must be exactly 0 in columns l > bitlen(T − 1).
fn check_dead_columns(dlam: &[f32], t: usize, cols: usize, what: &str) {
    let first_dead = bitlen(t - 1) + 1;
    for (i, &x) in dlam.iter().enumerate() {
        if i % cols >= first_dead {
            assert_eq!(x, 0.0, "{what}: dlam column {} is {x}", i % cols);
        }
    }
}

#[test]
fn gdn_backward_matches_golden_operator_gradients() {
    let gpu = Gpu::new().expect("GPU adapter (lavapipe in CI)");
    let m = manifest();
    let mut checked = 0;
    let mut worst = (0.0f64, String::new());
    for (name, entry) in cases(&m, "operator") {
        if entry["form"].as_str() != Some("gdn") {
            continue;
        }
        let dim = |k: &str| entry[k].as_u64().unwrap_or_else(|| panic!("{name}: `{k}`")) as usize;
        let (b_n, t, h, dk, dv) = (dim("B"), dim("T"), dim("H"), dim("dk"), dim("dv"));
        assert_eq!(b_n, 1, "{name}: batch");
        let arrays = read_arrays(&golden_dir().join(entry["file"].as_str().unwrap()));
        let f = |key: &str| get(&arrays, key, &name).f32();
        let r = |key: &str| get(&arrays, key, &name).data.clone();
        let cols = get(&arrays, "lam", &name).shape[3];
        let inputs = ScanInputs {
            q: &f("q"),
            k: &f("k"),
            v: &f("v"),
            g: &f("g"),
            beta: &f("beta"),
            lam: &f("lam"),
        };
        let grads = run_backward(&gpu, shape(t, h, dk, dv, cols), &inputs, &f("do"))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let pairs: [(&str, &[f32]); 6] = [
            ("dq", &grads.dq),
            ("dk", &grads.dk),
            ("dv", &grads.dv),
            ("dg", &grads.dg),
            ("dbeta", &grads.dbeta),
            ("dlam", &grads.dlam),
        ];
        let mut line = format!("{name}:");
        for (key, ours) in pairs {
            let e = rel_l2(ours, &r(key));
            line += &format!(" {key} {e:.2e}");
            if e > worst.0 {
                worst = (e, format!("{name} {key}"));
            }
            assert!(
                e <= TOL,
                "{name} {key}: relative L2 error {e:.3e} > {TOL:e}"
            );
        }
        eprintln!("{line}");
        check_dead_columns(&grads.dlam, t, cols, &name);
        checked += 1;
    }
    eprintln!(
        "checked {checked} gdn cases; worst relative L2 {:.3e} ({})",
        worst.0, worst.1
    );
    assert!(checked > 0, "the golden set has no gdn operator case");
}

/// Inputs of one case, f32-representable values held as f64.
#[derive(Clone)]
struct Inputs {
    t: usize,
    h: usize,
    dk: usize,
    dv: usize,
    cols: usize,
    q: Vec<f64>,
    k: Vec<f64>,
    v: Vec<f64>,
    g: Vec<f64>,
    beta: Vec<f64>,
    lam: Vec<f64>,
    d_o: Vec<f64>,
}

impl Inputs {
    /// q, k, v, g, β, λ in f32, the GPU's inputs.
    fn f32_inputs(&self) -> [Vec<f32>; 6] {
        [&self.q, &self.k, &self.v, &self.g, &self.beta, &self.lam]
            .map(|x| x.iter().map(|&a| a as f32).collect())
    }
}

/// The runner's view of [`Inputs::f32_inputs`].
fn scan_inputs(x: &[Vec<f32>; 6]) -> ScanInputs<'_> {
    let [q, k, v, g, beta, lam] = x;
    ScanInputs {
        q,
        k,
        v,
        g,
        beta,
        lam,
    }
}

/// L = Σ o·d_o with o from the recurrent (decoding) form of spec §4.2, in f64.
fn loss_recurrent(x: &Inputs) -> f64 {
    let (t_n, hn, dk, dv, cols) = (x.t, x.h, x.dk, x.dv, x.cols);
    let mut loss = 0.0;
    for h in 0..hn {
        let mut s = vec![vec![0.0f64; dk * dv]; cols];
        for t in 0..t_n {
            if t > 0 {
                let m = t.trailing_zeros() as usize;
                for l in 0..=m {
                    let lvl = std::mem::take(&mut s[l]);
                    for (a, b) in s[m + 1].iter_mut().zip(&lvl) {
                        *a += b;
                    }
                    s[l] = vec![0.0; dk * dv];
                }
            }
            let kt = &x.k[(t * hn + h) * dk..][..dk];
            let qt = &x.q[(t * hn + h) * dk..][..dk];
            let vt = &x.v[(t * hn + h) * dv..][..dv];
            let alpha = x.g[t * hn + h].exp();
            let b = x.beta[t * hn + h];
            for lvl in s.iter_mut().skip(1) {
                // S = α (S − β k (kᵀ S))
                let mut ks = vec![0.0; dv];
                for i in 0..dk {
                    for d in 0..dv {
                        ks[d] += kt[i] * lvl[i * dv + d];
                    }
                }
                for i in 0..dk {
                    for d in 0..dv {
                        lvl[i * dv + d] = alpha * (lvl[i * dv + d] - b * kt[i] * ks[d]);
                    }
                }
            }
            for i in 0..dk {
                for d in 0..dv {
                    s[0][i * dv + d] = b * kt[i] * vt[d];
                }
            }
            let dot = &x.d_o[(t * hn + h) * dv..][..dv];
            for (l, lvl) in s.iter().enumerate() {
                let w = x.lam[(t * hn + h) * cols + l];
                for i in 0..dk {
                    for d in 0..dv {
                        loss += w * qt[i] * lvl[i * dv + d] * dot[d];
                    }
                }
            }
        }
    }
    loss
}

fn random_inputs(t: usize, h: usize, dk: usize, dv: usize, cols: usize, seed: u64) -> Inputs {
    let mut rng = SplitMix64::new(seed);
    let r32 = |x: f64| x as f32 as f64;
    let mut q = Vec::new();
    let mut k = Vec::new();
    for _ in 0..t * h {
        let qs: Vec<f64> = (0..dk).map(|_| normal(&mut rng)).collect();
        let ks: Vec<f64> = (0..dk).map(|_| normal(&mut rng)).collect();
        let norm = ks.iter().map(|x| x * x).sum::<f64>().sqrt();
        q.extend(qs.iter().map(|x| r32(x / (dk as f64).sqrt())));
        k.extend(ks.iter().map(|x| r32(x / norm)));
    }
    let v = (0..t * h * dv).map(|_| r32(normal(&mut rng))).collect();
    // Mostly slow decays (long-range levels matter), some fast ones.
    let g = (0..t * h)
        .map(|_| r32(-(normal(&mut rng) - 4.0).exp()))
        .collect();
    let beta = (0..t * h)
        .map(|_| r32(1.0 / (1.0 + (-normal(&mut rng)).exp())))
        .collect();
    let lam = (0..t * h * cols)
        .map(|_| r32((1.0 + normal(&mut rng).exp()).ln()))
        .collect();
    let d_o = (0..t * h * dv).map(|_| r32(normal(&mut rng))).collect();
    Inputs {
        t,
        h,
        dk,
        dv,
        cols,
        q,
        k,
        v,
        g,
        beta,
        lam,
        d_o,
    }
}

/// The GPU gradients of a random case against central finite differences of the f64
/// recurrent loss at a few coordinates of every input (one per token of `tokens`).
fn check_finite_differences(gpu: &Gpu, dims: [usize; 5], seed: u64, tokens: &[usize]) {
    let [t, h, dk, dv, cols] = dims;
    let what = format!("random T={t} H={h} dk={dk} dv={dv}");
    let x = random_inputs(t, h, dk, dv, cols, seed);
    let f32s = |v: &[f64]| v.iter().map(|&a| a as f32).collect::<Vec<f32>>();
    let xs = x.f32_inputs();
    let grads = run_backward(
        gpu,
        shape(t, h, dk, dv, cols),
        &scan_inputs(&xs),
        &f32s(&x.d_o),
    )
    .expect("GDN backward");
    check_dead_columns(&grads.dlam, t, cols, &what);

    // Each token with a random head and inner index.
    let mut rng = SplitMix64::new(77);
    let eps = 1e-5;
    type Pick<'a> = (&'a str, usize, &'a [f32]);
    let inputs: [Pick; 6] = [
        ("q", dk, &grads.dq),
        ("k", dk, &grads.dk),
        ("v", dv, &grads.dv),
        ("g", 1, &grads.dg),
        ("beta", 1, &grads.dbeta),
        ("lam", cols, &grads.dlam),
    ];
    for (name, inner, ours) in inputs {
        let mut got = Vec::new();
        let mut want = Vec::new();
        for &tok in tokens {
            let head = rng.below(h as u64) as usize;
            let j = if name == "lam" {
                // A level token `tok` reads: 0, or ℓ with bit ℓ − 1 of tok set.
                let live: Vec<usize> = (0..cols)
                    .filter(|&l| l == 0 || (tok >> (l - 1)) & 1 == 1)
                    .collect();
                live[rng.below(live.len() as u64) as usize]
            } else {
                rng.below(inner as u64) as usize
            };
            let idx = (tok * h + head) * inner + j;
            let bump = |d: f64| {
                let mut y = x.clone();
                let field = match name {
                    "q" => &mut y.q,
                    "k" => &mut y.k,
                    "v" => &mut y.v,
                    "g" => &mut y.g,
                    "beta" => &mut y.beta,
                    _ => &mut y.lam,
                };
                field[idx] += d;
                loss_recurrent(&y)
            };
            let fd = (bump(eps) - bump(-eps)) / (2.0 * eps);
            got.push(ours[idx]);
            want.push(fd);
        }
        let e = rel_l2(&got, &want);
        eprintln!("{what}: d{name} vs finite differences: relative L2 {e:.2e}");
        assert!(
            e <= TOL,
            "{what} d{name}: relative L2 error {e:.3e} > {TOL:e}"
        );
    }
}

#[test]
fn gdn_backward_matches_finite_differences_long() {
    let gpu = Gpu::new().expect("GPU adapter (lavapipe in CI)");
    // 11 chunks (4 chunk levels), partial last chunk; tokens at chunk edges and inside.
    let tokens = [0, 1, 62, 63, 64, 65, 127, 128, 300, 511, 512, 640, 698, 699];
    check_finite_differences(&gpu, [700, 2, 16, 8, 15], 0x5eed_1234_abcd_0001, &tokens);
}

#[test]
fn gdn_backward_matches_finite_differences_wide_heads() {
    let gpu = Gpu::new().expect("GPU adapter (lavapipe in CI)");
    // dk = 128, dv = 20 (a partial 8-column scan block), 3 chunks, λ columns exactly needed.
    let tokens = [0, 5, 63, 64, 100, 127, 128, 129];
    check_finite_differences(&gpu, [130, 1, 128, 20, 9], 0x0123_4567_89ab_cdef, &tokens);
}

#[test]
fn gdn_backward_matches_finite_differences_ragged_last_chunk() {
    let gpu = Gpu::new().expect("GPU adapter (lavapipe in CI)");
    // 6 chunks, the last of 7 tokens: the level scans' unrolled loops over a chunk's rows leave
    // a remainder there (chunk 5 reads level 0, so its rows' λ q̃ dOᵀ enter the state
    // gradient), and dk = 18 leaves a remainder of 1 in each dk half of their row products.
    let tokens = [0, 3, 64, 200, 319, 320, 323, 326];
    check_finite_differences(&gpu, [327, 2, 18, 8, 10], 0x7a66_ed00_0000_0327, &tokens);
}

#[test]
fn gdn_backward_encoded_twice_gives_identical_gradients() {
    // Every scratch accumulator is reinitialised by each run and the gradients are
    // overwritten, so a second encode on the same buffers reproduces the first bit for bit.
    let gpu = Gpu::new().expect("GPU adapter (lavapipe in CI)");
    let (t, h, dk, dv, cols) = (150, 2, 16, 8, 9);
    let x = random_inputs(t, h, dk, dv, cols, 99);
    let up = |label: &str, v: &[f64]| {
        let f: Vec<f32> = v.iter().map(|&a| a as f32).collect();
        gpu.storage_from(label, &f).unwrap()
    };
    let (q, k, v, g) = (up("q", &x.q), up("k", &x.k), up("v", &x.v), up("g", &x.g));
    let (beta, lam, d_o) = (up("beta", &x.beta), up("lam", &x.lam), up("d_o", &x.d_o));
    let out = |n: usize| gpu.storage_zeroed("grad", (n * 4) as u64).unwrap();
    let outs = [
        out(t * h * dk),
        out(t * h * dk),
        out(t * h * dv),
        out(t * h),
        out(t * h),
        out(t * h * cols),
    ];
    let bwd = GdnBackward::new(
        &gpu,
        shape(t, h, dk, dv, cols),
        OpGradIo {
            q: &q,
            k: &k,
            v: &v,
            g: &g,
            beta: &beta,
            lam: &lam,
            d_o: &d_o,
            dq: &outs[0],
            dk: &outs[1],
            dv: &outs[2],
            dg: &outs[3],
            dbeta: &outs[4],
            dlam: &outs[5],
        },
    )
    .expect("GDN backward");
    let mut runs = Vec::new();
    for _ in 0..2 {
        let mut enc = gpu.encoder("gdn backward");
        bwd.encode(&mut enc);
        gpu.submit_and_wait(enc).unwrap();
        let all: Vec<Vec<f32>> = outs.iter().map(|b| gpu.read_f32(b).unwrap()).collect();
        runs.push(all);
    }
    assert_eq!(runs[0], runs[1], "second run differs from the first");
    assert!(runs[0][0].iter().any(|&a| a != 0.0), "dq is all zero");
}

#[test]
fn gdn_backward_in_head_groups_equals_all_heads_at_once() {
    // Groups of 2 and 3 of 5 heads (a partial last group) reuse one group's scratch; every
    // gradient must equal the one-group run bit for bit. 3 chunks (2 levels), partial last.
    let gpu = Gpu::new().expect("GPU adapter (lavapipe in CI)");
    let (t, h, dk, dv, cols) = (150, 5, 16, 12, 9);
    let x = random_inputs(t, h, dk, dv, cols, 77);
    let xs = x.f32_inputs();
    let f = |v: &[f64]| v.iter().map(|&a| a as f32).collect::<Vec<f32>>();
    let run = |max_group: usize| {
        run_backward_grouped(
            &gpu,
            shape(t, h, dk, dv, cols),
            max_group,
            &scan_inputs(&xs),
            &f(&x.d_o),
        )
        .expect("GDN backward")
    };
    let all = run(usize::MAX);
    assert!(all.dq.iter().any(|&a| a != 0.0), "dq is all zero");
    for max_group in [1, 2, 3] {
        let grouped = run(max_group);
        let pairs = [
            ("dq", &grouped.dq, &all.dq),
            ("dk", &grouped.dk, &all.dk),
            ("dv", &grouped.dv, &all.dv),
            ("dg", &grouped.dg, &all.dg),
            ("dbeta", &grouped.dbeta, &all.dbeta),
            ("dlam", &grouped.dlam, &all.dlam),
        ];
        for (key, a, b) in pairs {
            assert!(
                a == b,
                "{key}: groups of {max_group} heads differ from one group"
            );
        }
    }
}

/// Wall time of one backward at a training-like shape (lavapipe figures are only indicative).
/// `cargo test --release --test grad_operator_gdn -- --ignored --nocapture`
#[test]
#[ignore = "timing, not a check: run with --ignored --nocapture"]
fn gdn_backward_timing() {
    let gpu = Gpu::new().expect("GPU adapter (lavapipe in CI)");
    let (t, h, dk, dv, cols) = (1024, 2, 64, 128, 15);
    let x = random_inputs(t, h, dk, dv, cols, 5);
    let xs = x.f32_inputs();
    let f32s = |v: &[f64]| v.iter().map(|&a| a as f32).collect::<Vec<f32>>();
    for _ in 0..2 {
        let start = std::time::Instant::now();
        run_backward(
            &gpu,
            shape(t, h, dk, dv, cols),
            &scan_inputs(&xs),
            &f32s(&x.d_o),
        )
        .expect("GDN backward");
        eprintln!(
            "T={t} H={h} dk={dk} dv={dv}: backward (with upload, compile and read-back) {:.1} ms",
            start.elapsed().as_secs_f64() * 1e3
        );
    }
}

#[test]
fn gdn_backward_rejects_bad_shapes() {
    let gpu = Gpu::new().expect("GPU adapter (lavapipe in CI)");
    let (t, h, dk, dv) = (100, 1, 4, 4);
    let x = random_inputs(t, h, dk, dv, 8, 3);
    let f32s = |v: &[f64]| v.iter().map(|&a| a as f32).collect::<Vec<f32>>();
    let xs = x.f32_inputs();
    let run = |s: ScanShape, lam: &[f32]| {
        let inputs = ScanInputs {
            lam,
            ..scan_inputs(&xs)
        };
        run_backward(&gpu, s, &inputs, &f32s(&x.d_o))
    };
    let lam = f32s(&x.lam);
    assert!(run(shape(t, h, dk, dv, 8), &lam).is_ok());
    // T = 100 needs bitlen(99) + 1 = 8 exact levels.
    let few = shape(t, h, dk, dv, 7);
    let lam7: Vec<f32> = lam.chunks(8).flat_map(|r| r[..7].to_vec()).collect();
    assert!(run(few, &lam7).is_err(), "7 levels accepted for T = 100");
    let m2 = ScanShape {
        form: Form::Mamba2,
        ..shape(t, h, dk, dv, 8)
    };
    assert!(run(m2, &lam).is_err(), "Mamba-2 shape accepted");
    assert!(
        run(shape(t, h, dk, dv, 8), &lam[1..]).is_err(),
        "short λ accepted"
    );
}
