//! What the whole-model tests of both architectures share (train_gdn_model.rs,
//! train_mamba2_model.rs): the f64 port's language-model skeleton around an architecture's
//! mixer, and the checks every training graph passes.

use super::{rel_l2, symmetric, SplitMix64};
use loglinear_converter::Checkpoint;
use loglinear_host_gpu::train::{NamedTensor, Param};
use loglinear_host_gpu::Gpu;
use loglinear_runtime::{ModelConfig, WeightSource};
use loglinear_tests::{cases, get, golden_dir, manifest, read_arrays, tol, Array};
use loglinear_train::model::{new_train_graph, TrainGraph};
use std::collections::HashMap;

/// Parameters of the f64 port by official key.
pub type Params = HashMap<String, Vec<f64>>;

pub fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

pub fn silu(x: f64) -> f64 {
    x * sigmoid(x)
}

pub fn softplus(x: f64) -> f64 {
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

/// `W·x` for `W` `[rows][x.len()]`.
pub fn matvec(w: &[f64], x: &[f64], rows: usize) -> Vec<f64> {
    let cols = x.len();
    (0..rows)
        .map(|r| (0..cols).map(|j| w[r * cols + j] * x[j]).sum())
        .collect()
}

/// RMSNorm of `x` with weight `w`.
pub fn rms(x: &[f64], w: &[f64], eps: f64) -> Vec<f64> {
    let r = 1.0 / (x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64 + eps).sqrt();
    x.iter().zip(w).map(|(a, b)| a * r * b).collect()
}

/// The f64 port's tensor `key` (a panic names a missing one).
pub fn param<'a>(p: &'a Params, key: &str) -> &'a [f64] {
    p.get(key).unwrap_or_else(|| panic!("no {key}"))
}

/// The official keys the f64 port reads outside the mixers.
pub struct RefKeys {
    pub embedding: &'static str,
    /// Layer `l`'s tensors are `{layers}.{l}.{name}`.
    pub layers: &'static str,
    pub input_norm: &'static str,
    pub out_proj: &'static str,
    pub final_norm: &'static str,
}

/// What a layer's mixer in the f64 port reads: the config, the parameters, the layer's
/// tensors' keys, and one window's normed inputs `hs` `[t][D]`.
pub struct RefLayer<'a> {
    pub c: &'a ModelConfig,
    p: &'a Params,
    key: &'a dyn Fn(&str) -> String,
    pub hs: &'a [Vec<f64>],
}

impl RefLayer<'_> {
    /// The layer's tensor `name`.
    pub fn get(&self, name: &str) -> &[f64] {
        param(self.p, &(self.key)(name))
    }
}

/// A layer's mixer in the f64 port: its outputs before the output projection `[t][d_inner]`.
pub type RefMixer = fn(&RefLayer) -> Vec<Vec<f64>>;

/// The f64 port of a language model: embedding → per layer [input norm → mixer → output
/// projection → residual; mlp_norm → SwiGLU → residual] → final norm → lm_head.
pub struct RefModel<'a> {
    pub config: &'a ModelConfig,
    pub keys: RefKeys,
    pub mixer: RefMixer,
}

impl RefModel<'_> {
    /// Per-token losses `[batch][t]` of windows `[batch][t + 1]`.
    pub fn losses(&self, p: &Params, tokens: &[u32], batch: usize, t: usize) -> Vec<f64> {
        let c = self.config;
        let (d, im, vocab) = (c.hidden_size, c.intermediate_size, c.vocab_size);
        let eps = c.norm_eps as f64;
        let get = |k: &str| param(p, k);
        let mut out = vec![0.0; batch * t];
        for b in 0..batch {
            let win = &tokens[b * (t + 1)..(b + 1) * (t + 1)];
            let mut xs: Vec<Vec<f64>> = (0..t)
                .map(|i| {
                    let id = win[i] as usize;
                    get(self.keys.embedding)[id * d..(id + 1) * d].to_vec()
                })
                .collect();
            for l in 0..c.num_layers {
                let k = |s: &str| format!("{}.{l}.{s}", self.keys.layers);
                let hs: Vec<Vec<f64>> = xs
                    .iter()
                    .map(|x| rms(x, get(&k(self.keys.input_norm)), eps))
                    .collect();
                let ys = (self.mixer)(&RefLayer {
                    c,
                    p,
                    key: &k,
                    hs: &hs,
                });
                for i in 0..t {
                    let mo = matvec(get(&k(self.keys.out_proj)), &ys[i], d);
                    for j in 0..d {
                        xs[i][j] += mo[j];
                    }
                    let h2 = rms(&xs[i], get(&k("mlp_norm.weight")), eps);
                    let g = matvec(get(&k("mlp.gate_proj.weight")), &h2, im);
                    let u = matvec(get(&k("mlp.up_proj.weight")), &h2, im);
                    let act: Vec<f64> = g.iter().zip(&u).map(|(a, b)| silu(*a) * b).collect();
                    let mo = matvec(get(&k("mlp.down_proj.weight")), &act, d);
                    for j in 0..d {
                        xs[i][j] += mo[j];
                    }
                }
            }
            for i in 0..t {
                let xf = rms(&xs[i], get(self.keys.final_norm), eps);
                let logits = matvec(get("lm_head.weight"), &xf, vocab);
                out[b * t + i] = cross_entropy(&logits, win[i + 1]);
            }
        }
        out
    }
}

