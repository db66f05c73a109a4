//! The whole-model training graph (`train::gdn_model`), log-linear and plain Gated DeltaNet:
//! 1. the forward's per-token losses against the golden logits of the stress models (the
//!    runtime's fp32 forward reproduces those to 1e-4);
//! 2. every parameter's gradient against central finite differences of an f64 CPU port of the
//!    model written here (recurrent decode form of spec §4.2 per token): the whole gradient of
//!    the small parameters, a sample of coordinates of the big ones;
//! 3. a short training run (Adam written here) on a repeated text: the loss falls.

use loglinear_converter::Checkpoint;
use loglinear_host_gpu::Gpu;
use loglinear_runtime::{Arch, ModelConfig, WeightSource};
use loglinear_tests::*;
use loglinear_train::model::gdn::GdnTrainModel;
use loglinear_train::model::{GraphOptions, InitScheme};
use std::collections::HashMap;

mod common;
use common::{gpu, tiny_config, Rng};

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}
fn silu(x: f64) -> f64 {
    x * sigmoid(x)
}
fn softplus(x: f64) -> f64 {
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

/// The shared tiny config with the norms' eps at 1e-6.
fn small_config(arch: Arch) -> ModelConfig {
    ModelConfig {
        norm_eps: 1e-6,
        ..tiny_config(arch)
    }
}

type Params = HashMap<String, Vec<f64>>;

/// f64 port of the model: per-token losses `[batch][t]` of windows `[batch][t + 1]`.
fn ref_losses(c: &ModelConfig, p: &Params, tokens: &[u32], batch: usize, t: usize) -> Vec<f64> {
    let (d, h, dk, dv) = (c.hidden_size, c.num_heads, c.head_k_dim, c.head_v_dim);
    let (kd, vd, im, w, vocab) = (
        c.key_dim(),
        c.d_inner(),
        c.intermediate_size,
        c.conv_kernel,
        c.vocab_size,
    );
    let ll = c.arch.is_log_linear();
    let eps = c.norm_eps as f64;
    let get = |k: &str| -> &Vec<f64> { p.get(k).unwrap_or_else(|| panic!("no {k}")) };
    let matvec = |wm: &[f64], x: &[f64], rows: usize| -> Vec<f64> {
        let cols = x.len();
        (0..rows)
            .map(|r| (0..cols).map(|j| wm[r * cols + j] * x[j]).sum())
            .collect()
    };
    let rms = |x: &[f64], wv: &[f64]| -> Vec<f64> {
        let r = 1.0 / (x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64 + eps).sqrt();
        x.iter().zip(wv).map(|(a, b)| a * r * b).collect()
    };
    let mut out = vec![0.0; batch * t];
    const LMAX: usize = 16;
    for b in 0..batch {
        let win = &tokens[b * (t + 1)..(b + 1) * (t + 1)];
        let mut xs: Vec<Vec<f64>> = (0..t)
            .map(|i| {
                let id = win[i] as usize;
                get("model.embeddings.weight")[id * d..(id + 1) * d].to_vec()
            })
            .collect();
        for l in 0..c.num_layers {
            let k = |s: &str| format!("model.layers.{l}.{s}");
            let hs: Vec<Vec<f64>> = xs
                .iter()
                .map(|x| rms(x, get(&k("attn_norm.weight"))))
                .collect();
            let proj = |name: &str, rows: usize| -> Vec<Vec<f64>> {
                hs.iter().map(|x| matvec(get(&k(name)), x, rows)).collect()
            };
            let conv = |inp: &[Vec<f64>], wname: &str| -> Vec<Vec<f64>> {
                let wt = get(&k(wname));
                (0..t)
                    .map(|i| {
                        (0..inp[0].len())
                            .map(|ch| {
                                let mut s = 0.0;
                                for j in 0..w {
                                    let back = w - 1 - j;
                                    if i >= back {
                                        s += inp[i - back][ch] * wt[ch * w + j];
                                    }
                                }
                                silu(s)
                            })
                            .collect()
                    })
                    .collect()
            };
            let q = conv(&proj("attn.q_proj.weight", kd), "attn.q_conv1d.weight");
            let kk = conv(&proj("attn.k_proj.weight", kd), "attn.k_conv1d.weight");
            let v = conv(&proj("attn.v_proj.weight", vd), "attn.v_conv1d.weight");
            let a = proj("attn.a_proj.weight", h);
            let bb = proj("attn.b_proj.weight", h);
            let gp = proj("attn.g_proj.weight", vd);
            let lp = if ll {
                proj("attn.l_proj.weight", 15 * h)
            } else {
                vec![]
            };
            let (alog, dtb) = (get(&k("attn.A_log")), get(&k("attn.dt_bias")));
            let mut ys = vec![vec![0.0; vd]; t];
            for hh in 0..h {
                let mut s = vec![vec![0.0; dk * dv]; LMAX];
                for i in 0..t {
                    let l2 = |x: &[f64]| -> Vec<f64> {
                        let r = 1.0 / (x.iter().map(|v| v * v).sum::<f64>() + 1e-6).sqrt();
                        x.iter().map(|v| v * r).collect()
                    };
                    let qh: Vec<f64> = l2(&q[i][hh * dk..(hh + 1) * dk])
                        .iter()
                        .map(|x| x / (dk as f64).sqrt())
                        .collect();
                    let kh = l2(&kk[i][hh * dk..(hh + 1) * dk]);
                    let vh = &v[i][hh * dv..(hh + 1) * dv];
                    let beta = sigmoid(bb[i][hh]);
                    let alpha = (-alog[hh].exp() * softplus(a[i][hh] + dtb[hh])).exp();
                    // merge
                    if i > 0 {
                        let m = i.trailing_zeros() as usize;
                        let mut acc = vec![0.0; dk * dv];
                        for lv in s.iter_mut().take(m + 1) {
                            for (x, y) in acc.iter_mut().zip(lv.iter()) {
                                *x += y;
                            }
                            lv.iter_mut().for_each(|x| *x = 0.0);
                        }
                        for (x, y) in s[m + 1].iter_mut().zip(&acc) {
                            *x += y;
                        }
                    }
                    // transition of levels ≥ 1: S = α (S − β k (kᵀ S))
                    for lv in s.iter_mut().skip(1) {
                        for col in 0..dv {
                            let ks: f64 = (0..dk).map(|r| kh[r] * lv[r * dv + col]).sum();
                            for r in 0..dk {
                                lv[r * dv + col] = alpha * (lv[r * dv + col] - beta * kh[r] * ks);
                            }
                        }
                    }
                    for r in 0..dk {
                        for col in 0..dv {
                            s[0][r * dv + col] = beta * kh[r] * vh[col];
                        }
                    }
                    // read
                    let mut o = vec![0.0; dv];
                    for (lvl, lv) in s.iter().enumerate() {
                        if lv.iter().all(|x| *x == 0.0) {
                            continue;
                        }
                        let lam = if ll {
                            softplus(get(&k("attn.L"))[hh * 15 + lvl] * lp[i][hh * 15 + lvl])
                                * (dk as f64).sqrt()
                        } else {
                            1.0
                        };
                        for col in 0..dv {
                            let sq: f64 = (0..dk).map(|r| qh[r] * lv[r * dv + col]).sum();
                            o[col] += lam * sq;
                        }
                    }
                    let on = rms(&o, get(&k("attn.o_norm.weight")));
                    for col in 0..dv {
                        ys[i][hh * dv + col] = on[col] * silu(gp[i][hh * dv + col]);
                    }
                }
            }
            for i in 0..t {
                let mo = matvec(get(&k("attn.o_proj.weight")), &ys[i], d);
                for j in 0..d {
                    xs[i][j] += mo[j];
                }
                let h2 = rms(&xs[i], get(&k("mlp_norm.weight")));
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
            let xf = rms(&xs[i], get("model.norm.weight"));
            let logits = matvec(get("lm_head.weight"), &xf, vocab);
            let m = logits.iter().cloned().fold(f64::MIN, f64::max);
            let lse = m + logits.iter().map(|v| (v - m).exp()).sum::<f64>().ln();
            out[b * t + i] = lse - logits[win[i + 1] as usize];
        }
    }
    out
}

/// Random weights of O(1) effect (init_params' are too small to exercise every path).
fn random_params(model: &GdnTrainModel, seed: u64) -> Params {
    let mut r = Rng(seed);
    model
        .params()
        .iter()
        .map(|p| {
            let n = p.name.as_str();
            let v: Vec<f64> = if n.ends_with("norm.weight") {
                (0..p.len).map(|_| 1.0 + 0.3 * r.f()).collect()
            } else if n.ends_with(".L") {
                (0..p.len).map(|_| 1.0 + 0.5 * r.f()).collect()
            } else if n.ends_with(".A_log") {
                (0..p.len).map(|_| 0.5 * r.f()).collect()
            } else if n.ends_with(".dt_bias") {
                (0..p.len).map(|_| 0.5 * r.f()).collect()
            } else if n.ends_with("conv1d.weight") {
                (0..p.len).map(|_| 0.3 * r.f()).collect()
            } else {
                let fan_in = *p.shape.last().unwrap() as f64;
                (0..p.len).map(|_| 1.0 * r.f() / fan_in.sqrt()).collect()
            };
            (p.name.clone(), v)
        })
        .collect()
}

fn load(model: &GdnTrainModel, gpu: &Gpu, p: &Params) {
    model
        .load_params(gpu, &|k| {
            p.get(k).map(|v| v.iter().map(|&x| x as f32).collect())
        })
        .unwrap();
}

/// Losses and gradients (scale 1) from the GPU.
fn gpu_step(gpu: &Gpu, model: &GdnTrainModel, tokens: &[u32]) -> (Vec<f32>, Vec<Vec<f32>>) {
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

fn rel_l2(a: &[f32], b: &[f64]) -> f64 {
    let num: f64 = a.iter().zip(b).map(|(x, y)| (*x as f64 - y).powi(2)).sum();
    let den: f64 = b.iter().map(|y| y * y).sum();
    (num / den.max(1e-300)).sqrt()
}

fn grad_check(arch: Arch, t: usize, tol: f64) {
    grad_check_with(arch, t, tol, GraphOptions::default());
}

/// The f64 port's parameters for a graph's: a tied head reads the embedding.
fn with_head(p: &Params, tied: bool) -> Params {
    let mut full = p.clone();
    if tied {
        full.insert(
            "lm_head.weight".into(),
            p["model.embeddings.weight"].clone(),
        );
    }
    full
}

fn grad_check_with(arch: Arch, t: usize, tol: f64, options: GraphOptions) {
    let gpu = gpu();
    let c = small_config(arch);
    let batch = 2;
    let model = GdnTrainModel::with_options(&gpu, &c, batch, t, options).unwrap();
    let tied = options.tie_embeddings;
    let p = random_params(&model, 11);
    load(&model, &gpu, &p);
    let tokens: Vec<u32> = (0..batch * (t + 1))
        .map(|i| ((i * 13 + i / 3) % c.vocab_size) as u32)
        .collect();
    let (losses, grads) = gpu_step(&gpu, &model, &tokens);
    let want = ref_losses(&c, &with_head(&p, tied), &tokens, batch, t);
    let e = rel_l2(&losses, &want);
    eprintln!(
        "{arch:?} T={t}: losses rel L2 {e:.2e} (mean {:.4})",
        want.iter().sum::<f64>() / want.len() as f64
    );
    assert!(e < 1e-5, "losses differ: {e:.3e}");
    let total = |pp: &Params| {
        ref_losses(&c, &with_head(pp, tied), &tokens, batch, t)
            .iter()
            .sum::<f64>()
    };
    let mut worst = 0.0f64;
    for (pi, param) in model.params().iter().enumerate() {
        let n = param.len;
        // Small parameters whole; 24 spread coordinates of the big ones.
        let coords: Vec<usize> = if n <= 64 {
            (0..n).collect()
        } else {
            (0..24).map(|i| (i * 7919 + 13) % n).collect()
        };
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
        let e = rel_l2(&got, &fdv);
        let norm = fdv.iter().map(|x| x * x).sum::<f64>().sqrt();
        eprintln!(
            "  {:40} rel L2 {e:.2e} (|g| {norm:.2e}, {} coords)",
            param.name,
            coords.len()
        );
        worst = worst.max(e);
    }
    eprintln!("{arch:?}: worst gradient rel L2 {worst:.2e}");
    assert!(
        worst <= tol,
        "worst gradient rel L2 {worst:.3e} > {tol:.0e}"
    );
}

#[test]
fn log_linear_gradients_match_finite_differences() {
    grad_check(Arch::LogLinearGatedDeltaNet, 80, 1e-4);
}

#[test]
fn plain_gradients_match_finite_differences() {
    grad_check(Arch::GatedDeltaNet, 70, 1e-4);
}

/// Tied head (the MQAR runner's): no `lm_head.weight`, and the embedding's gradient is the sum
/// of its input and output uses.
#[test]
fn tied_head_gradients_match_finite_differences() {
    let options = GraphOptions {
        tie_embeddings: true,
        init: InitScheme::Official,
        head_rows: None,
    };
    grad_check_with(Arch::LogLinearGatedDeltaNet, 40, 1e-4, options);
}

/// Per-token losses from the golden logits (f64).
fn golden_losses(logits: &[f64], ids: &[u32], vocab: usize, t: usize) -> Vec<f64> {
    (0..t)
        .map(|i| {
            let row = &logits[i * vocab..(i + 1) * vocab];
            let m = row.iter().cloned().fold(f64::MIN, f64::max);
            let lse = m + row.iter().map(|v| (v - m).exp()).sum::<f64>().ln();
            lse - row[ids[i + 1] as usize]
        })
        .collect()
}

#[test]
fn forward_losses_match_golden_logits() {
    let gpu = gpu();
    for name in ["h_gated_deltanet_stress", "gated_deltanet_stress"] {
        let dir = golden_dir().join("model").join(name);
        let ckpt = Checkpoint::load(&dir).unwrap();
        let c = ckpt.config;
        let g = read_arrays(&dir.join("golden.safetensors"));
        let ids100 = get(&g, "ids_T100", name).ids();
        let ids300 = get(&g, "ids_T300", name).ids();
        let l100 = get(&g, "logits_T100", name).data.clone();
        let l300 = get(&g, "logits_T300", name).data.clone();
        let t = 99;
        let model = GdnTrainModel::new(&gpu, &c, 2, t).unwrap();
        model
            .load_params(&gpu, &|key| {
                let n = ckpt.layout.parse_key(key)?;
                ckpt.store.tensor(n)?.as_f32().map(<[f32]>::to_vec)
            })
            .unwrap();
        let mut tokens = ids100[..t + 1].to_vec();
        tokens.extend_from_slice(&ids300[..t + 1]);
        let tb = gpu.storage_from("tokens", &tokens).unwrap();
        let mut enc = gpu.encoder("fwd");
        model.encode_forward(&mut enc, &tb);
        gpu.submit_and_wait(enc).unwrap();
        let mut got = gpu.read_f32(model.losses()).unwrap();
        got.truncate(2 * t);
        let v = c.vocab_size;
        let mut want = golden_losses(&l100, &ids100, v, t);
        want.extend(golden_losses(&l300, &ids300, v, t));
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

#[test]
fn training_reduces_the_loss() {
    let gpu = gpu();
    let mut c = small_config(Arch::LogLinearGatedDeltaNet);
    c.vocab_size = 256;
    c.hidden_size = 32;
    c.intermediate_size = 64;
    let (batch, t) = (2, 32);
    let model = GdnTrainModel::new(&gpu, &c, batch, t).unwrap();
    model.init_params(&gpu, 1).unwrap();
    let text = b"the cat sat on the mat. the cat sat on the mat. the cat sat on the mat. ";
    let tokens: Vec<u32> = (0..batch)
        .flat_map(|b| text[b * 5..b * 5 + t + 1].iter().map(|&x| x as u32))
        .collect();
    let tb = gpu.storage_from("tokens", &tokens).unwrap();
    let mut values: Vec<Vec<f32>> = model
        .read_params(&gpu)
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
        let grads = model.read_grads(&gpu).unwrap();
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
    eprintln!("loss {first:.4} -> {last:.4}");
    assert!(first > 5.0, "initial loss {first} should be about ln 256");
    assert!(last < 0.5 * first, "loss fell only from {first} to {last}");
}

#[test]
fn gradients_accumulate_with_the_loss_scale() {
    let gpu = gpu();
    let c = small_config(Arch::LogLinearGatedDeltaNet);
    let (batch, t) = (2, 9);
    let model = GdnTrainModel::new(&gpu, &c, batch, t).unwrap();
    load(&model, &gpu, &random_params(&model, 3));
    let tokens: Vec<u32> = (0..batch * (t + 1)).map(|i| (i * 5 % 40) as u32).collect();
    let (_, once) = gpu_step(&gpu, &model, &tokens);
    // Two micro-batches in one encoder, scales 1 and 0.5, no zeroing between: 1.5×.
    let tb = gpu.storage_from("tokens", &tokens).unwrap();
    let mut enc = gpu.encoder("acc");
    model.encode_zero_grads(&mut enc);
    model.encode_forward(&mut enc, &tb);
    model.encode_backward(&mut enc, 1.0);
    model.encode_forward(&mut enc, &tb);
    model.encode_backward(&mut enc, 0.5);
    gpu.submit_and_wait(enc).unwrap();
    let twice = model.read_grads(&gpu).unwrap();
    for ((p, a), b) in model.params().iter().zip(&once).zip(&twice) {
        let want: Vec<f64> = a.iter().map(|&x| 1.5 * x as f64).collect();
        let e = rel_l2(b, &want);
        assert!(e < 1e-6, "{}: accumulated gradient off by {e:.2e}", p.name);
    }
}

#[test]
fn params_keys_init_and_load_errors() {
    let gpu = gpu();
    let mamba = ModelConfig {
        arch: Arch::Mamba2,
        ..small_config(Arch::GatedDeltaNet)
    };
    assert!(GdnTrainModel::new(&gpu, &mamba, 1, 8).is_err());
    let c = small_config(Arch::LogLinearGatedDeltaNet);
    let model = GdnTrainModel::new(&gpu, &c, 1, 8).unwrap();
    let names: Vec<&str> = model.params().iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names.len(), 3 + 20 * c.num_layers);
    for key in [
        "model.embeddings.weight",
        "model.layers.1.attn.l_proj.weight",
        "model.layers.0.attn.q_conv1d.weight",
        "model.norm.weight",
        "lm_head.weight",
    ] {
        assert!(names.contains(&key), "no {key}");
    }
    let p = |k: &str| &model.params()[model.param_index(k).unwrap()];
    assert_eq!(
        p("model.layers.0.attn.q_conv1d.weight").shape,
        vec![16, 1, 4]
    );
    assert_eq!(p("model.layers.0.attn.L").shape, vec![2, 15]);
    for (k, decay) in [
        ("model.layers.0.attn.A_log", false),
        ("model.layers.0.attn.dt_bias", false),
        ("model.layers.0.attn.L", false),
        ("model.layers.0.attn.o_norm.weight", false),
        ("model.norm.weight", false),
        ("model.layers.0.attn.q_proj.weight", true),
        ("model.layers.0.attn.k_conv1d.weight", true),
        ("model.embeddings.weight", true),
        ("lm_head.weight", true),
    ] {
        assert_eq!(p(k).decay, decay, "{k}");
    }

    // init: deterministic in the seed, official values.
    model.init_params(&gpu, 7).unwrap();
    let a = model.read_params(&gpu).unwrap();
    model.init_params(&gpu, 7).unwrap();
    assert_eq!(a, model.read_params(&gpu).unwrap());
    model.init_params(&gpu, 8).unwrap();
    assert_ne!(a, model.read_params(&gpu).unwrap());
    let by: HashMap<&str, &Vec<f32>> = a.iter().map(|(k, _, v)| (k.as_str(), v)).collect();
    assert!(by["model.layers.0.attn.L"].iter().all(|&x| x == 1.0));
    assert!(by["model.norm.weight"].iter().all(|&x| x == 1.0));
    assert!(by["model.layers.0.attn.A_log"]
        .iter()
        .all(|&x| x <= 16f32.ln()));
    for &x in by["model.layers.0.attn.dt_bias"] {
        let dt = softplus(x as f64);
        assert!((1e-4..=0.1 + 1e-6).contains(&dt), "dt {dt}");
    }
    let w = by["model.layers.0.mlp.gate_proj.weight"];
    let std = (w.iter().map(|&x| (x as f64).powi(2)).sum::<f64>() / w.len() as f64).sqrt();
    assert!((std - 0.006).abs() < 0.001, "std {std}");
    let bound = 1.0 / (24f64.sqrt() * 2.0); // down_proj: 1/√fan_in / √(2·2 layers)
    let down = by["model.layers.1.mlp.down_proj.weight"];
    assert!(down.iter().all(|&x| (x as f64).abs() <= bound));
    assert!(down.iter().any(|&x| (x as f64).abs() > 0.5 * bound));

    // load: a missing and a mis-sized key are named.
    let full: HashMap<String, Vec<f32>> = a.into_iter().map(|(k, _, v)| (k, v)).collect();
    let err = model
        .load_params(&gpu, &|k| {
            (k != "model.layers.1.attn.A_log").then(|| full[k].clone())
        })
        .unwrap_err()
        .to_string();
    assert!(err.contains("model.layers.1.attn.A_log"), "{err}");
    let err = model
        .load_params(&gpu, &|k| {
            let mut v = full[k].clone();
            if k == "lm_head.weight" {
                v.pop();
            }
            Some(v)
        })
        .unwrap_err()
        .to_string();
    assert!(err.contains("lm_head.weight"), "{err}");
    model.load_params(&gpu, &|k| Some(full[k].clone())).unwrap();

    // Zoology's init and a tied head: no lm_head, Linear and embedding N(0, 0.02) (output
    // projections too), convs U(±1/√kernel).
    let zoo = GraphOptions {
        tie_embeddings: true,
        init: InitScheme::Zoology,
        head_rows: None,
    };
    let model = GdnTrainModel::with_options(&gpu, &c, 1, 8, zoo).unwrap();
    assert_eq!(model.params().len(), 2 + 20 * c.num_layers);
    assert!(model.param_index("lm_head.weight").is_none());
    model.init_params(&gpu, 7).unwrap();
    let a = model.read_params(&gpu).unwrap();
    let by: HashMap<&str, &Vec<f32>> = a.iter().map(|(k, _, v)| (k.as_str(), v)).collect();
    let rms =
        |w: &[f32]| (w.iter().map(|&x| (x as f64).powi(2)).sum::<f64>() / w.len() as f64).sqrt();
    for k in [
        "model.embeddings.weight",
        "model.layers.0.mlp.gate_proj.weight",
        "model.layers.1.mlp.down_proj.weight",
    ] {
        let std = rms(by[k]);
        assert!((std - 0.02).abs() < 0.003, "{k}: std {std}");
    }
    let conv = by["model.layers.0.attn.q_conv1d.weight"];
    assert!(conv.iter().all(|&x| x.abs() <= 0.5));
    assert!(conv.iter().any(|&x| x.abs() > 0.25));
    assert!(by["model.layers.0.attn.L"].iter().all(|&x| x == 1.0));
}

/// The shipped byte-level LL-GDN (dk 64, 4 layers): the training forward's per-token losses
/// against the CPU runtime stepping each window from an empty state (f32 decode maths).
#[test]
fn shipped_model_losses_match_the_cpu_runtime() {
    use loglinear_runtime::{Session, SessionConfig};
    let dir = models_dir().join("ll-gdn-mcu");
    let ckpt = Checkpoint::load(&dir).unwrap();
    let model = ckpt.model().unwrap();
    let c = ckpt.config;
    let text =
        b"ROMEO:\nThe man is all the world in the world is the man.\n\nSIR TOBY.\nAy, and the \
prince himself is the man that hath been a man of the same thought of the world.";
    let (batch, t) = (2, 70);
    let tokens: Vec<u32> = (0..batch)
        .flat_map(|b| text[b * 20..b * 20 + t + 1].iter().map(|&x| x as u32))
        .collect();
    let gpu = gpu();
    let tm = GdnTrainModel::new(&gpu, &c, batch, t).unwrap();
    tm.load_params(&gpu, &|key| {
        let n = ckpt.layout.parse_key(key)?;
        ckpt.store.tensor(n)?.as_f32().map(<[f32]>::to_vec)
    })
    .unwrap();
    let tb = gpu.storage_from("tokens", &tokens).unwrap();
    let mut enc = gpu.encoder("fwd");
    tm.encode_forward(&mut enc, &tb);
    gpu.submit_and_wait(enc).unwrap();
    let mut got = gpu.read_f32(tm.losses()).unwrap();
    got.truncate(batch * t);
    let cfg = SessionConfig::default();
    let mut arena = vec![0u8; Session::<f32>::arena_bytes(&model, &cfg).unwrap()];
    let mut want = Vec::new();
    for b in 0..batch {
        let win = &tokens[b * (t + 1)..(b + 1) * (t + 1)];
        let mut s = Session::<f32>::new(&model, &mut arena, cfg).unwrap();
        for i in 0..t {
            let logits: Vec<f64> = s.step(win[i]).unwrap().iter().map(|&x| x as f64).collect();
            let m = logits.iter().cloned().fold(f64::MIN, f64::max);
            let lse = m + logits.iter().map(|v| (v - m).exp()).sum::<f64>().ln();
            want.push(lse - logits[win[i + 1] as usize]);
        }
    }
    let e = rel_l2(&got, &want);
    let bits = got.iter().map(|&x| x as f64).sum::<f64>() / got.len() as f64 / 2f64.ln();
    eprintln!("ll-gdn-mcu: losses rel L2 {e:.2e} vs the CPU runtime, {bits:.3} bits per byte");
    assert!(e <= tol::MODEL, "losses rel L2 {e:.3e}");
    assert!(bits < 2.5, "{bits} bits per byte on the model's own text");
}
