//! How far `micromath`'s fast approximations are from `libm` on the inputs the layers really
//! feed `exp`, `ln`, `sqrt` and `sigmoid`, and so why `runtime/src/math.rs` uses `libm`.
//!
//! Inputs come from the golden layer files (`tests/golden/layer/*.safetensors`, both weight
//! styles): the stored `T<n>.inter.*` intermediates, plus the few pre-activation values the
//! files do not store (conv outputs before SiLU, GDN `a`/`b`/gate/λ projections), which are
//! recomputed in f64 from the stored weights and `T<n>.x` and checked against the stored
//! post-activation intermediates before use. Shapes come from each case's manifest config.
//!
//! * `exp`: α = e^g (g ≤ 0), e^A_log, e^x inside softplus, e^−x inside sigmoid / SiLU.
//! * `ln`: ln(1 + e^x) on every softplus input x ≤ 20 (the non-linear regime).
//! * `sqrt`: RMSNorm's mean(x²) + eps (block norms, Mamba-2 gated norm, GDN o_norm), l2norm's
//!   Σx² + 1e-6 (GDN q, k) and √dk.
//! * `sigmoid`: 1/(1 + e^−x) on GDN β logits and every SiLU input (z, conv outputs, gates).
//!
//! Relative error is |approx − ref| / |ref| with the `libm` f32 result as the reference
//! (`math.rs`'s functions for sigmoid); the last column checks `libm` itself against f64.
//!
//! Run: `cargo test --release -p loglinear-tests --test micromath_error -- --nocapture`.

use loglinear_runtime::math;
use loglinear_tests::{get, layer_inter_length, layer_lengths, read_arrays, Array};
use micromath::F32Ext;
use std::collections::HashMap;

/// Operator tolerance of the golden tests for an exact-fp32 implementation (golden README §7).
const OPERATOR_TOL: f64 = 2e-5;

/// `W x` for every row of `x` ([T, D]), W [out, D]: returns [T, out].
fn project(w: &[f64], x: &[f64], d: usize) -> Vec<f64> {
    let out = w.len() / d;
    let mut y = Vec::with_capacity(x.len() / d * out);
    for xr in x.chunks_exact(d) {
        for wr in w.chunks_exact(d) {
            y.push(wr.iter().zip(xr).map(|(a, b)| a * b).sum());
        }
    }
    y
}

/// Causal depthwise conv over time (before SiLU): x [T, C], weight [C, W], bias [C].
fn conv(x: &[f64], weight: &[f64], bias: Option<&[f64]>, c: usize, w: usize) -> Vec<f64> {
    let t_len = x.len() / c;
    let mut y = vec![0.0; x.len()];
    for t in 0..t_len {
        for ch in 0..c {
            let mut acc = bias.map_or(0.0, |b| b[ch]);
            for k in 0..w {
                // Column k sees x[t - (w-1) + k].
                if let Some(s) = (t + k).checked_sub(w - 1) {
                    acc += weight[ch * w + k] * x[s * c + ch];
                }
            }
            y[t * c + ch] = acc;
        }
    }
    y
}

fn sigmoid64(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}
fn silu64(x: f64) -> f64 {
    x * sigmoid64(x)
}
fn softplus64(x: f64) -> f64 {
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

/// Largest |a − b| / max(|b|, floor) over the pairs; panics with `what` if above `tol`.
fn check_close(what: &str, a: &[f64], b: &[f64], tol: f64) {
    assert_eq!(a.len(), b.len(), "{what}: length");
    let scale = b.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let err = a
        .iter()
        .zip(b)
        .fold(0.0f64, |m, (x, y)| m.max((x - y).abs()))
        / scale.max(1e-30);
    assert!(
        err < tol,
        "input reconstruction {what}: rel_max {err:.3e} ≥ {tol:.0e}"
    );
}

/// Mean of squares (+ eps) of each `n`-long chunk.
fn mean_squares(x: &[f64], n: usize, eps: f64) -> impl Iterator<Item = f64> + '_ {
    x.chunks_exact(n)
        .map(move |r| r.iter().map(|v| v * v).sum::<f64>() / n as f64 + eps)
}

/// `f(x[i], w[i mod len(w)])` for every element: a per-head vector `w` applied along
/// token-major `[T][heads]` values.
fn per_head(x: &[f64], w: &[f64], f: impl Fn(f64, f64) -> f64) -> Vec<f64> {
    x.iter()
        .enumerate()
        .map(|(i, &v)| f(v, w[i % w.len()]))
        .collect()
}