/// −log softmax(logits)[target].
pub fn cross_entropy(logits: &[f64], target: u32) -> f64 {
    let m = logits.iter().cloned().fold(f64::MIN, f64::max);
    let lse = m + logits.iter().map(|v| (v - m).exp()).sum::<f64>().ln();
    lse - logits[target as usize]
}

/// Random weights of O(1) effect (init_params' are too small to exercise every path).
pub fn random_params(model: &dyn TrainGraph, seed: u64) -> Params {
    let mut r = SplitMix64::new(seed);
    model
        .params()
        .iter()
        .map(|p| {
            let n = p.name.as_str();
            let v: Vec<f64> = if n.ends_with("norm.weight") || n.ends_with("norm_f.weight") {
                (0..p.len).map(|_| 1.0 + 0.3 * symmetric(&mut r)).collect()
            } else if n.ends_with(".L") || n.ends_with(".D") {
                (0..p.len).map(|_| 1.0 + 0.5 * symmetric(&mut r)).collect()
            } else if n.ends_with(".A_log") || n.ends_with(".dt_bias") {
                (0..p.len).map(|_| 0.5 * symmetric(&mut r)).collect()
            } else if n.ends_with("conv1d.weight") || n.ends_with("conv1d.bias") {
                (0..p.len).map(|_| 0.3 * symmetric(&mut r)).collect()
            } else {
                let fan_in = *p.shape.last().unwrap() as f64;
                (0..p.len)
                    .map(|_| 1.0 * symmetric(&mut r) / fan_in.sqrt())
                    .collect()
            };
            (p.name.clone(), v)
        })
        .collect()
}

/// Loads the f64 port's parameters into the graph, as f32.
pub fn load(model: &dyn TrainGraph, gpu: &Gpu, p: &Params) {
    model
        .load_params(gpu, &|k| {
            p.get(k).map(|v| v.iter().map(|&x| x as f32).collect())
        })
        .unwrap();
}

/// Losses and gradients (scale 1) from the GPU.
pub fn gpu_step(gpu: &Gpu, model: &dyn TrainGraph, tokens: &[u32]) -> (Vec<f32>, Vec<Vec<f32>>) {
    let tb = gpu.storage_from("tokens", tokens).unwrap();
    let mut enc = gpu.encoder("step");
    model.encode_zero_grads(&mut enc);
    model.encode_forward(&mut enc, &tb);
    model.encode_backward(&mut enc, 1.0);
    gpu.submit_and_wait(enc).unwrap();
    let mut losses = gpu.read_f32(model.losses()).unwrap();
    losses.truncate(model.batch() * model.seq_len());
    (losses, model.read_grads(gpu).unwrap())
}

/// A gradient check: a graph's losses against the f64 port's, and every parameter's gradient
/// against central finite differences of the port's summed loss.
pub struct GradCheck<'a> {
    pub gpu: &'a Gpu,
    pub model: &'a dyn TrainGraph,
    /// The f64 port's per-token losses for parameters and windows.
    pub losses: &'a dyn Fn(&Params, &[u32]) -> Vec<f64>,
    /// The coordinates of a parameter to check.
    pub coords: &'a dyn Fn(&Param) -> Vec<usize>,
    /// Whether a gradient the differences find exactly zero is judged absolutely
    /// (|g| < 1e-6), not relatively.
    pub exact_zeros: bool,
    /// The worst relative L2 error of a parameter's gradient allowed.
    pub tol: f64,
    /// Names the case in the messages.
    pub label: &'a str,
}

