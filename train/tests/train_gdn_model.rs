//! The whole-model training graph (`train::gdn_model`), log-linear and plain Gated DeltaNet:
//! 1. the forward's per-token losses against the golden logits of every golden GDN model
//!    (kinds `ll_gdn`, `gdn`; the runtime's fp32 forward reproduces those to 1e-4);
//! 2. every parameter's gradient against central finite differences of an f64 CPU port of the
//!    model written here (recurrent decode form of spec §4.2 per token): the whole gradient of
//!    the small parameters, a sample of coordinates of the big ones;
//! 3. a short training run (Adam written here) on a repeated text: the loss falls.

use common::model::{
    check_gradients, cross_entropy, gradients_accumulate, init_is_deterministic,
    load_errors_name_the_tensor, matvec, rms, sigmoid, silu, softplus, spread_coords, GradCheck,
    Params, RefKeys, RefLayer, RefModel,
};
use common::{gpu, rel_l2, tiny_config};
use loglinear_converter::Checkpoint;
use loglinear_runtime::{Arch, ModelConfig, WeightSource};
use loglinear_tests::*;
use loglinear_train::model::gdn::GdnTrainModel;
use loglinear_train::model::{GraphOptions, InitScheme};
use std::collections::HashMap;

mod common;

/// The shared tiny config with the norms' eps at 1e-6.
fn small_config(arch: Arch) -> ModelConfig {
    ModelConfig {
        norm_eps: 1e-6,
        ..tiny_config(arch)
    }
}

/// The f64 port of the model (recurrent decode form of the operator per token).
fn reference(c: &ModelConfig) -> RefModel<'_> {
    RefModel {
        config: c,
        keys: RefKeys {
            embedding: "model.embeddings.weight",
            layers: "model.layers",
            input_norm: "attn_norm.weight",
            out_proj: "attn.o_proj.weight",
            final_norm: "model.norm.weight",
        },
        mixer,
    }
}

/// One layer's Gated DeltaNet mixer over one window's normed inputs `hs` `[t][D]`: its gated
/// output `[t][vd]` before o_proj.
fn mixer(l: &RefLayer) -> Vec<Vec<f64>> {
    let (c, hs) = (l.c, l.hs);
    let (h, dk, dv) = (c.num_heads, c.head_k_dim, c.head_v_dim);
    let (kd, vd, w) = (c.key_dim(), c.d_inner(), c.conv_kernel);
    let t = hs.len();
    let ll = c.arch.is_log_linear();
    let eps = c.norm_eps as f64;
    let get = |name: &str| l.get(name);
    const LMAX: usize = 16;
    let proj = |name: &str, rows: usize| -> Vec<Vec<f64>> {
        hs.iter().map(|x| matvec(get(name), x, rows)).collect()
    };
    let conv = |inp: &[Vec<f64>], wname: &str| -> Vec<Vec<f64>> {
        let wt = get(wname);
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
    let (alog, dtb) = (get("attn.A_log"), get("attn.dt_bias"));
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
                    softplus(get("attn.L")[hh * 15 + lvl] * lp[i][hh * 15 + lvl])
                        * (dk as f64).sqrt()
                } else {
                    1.0
                };
                for col in 0..dv {
                    let sq: f64 = (0..dk).map(|r| qh[r] * lv[r * dv + col]).sum();
                    o[col] += lam * sq;
                }
            }
            let on = rms(&o, get("attn.o_norm.weight"), eps);
            for col in 0..dv {
                ys[i][hh * dv + col] = on[col] * silu(gp[i][hh * dv + col]);
            }
        }
    }
    ys
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
    let model = GdnTrainModel::with_options(&gpu, &c, 2, t, options).unwrap();
    let reference = reference(&c);
    let tied = options.tie_embeddings;
    check_gradients(GradCheck {
        gpu: &gpu,
        model: &model,
        losses: &|p, tokens| reference.losses(&with_head(p, tied), tokens, 2, t),
        coords: &spread_coords,
        exact_zeros: false,
        tol,
        label: &format!("{arch:?}"),
    });
}

fn grad_check(arch: Arch, t: usize, tol: f64) {
    grad_check_with(arch, t, tol, GraphOptions::default());
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

#[test]
fn forward_losses_match_golden_logits() {
    common::model::forward_losses_match_golden_logits(&["ll_gdn", "gdn"]);
}

#[test]
fn training_reduces_the_loss() {
    let gpu = gpu();
    let mut c = small_config(Arch::LogLinearGatedDeltaNet);
    c.vocab_size = 256;
    c.hidden_size = 32;
    c.intermediate_size = 64;
    let model = GdnTrainModel::new(&gpu, &c, 2, 32).unwrap();
    common::model::training_reduces_the_loss(&gpu, &model, "LogLinearGatedDeltaNet");
}

#[test]
fn gradients_accumulate_with_the_loss_scale() {
    let gpu = gpu();
    let c = small_config(Arch::LogLinearGatedDeltaNet);
    let model = GdnTrainModel::new(&gpu, &c, 2, 9).unwrap();
    gradients_accumulate(&gpu, &model);
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
    let a = init_is_deterministic(&gpu, &model);
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
    load_errors_name_the_tensor(&gpu, &model, &full, "model.layers.1.attn.A_log");

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
            want.push(cross_entropy(&logits, win[i + 1]));
        }
    }
    let e = rel_l2(&got, &want);
    let bits = got.iter().map(|&x| x as f64).sum::<f64>() / got.len() as f64 / 2f64.ln();
    eprintln!("ll-gdn-mcu: losses rel L2 {e:.2e} vs the CPU runtime, {bits:.3} bits per byte");
    assert!(e <= tol::MODEL, "losses rel L2 {e:.3e}");
    assert!(bits < 2.5, "{bits} bits per byte on the model's own text");
}