/// Sum of squares (+ eps) of each `n`-long chunk.
fn sum_squares(x: &[f64], n: usize, eps: f64) -> impl Iterator<Item = f64> + '_ {
    x.chunks_exact(n)
        .map(move |r| r.iter().map(|v| v * v).sum::<f64>() + eps)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Func {
    Exp,
    Ln,
    Sqrt,
    Sigmoid,
    /// ln(1 + e^x) built from the two above (reported, not asserted: it follows from them).
    Softplus,
}

impl Func {
    fn name(self) -> &'static str {
        match self {
            Func::Exp => "exp",
            Func::Ln => "ln",
            Func::Sqrt => "sqrt",
            Func::Sigmoid => "sigmoid",
            Func::Softplus => "softplus",
        }
    }
    /// micromath's version.
    fn micromath(self, x: f32) -> f32 {
        match self {
            Func::Exp => F32Ext::exp(x),
            Func::Ln => F32Ext::ln(x),
            Func::Sqrt => F32Ext::sqrt(x),
            Func::Sigmoid => 1.0 / (1.0 + F32Ext::exp(-x)),
            Func::Softplus => {
                if x > 20.0 {
                    x
                } else {
                    F32Ext::ln(1.0 + F32Ext::exp(x))
                }
            }
        }
    }
    /// libm's version (what `math.rs` does).
    fn libm(self, x: f32) -> f32 {
        match self {
            Func::Exp => libm::expf(x),
            Func::Ln => libm::logf(x),
            Func::Sqrt => libm::sqrtf(x),
            Func::Sigmoid => math::sigmoid(x),
            Func::Softplus => math::softplus(x),
        }
    }
    /// f64 reference for libm's own error.
    fn exact(self, x: f32) -> f64 {
        let x = x as f64;
        match self {
            Func::Exp => libm::exp(x),
            Func::Ln => libm::log(x),
            Func::Sqrt => libm::sqrt(x),
            Func::Sigmoid => {
                if x >= 0.0 {
                    1.0 / (1.0 + libm::exp(-x))
                } else {
                    let e = libm::exp(x);
                    e / (1.0 + e)
                }
            }
            Func::Softplus => softplus64(x),
        }
    }
}

/// The inputs of one function from one source.
struct Sample {
    func: Func,
    source: &'static str,
    xs: Vec<f32>,
}

#[derive(Default)]
struct Samples(Vec<Sample>);

impl Samples {
    fn add(&mut self, func: Func, source: &'static str, xs: impl IntoIterator<Item = f64>) {
        let xs = xs.into_iter().map(|v| v as f32);
        match self
            .0
            .iter_mut()
            .find(|s| s.func == func && s.source == source)
        {
            Some(s) => s.xs.extend(xs),
            None => self.0.push(Sample {
                func,
                source,
                xs: xs.collect(),
            }),
        }
    }

    /// Every softplus input x: e^x, and ln(1 + e^x) in the non-linear regime.
    fn add_softplus(&mut self, xs: &[f64]) {
        self.add(Func::Exp, "e^x in softplus", xs.iter().copied());
        self.add(Func::Softplus, "softplus inputs", xs.iter().copied());
        // The runtime computes 1 + e^x in f32 with libm, then takes the log.
        self.add(
            Func::Ln,
            "ln(1+e^x), softplus",
            xs.iter()
                .filter(|&&x| x <= 20.0)
                .map(|&x| 1.0 + libm::expf(x as f32) as f64),
        );
    }

    /// SiLU / sigmoid input x: e^−x, and the sigmoid itself.
    fn add_sigmoid(&mut self, xs: &[f64]) {
        self.add(Func::Exp, "e^-x in sigmoid/SiLU", xs.iter().map(|x| -x));
        self.add(Func::Sigmoid, "SiLU/sigmoid inputs", xs.iter().copied());
    }

    /// RMSNorm over each `n`-long chunk of `x`: the square root of mean(x²) + eps.
    fn add_rmsnorm(&mut self, x: &[f64], n: usize, eps: f64) {
        self.add(Func::Sqrt, "RMSNorm mean(x²)+eps", mean_squares(x, n, eps));
    }