/// Runs `check` at [`random_params`] (seed 11) on deterministic windows.
pub fn check_gradients(check: GradCheck<'_>) {
    let (gpu, model) = (check.gpu, check.model);
    let c = model.config();
    let (batch, t) = (model.batch(), model.seq_len());
    let p = random_params(model, 11);
    load(model, gpu, &p);
    let tokens: Vec<u32> = (0..batch * (t + 1))
        .map(|i| ((i * 13 + i / 3) % c.vocab_size) as u32)
        .collect();
    let (losses, grads) = gpu_step(gpu, model, &tokens);
    let want = (check.losses)(&p, &tokens);
    let e = rel_l2(&losses, &want);
    eprintln!(
        "{} T={t}: losses rel L2 {e:.2e} (mean {:.4})",
        check.label,
        want.iter().sum::<f64>() / want.len() as f64
    );
    assert!(e < 1e-5, "losses differ: {e:.3e}");
    let total = |pp: &Params| (check.losses)(pp, &tokens).iter().sum::<f64>();
    let mut worst = 0.0f64;
    for (pi, param) in model.params().iter().enumerate() {
        let coords = (check.coords)(param);
        let mut got = Vec::new();
        let mut fdv = Vec::new();
        let mut pp = p.clone();
        for &i in &coords {
            let x0 = p[&param.name][i];
            let hstep = 1e-5 * x0.abs().max(0.1);
            pp.get_mut(&param.name).unwrap()[i] = x0 + hstep;
            let a = total(&pp);
            pp.get_mut(&param.name).unwrap()[i] = x0 - hstep;
            let b = total(&pp);
            pp.get_mut(&param.name).unwrap()[i] = x0;
            fdv.push((a - b) / (2.0 * hstep));
            got.push(grads[pi][i]);
        }
        let norm = fdv.iter().map(|x| x * x).sum::<f64>().sqrt();
        let e = if check.exact_zeros && norm == 0.0 {
            let abs = got.iter().map(|&x| (x as f64).abs()).fold(0.0, f64::max);
            assert!(
                abs < 1e-6,
                "{}: zero gradient computed as {abs:.2e}",
                param.name
            );
            0.0
        } else {
            rel_l2(&got, &fdv)
        };
        eprintln!(
            "  {:40} rel L2 {e:.2e} (|g| {norm:.2e}, {} coords)",
            param.name,
            coords.len()
        );
        worst = worst.max(e);
    }
    eprintln!("{}: worst gradient rel L2 {worst:.2e}", check.label);
    let tol = check.tol;
    assert!(
        worst <= tol,
        "worst gradient rel L2 {worst:.3e} > {tol:.0e}"
    );
}

/// Small parameters whole; 24 spread coordinates of the big ones.
pub fn spread_coords(p: &Param) -> Vec<usize> {
    if p.len <= 64 {
        (0..p.len).collect()
    } else {
        (0..24).map(|i| (i * 7919 + 13) % p.len).collect()
    }
}

/// The longest window the golden-logit tests run (lavapipe time): the shortest golden
/// sequence, cut to this many tokens.
const GOLDEN_WINDOW: usize = 100;

/// One golden model case: its checkpoint and its reference tensors.
pub struct GoldenModel {
    pub name: String,
    pub ckpt: Checkpoint,
    pub golden: HashMap<String, Array>,
}

impl GoldenModel {
    /// The lengths of its full-sequence cases (`ids_T<n>`), shortest first.
    pub fn lengths(&self) -> Vec<usize> {
        loglinear_tests::model_lengths(&self.golden, &self.name)
    }

    /// Positions scored per window: the shortest sequence (at most [`GOLDEN_WINDOW`] tokens)
    /// less the last, whose next token is unknown.
    pub fn window(&self) -> usize {
        let n = self.lengths()[0].min(GOLDEN_WINDOW);
        assert!(
            n >= 2,
            "{}: a {n}-token sequence has no next token",
            self.name
        );
        n - 1
    }

    /// The token ids of the length-`n` sequence.
    pub fn ids(&self, n: usize) -> Vec<u32> {
        get(&self.golden, &format!("ids_T{n}"), &self.name).ids()
    }

    /// The fp64 logits `[n][vocab]` of the length-`n` sequence.
    pub fn logits(&self, n: usize) -> &[f64] {
        &get(&self.golden, &format!("logits_T{n}"), &self.name).data
    }