    /// The block norms (width `d`) on the stored residual streams: every length's input and
    /// block output, and the mixer output of the length with intermediates.
    fn add_block_norms(&mut self, case: &Case<'_>, d: usize, eps: f64) {
        for t in &case.lengths {
            self.add_rmsnorm(&case.tensor(&format!("T{t}.x")), d, eps);
            self.add_rmsnorm(&case.tensor(&format!("T{t}.y_block")), d, eps);
        }
        self.add_rmsnorm(&case.at("y_mixer"), d, eps);
    }

    /// λ = softplus(L ⊙ λ input) · `scale` (spec §5): the f64 maths checked against the
    /// stored λ, then its softplus inputs sampled.
    fn add_lambda(&mut self, what: &str, lam_in: &[f64], scale: f64, stored: &[f64]) {
        let lam: Vec<f64> = lam_in.iter().map(|&v| softplus64(v) * scale).collect();
        check_close(what, &lam, stored, 1e-6);
        self.add_softplus(lam_in);
    }
}

/// One golden layer file: its tensors, its sequence lengths, the length `t` whose
/// intermediates it stores, and its manifest config.
struct Case<'a> {
    name: &'a str,
    arrays: HashMap<String, Array>,
    lengths: Vec<usize>,
    t: usize,
    config: &'a serde_json::Value,
}

impl<'a> Case<'a> {
    fn new(name: &'a str, arrays: HashMap<String, Array>, config: &'a serde_json::Value) -> Self {
        Self {
            name,
            lengths: layer_lengths(&arrays, name),
            t: layer_inter_length(&arrays, name),
            arrays,
            config,
        }
    }

    /// Tensor `key` as f64.
    fn tensor(&self, key: &str) -> Vec<f64> {
        get(&self.arrays, key, self.name).data.clone()
    }

    /// `T{t}.{name}` at the length with intermediates.
    fn at(&self, name: &str) -> Vec<f64> {
        self.tensor(&format!("T{}.{name}", self.t))
    }

    /// `T{t}.inter.{name}`.
    fn inter(&self, name: &str) -> Vec<f64> {
        self.at(&format!("inter.{name}"))
    }

    /// A whole-number config value.
    fn usize(&self, key: &str) -> usize {
        self.config[key]
            .as_u64()
            .unwrap_or_else(|| panic!("layer config has no `{key}`")) as usize
    }

    fn f64(&self, key: &str) -> f64 {
        self.config[key]
            .as_f64()
            .unwrap_or_else(|| panic!("layer config has no `{key}`"))
    }
}

fn collect_mamba2(s: &mut Samples, case: &Case<'_>, log_linear: bool) {
    let eps = case.f64("layer_norm_epsilon");
    let d = case.usize("hidden_size");
    let di = case.usize("expand") * d;
    let bc = case.usize("n_groups") * case.usize("state_size");
    let conv_dim = di + 2 * bc;
    let width = case.usize("conv_kernel");

    s.add(Func::Exp, "α = e^g (g ≤ 0)", case.inter("g"));
    s.add(Func::Exp, "e^A_log", case.tensor("mixer.A_log"));

    // dt = softplus(dt_raw + dt_bias).
    let dt_raw = case.inter("dt_raw");
    let dt_bias = case.tensor("mixer.dt_bias");
    let sp_in = per_head(&dt_raw, &dt_bias, |v, b| v + b);
    check_close(
        "mamba2 dt",
        &sp_in.iter().map(|&v| softplus64(v)).collect::<Vec<_>>(),
        &case.inter("dt"),
        1e-6,
    );
    s.add_softplus(&sp_in);

    // λ = softplus(L ⊙ dl).
    if log_linear {
        let lam_in = per_head(&case.inter("dl"), &case.tensor("mixer.L"), |v, l| v * l);
        s.add_lambda("mamba2 λ", &lam_in, 1.0, &case.inter("lam"));
    }

    // SiLU inputs: z, and the conv outputs (x | B | C before SiLU).
    let z = case.inter("z");
    s.add_sigmoid(&z);
    let xbc = case.inter("xBC");
    let pre = conv(
        &xbc,
        &case.tensor("mixer.conv1d.weight"),
        Some(&case.tensor("mixer.conv1d.bias")),
        conv_dim,
        width,
    );
    let post: Vec<f64> = pre.iter().map(|&v| silu64(v)).collect();
    let (xs, bs, cs) = (case.inter("xs"), case.inter("B"), case.inter("C"));
    let stored: Vec<f64> = (0..post.len() / conv_dim)
        .flat_map(|t| {
            xs[t * di..(t + 1) * di]
                .iter()
                .chain(&bs[t * bc..(t + 1) * bc])
                .chain(&cs[t * bc..(t + 1) * bc])
                .copied()
                .collect::<Vec<_>>()
        })
        .collect();
    check_close("mamba2 conv", &post, &stored, 1e-6);
    s.add_sigmoid(&pre);

    // RMSNorm: the gated norm over d_inner sees y·SiLU(z).
    let y = case.inter("y");
    let gated: Vec<f64> = y.iter().zip(&z).map(|(a, b)| a * silu64(*b)).collect();
    s.add_rmsnorm(&gated, di, eps);
    s.add_block_norms(case, d, eps);
}

fn collect_gdn(s: &mut Samples, case: &Case<'_>, log_linear: bool) {
    let eps = case.f64("norm_eps");
    let h = case.usize("num_heads");
    let dk = case.usize("head_dim");
    let dv = dk * case.usize("expand_v");
    let width = case.usize("conv_size");
    let x = case.at("x");
    let d = case.usize("hidden_size");

    s.add(Func::Exp, "α = e^g (g ≤ 0)", case.inter("g"));
    let a_log = case.tensor("attn.A_log");
    s.add(Func::Exp, "e^A_log", a_log.iter().copied());

    // g = −e^A_log · softplus(a + dt_bias), a = a_proj x.
    let dt_bias = case.tensor("attn.dt_bias");
    let a = project(&case.tensor("attn.a_proj.weight"), &x, d);
    let sp_in = per_head(&a, &dt_bias, |v, b| v + b);
    let g = per_head(&sp_in, &a_log, |v, a_log| -a_log.exp() * softplus64(v));
    check_close("gdn g", &g, &case.inter("g"), 1e-6);
    s.add_softplus(&sp_in);

    // β = sigmoid(b_proj x).
    let b = project(&case.tensor("attn.b_proj.weight"), &x, d);
    check_close(
        "gdn beta",
        &b.iter().map(|&v| sigmoid64(v)).collect::<Vec<_>>(),
        &case.inter("beta"),
        1e-6,
    );
    s.add_sigmoid(&b);

    // λ_used = softplus(L ⊙ l_proj x) · √dk.
    if log_linear {
        let lin = project(&case.tensor("attn.l_proj.weight"), &x, d);
        let lam_in = per_head(&lin, &case.tensor("attn.L"), |v, l| v * l);
        let stored = case.inter("lam_used");
        s.add_lambda("gdn λ", &lam_in, (dk as f64).sqrt(), &stored);
    }

    // SiLU inputs: q, k, v conv outputs and the output gate.
    for (p, c, stored, ch) in [
        ("attn.q_proj.weight", "attn.q_conv1d.weight", "q", h * dk),
        ("attn.k_proj.weight", "attn.k_conv1d.weight", "k", h * dk),
        ("attn.v_proj.weight", "attn.v_conv1d.weight", "v", h * dv),
    ] {
        let pre = conv(
            &project(&case.tensor(p), &x, d),
            &case.tensor(c),
            None,
            ch,
            width,
        );
        check_close(
            stored,
            &pre.iter().map(|&v| silu64(v)).collect::<Vec<_>>(),
            &case.inter(stored),
            1e-6,
        );
        s.add_sigmoid(&pre);
    }
    let gate = project(&case.tensor("attn.g_proj.weight"), &x, d);
    s.add_sigmoid(&gate);

    // l2norm Σx² + 1e-6 on q, k (per head); o_norm mean over dv; block norms; √dk.
    for name in ["q", "k"] {
        s.add(
            Func::Sqrt,
            "l2norm Σx²+1e-6",
            sum_squares(&case.inter(name), dk, 1e-6),
        );
    }
    s.add_rmsnorm(&case.inter("o"), dv, eps);
    s.add_block_norms(case, d, eps);
    s.add(Func::Sqrt, "√dk", [dk as f64]);
}