    /// A training graph of `batch` windows of `t` tokens holding the checkpoint's weights.
    pub fn train_graph(&self, gpu: &Gpu, batch: usize, t: usize) -> Box<dyn TrainGraph> {
        let ckpt = &self.ckpt;
        let model = new_train_graph(gpu, &ckpt.config, batch, t).unwrap();
        model
            .load_params(gpu, &|key| {
                let n = ckpt.layout.parse_key(key)?;
                ckpt.store.tensor(n)?.as_f32().map(<[f32]>::to_vec)
            })
            .unwrap_or_else(|e| panic!("{}: {e}", self.name));
        model
    }
}

/// Every golden model case (manifest section `model`) whose `kind` is one of `kinds`, by name.
/// Fails unless each of `kinds` is present at least once.
pub fn golden_models(kinds: &[&str]) -> Vec<GoldenModel> {
    let m = manifest();
    let found: Vec<(String, serde_json::Value)> = cases(&m, "model")
        .into_iter()
        .filter(|(_, e)| kinds.contains(&e["kind"].as_str().unwrap_or_default()))
        .collect();
    for kind in kinds {
        assert!(
            found.iter().any(|(_, e)| e["kind"] == *kind),
            "the golden set has no model of kind `{kind}`"
        );
    }
    found
        .into_iter()
        .map(|(name, e)| {
            let dir =
                golden_dir().join(e["dir"].as_str().unwrap_or_else(|| panic!("{name}: `dir`")));
            GoldenModel {
                ckpt: Checkpoint::load(&dir).unwrap_or_else(|e| panic!("{name}: {e}")),
                golden: read_arrays(&dir.join("golden.safetensors")),
                name,
            }
        })
        .collect()
}

/// Per-token losses from golden logits `[t + 1][vocab]` (f64).
fn golden_losses(logits: &[f64], ids: &[u32], vocab: usize, t: usize) -> Vec<f64> {
    (0..t)
        .map(|i| cross_entropy(&logits[i * vocab..(i + 1) * vocab], ids[i + 1]))
        .collect()
}

/// For every golden model of `kinds`: the forward's per-token losses on one window per golden
/// sequence (its first [`GoldenModel::window`] + 1 tokens) against its golden logits.
pub fn forward_losses_match_golden_logits(kinds: &[&str]) {
    let gpu = super::gpu();
    for gm in golden_models(kinds) {
        let name = &gm.name;
        let lengths = gm.lengths();
        let t = gm.window();
        let model = gm.train_graph(&gpu, lengths.len(), t);
        let v = gm.ckpt.config.vocab_size;
        let mut tokens = Vec::new();
        let mut want = Vec::new();
        for &n in &lengths {
            let ids = gm.ids(n);
            tokens.extend_from_slice(&ids[..t + 1]);
            want.extend(golden_losses(gm.logits(n), &ids, v, t));
        }
        let tb = gpu.storage_from("tokens", &tokens).unwrap();
        let mut enc = gpu.encoder("fwd");
        model.encode_forward(&mut enc, &tb);
        gpu.submit_and_wait(enc).unwrap();
        let mut got = gpu.read_f32(model.losses()).unwrap();
        got.truncate(want.len());
        let e = rel_l2(&got, &want);
        let max = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (*a as f64 - b).abs())
            .fold(0.0, f64::max);
        eprintln!("{name}: losses rel L2 {e:.2e}, max abs {max:.2e}");
        assert!(e <= tol::MODEL, "{name}: losses rel L2 {e:.3e}");
    }
}