/// Max and mean relative error, and max absolute error, of `approx` against `reference`.
fn rel_errors(
    xs: &[f32],
    approx: impl Fn(f32) -> f64,
    reference: impl Fn(f32) -> f64,
) -> (f64, f64, f64) {
    let mut max = 0.0f64;
    let mut sum = 0.0f64;
    let mut abs = 0.0f64;
    for &x in xs {
        let (a, r) = (approx(x), reference(x));
        abs = abs.max((a - r).abs());
        let e = if r == 0.0 {
            if a == 0.0 {
                0.0
            } else {
                f64::INFINITY
            }
        } else {
            ((a - r) / r).abs()
        };
        max = max.max(e);
        sum += e;
    }
    (max, sum / xs.len() as f64, abs)
}

struct Row {
    func: Func,
    source: String,
    n: usize,
    lo: f32,
    hi: f32,
    mm_max: f64,
    mm_mean: f64,
    mm_abs: f64,
    libm_max: f64,
}

fn row(func: Func, source: &str, xs: &[f32]) -> Row {
    let (mm_max, mm_mean, mm_abs) =
        rel_errors(xs, |x| func.micromath(x) as f64, |x| func.libm(x) as f64);
    let (libm_max, _, _) = rel_errors(xs, |x| func.libm(x) as f64, |x| func.exact(x));
    Row {
        func,
        source: source.to_string(),
        n: xs.len(),
        lo: xs.iter().copied().fold(f32::INFINITY, f32::min),
        hi: xs.iter().copied().fold(f32::NEG_INFINITY, f32::max),
        mm_max,
        mm_mean,
        mm_abs,
        libm_max,
    }
}

#[test]
fn micromath_is_too_coarse_for_the_operator_tolerance() {
    let mut samples = Samples::default();
    let mut files = 0;
    for (name, entry) in loglinear_tests::cases(&loglinear_tests::manifest(), "layer") {
        let kind = entry["kind"].as_str().expect("layer kind");
        {
            let path =
                loglinear_tests::golden_dir().join(entry["file"].as_str().expect("layer file"));
            let log_linear = kind.starts_with("ll_");
            let case = Case::new(&name, read_arrays(&path), &entry["config"]);
            if kind.ends_with("mamba2") {
                collect_mamba2(&mut samples, &case, log_linear);
            } else {
                collect_gdn(&mut samples, &case, log_linear);
            }
            files += 1;
        }
    }

    let mut rows: Vec<Row> = Vec::new();
    for func in [
        Func::Exp,
        Func::Ln,
        Func::Sqrt,
        Func::Sigmoid,
        Func::Softplus,
    ] {
        let mut all = Vec::new();
        for s in samples.0.iter().filter(|s| s.func == func) {
            rows.push(row(func, s.source, &s.xs));
            all.extend_from_slice(&s.xs);
        }
        rows.push(row(func, "ALL", &all));
    }

    println!(
        "\nmicromath 2.1 vs libm 0.2 on golden-layer inputs ({files} files of {})",
        loglinear_tests::golden_dir().join("layer").display()
    );
    println!("relative error |approx - ref| / |ref|; operator tolerance {OPERATOR_TOL:.0e}\n");
    println!(
        "| function | inputs | n | input range | micromath max rel | micromath mean rel | micromath max abs | libm max rel vs f64 |"
    );
    println!("| --- | --- | ---: | --- | ---: | ---: | ---: | ---: |");
    for r in &rows {
        let src = if r.source == "ALL" {
            "**all**".to_string()
        } else {
            r.source.clone()
        };
        println!(
            "| {} | {} | {} | [{:.3e}, {:.3e}] | {:.2e} | {:.2e} | {:.2e} | {:.2e} |",
            r.func.name(),
            src,
            r.n,
            r.lo,
            r.hi,
            r.mm_max,
            r.mm_mean,
            r.mm_abs,
            r.libm_max
        );
    }
    println!();

    for r in rows.iter().filter(|r| r.source == "ALL") {
        // libm stays well inside the tolerance (it is within an ulp or two) ...
        assert!(
            r.libm_max < 1e-6,
            "libm {} max rel error {:.3e} vs f64",
            r.func.name(),
            r.libm_max
        );
        // ... and micromath does not: the decision recorded in runtime/src/math.rs.
        if matches!(r.func, Func::Exp | Func::Ln | Func::Sqrt | Func::Sigmoid) {
            assert!(
                r.mm_max > OPERATOR_TOL,
                "micromath {} max rel error {:.3e} is within the {OPERATOR_TOL:.0e} tolerance: \
                 revisit the libm-vs-micromath decision in runtime/src/math.rs",
                r.func.name(),
                r.mm_max
            );
        }
    }
}