/// 30 Adam steps (written here) from `init_params(1)` on a repeated text, one window per
/// batch row: the loss starts near ln 256 and falls by half.
pub fn training_reduces_the_loss(gpu: &Gpu, model: &dyn TrainGraph, label: &str) {
    let (batch, t) = (model.batch(), model.seq_len());
    model.init_params(gpu, 1).unwrap();
    let text = b"the cat sat on the mat. the cat sat on the mat. the cat sat on the mat. ";
    let tokens: Vec<u32> = (0..batch)
        .flat_map(|b| text[b * 5..b * 5 + t + 1].iter().map(|&x| x as u32))
        .collect();
    let tb = gpu.storage_from("tokens", &tokens).unwrap();
    let mut values: Vec<Vec<f32>> = model
        .read_params(gpu)
        .unwrap()
        .into_iter()
        .map(|(_, _, v)| v)
        .collect();
    let mut m1: Vec<Vec<f32>> = values.iter().map(|v| vec![0.0; v.len()]).collect();
    let mut m2 = m1.clone();
    let (lr, b1, b2) = (1e-2f32, 0.9f32, 0.95f32);
    let mut first = 0.0;
    let mut last = 0.0;
    for step in 1..=30 {
        let mut enc = gpu.encoder("train");
        model.encode_zero_grads(&mut enc);
        model.encode_forward(&mut enc, &tb);
        model.encode_backward(&mut enc, 1.0 / (batch * t) as f32);
        gpu.submit_and_wait(enc).unwrap();
        let losses = gpu.read_f32(model.losses()).unwrap();
        let mean = losses[..batch * t].iter().sum::<f32>() / (batch * t) as f32;
        if step == 1 {
            first = mean;
        }
        last = mean;
        eprintln!("step {step}: loss {mean:.4}");
        let grads = model.read_grads(gpu).unwrap();
        for (i, p) in model.params().iter().enumerate() {
            for j in 0..p.len {
                let g = grads[i][j];
                m1[i][j] = b1 * m1[i][j] + (1.0 - b1) * g;
                m2[i][j] = b2 * m2[i][j] + (1.0 - b2) * g * g;
                let mh = m1[i][j] / (1.0 - b1.powi(step));
                let vh = m2[i][j] / (1.0 - b2.powi(step));
                values[i][j] -= lr * mh / (vh.sqrt() + 1e-8);
            }
            gpu.write(&p.value, &values[i]);
        }
    }
    eprintln!("{label}: loss {first:.4} -> {last:.4}");
    assert!(first > 5.0, "initial loss {first} should be about ln 256");
    assert!(last < 0.5 * first, "loss fell only from {first} to {last}");
}

/// At [`random_params`] (seed 3) on fixed windows: two micro-batches in one encoder, loss
/// scales 1 and 0.5, no zeroing between, give 1.5 × the gradients of one backward at scale 1.
/// Returns the windows, and the losses and gradients of that one backward.
pub fn gradients_accumulate(
    gpu: &Gpu,
    model: &dyn TrainGraph,
) -> (Vec<u32>, Vec<f32>, Vec<Vec<f32>>) {
    load(model, gpu, &random_params(model, 3));
    let n = model.batch() * (model.seq_len() + 1);
    let vocab = model.config().vocab_size;
    let tokens: Vec<u32> = (0..n).map(|i| (i * 5 % vocab) as u32).collect();
    let (losses, once) = gpu_step(gpu, model, &tokens);
    let tb = gpu.storage_from("tokens", &tokens).unwrap();
    let mut enc = gpu.encoder("acc");
    model.encode_zero_grads(&mut enc);
    model.encode_forward(&mut enc, &tb);
    model.encode_backward(&mut enc, 1.0);
    model.encode_forward(&mut enc, &tb);
    model.encode_backward(&mut enc, 0.5);
    gpu.submit_and_wait(enc).unwrap();
    let twice = model.read_grads(gpu).unwrap();
    for ((p, a), b) in model.params().iter().zip(&once).zip(&twice) {
        let want: Vec<f64> = a.iter().map(|&x| 1.5 * x as f64).collect();
        let e = rel_l2(b, &want);
        assert!(e < 1e-6, "{}: accumulated gradient off by {e:.2e}", p.name);
    }
    (tokens, losses, once)
}

/// `init_params` is deterministic in the seed and differs between seeds; returns seed 7's
/// parameters.
pub fn init_is_deterministic(gpu: &Gpu, model: &dyn TrainGraph) -> Vec<NamedTensor> {
    model.init_params(gpu, 7).unwrap();
    let a = model.read_params(gpu).unwrap();
    model.init_params(gpu, 7).unwrap();
    assert_eq!(a, model.read_params(gpu).unwrap());
    model.init_params(gpu, 8).unwrap();
    assert_ne!(a, model.read_params(gpu).unwrap());
    a
}

/// Loading `full` without the tensor `missing`, or with lm_head.weight one value short, is an
/// error that names the tensor; loading all of it works.
pub fn load_errors_name_the_tensor(
    gpu: &Gpu,
    model: &dyn TrainGraph,
    full: &HashMap<String, Vec<f32>>,
    missing: &str,
) {
    let err = model
        .load_params(gpu, &|k| (k != missing).then(|| full[k].clone()))
        .unwrap_err()
        .to_string();
    assert!(err.contains(missing), "{err}");
    let err = model
        .load_params(gpu, &|k| {
            let mut v = full[k].clone();
            if k == "lm_head.weight" {
                v.pop();
            }
            Some(v)
        })
        .unwrap_err()
        .to_string();
    assert!(err.contains("lm_head.weight"), "{err}");
    model.load_params(gpu, &|k| Some(full[k].clone())).unwrap();
}
