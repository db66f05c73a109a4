//! The whole-model training graph (`train::mamba2_model`), log-linear and plain Mamba-2:
//! 1. the forward's per-token losses against the golden logits of every golden Mamba-2 model
//!    (kinds `ll_mamba2`, `mamba2`: `hattention`, fla `log_linear_mamba2`, `mamba2mlp`);
//! 2. every parameter's gradient against central finite differences of an f64 CPU port of the
//!    model written here (quadratic operator form of spec §3.1 per head): the whole gradient
//!    of the small parameters, one coordinate per in_proj row, a sample of the other big ones;
//! 3. a short training run (Adam written here) on a repeated text: the loss falls.

use common::model::{
    check_gradients, gpu_step, gradients_accumulate, init_is_deterministic,
    load_errors_name_the_tensor, matvec, rms, silu, softplus, spread_coords, GradCheck, RefKeys,
    RefLayer, RefModel,
};
use common::{gpu, tiny_config};
use loglinear_runtime::{Arch, ModelConfig};
use loglinear_train::model::mamba2::Mamba2TrainModel;
use std::collections::HashMap;

mod common;

/// Tiny configs: the log-linear one with one B/C group, a conv bias and the gated norm over the
/// whole d_inner (official), the plain one with two groups, no conv bias and the norm per
/// group (fla).
fn small_config(arch: Arch) -> ModelConfig {
    let ll = arch.is_log_linear();
    ModelConfig {
        num_groups: if ll { 1 } else { 2 },
        norm_group_size: if ll { 16 } else { 8 },
        ..tiny_config(arch)
    }
}

/// Fenwick level of key s for query t (spec §2.1).
fn level(t: usize, s: usize) -> usize {
    if t == s {
        0
    } else {
        (usize::BITS - (t ^ s).leading_zeros()) as usize
    }
}

/// The f64 port of the model (quadratic operator form per head).
fn reference(c: &ModelConfig) -> RefModel<'_> {
    RefModel {
        config: c,
        keys: RefKeys {
            embedding: "backbone.embeddings.weight",
            layers: "backbone.layers",
            input_norm: "mixer_norm.weight",
            out_proj: "mixer.out_proj.weight",
            final_norm: "backbone.norm_f.weight",
        },
        mixer,
    }
}

/// One layer's Mamba-2 mixer over one window's normed inputs `hs` `[t][D]`: its gated-normed
/// output `[t][di]` before out_proj.
fn mixer(l: &RefLayer) -> Vec<Vec<f64>> {
    let (c, hs) = (l.c, l.hs);
    let (h, ns, hp, groups) = (c.num_heads, c.head_k_dim, c.head_v_dim, c.num_groups);
    let (di, ch, w) = (c.d_inner(), c.conv_channels(), c.conv_kernel);
    let t = hs.len();
    let rows_in = c.in_proj_rows();
    let ll = c.arch.is_log_linear();
    let eps = c.norm_eps as f64;
    let get = |name: &str| l.get(name);
    let zx: Vec<Vec<f64>> = hs
        .iter()
        .map(|h1| matvec(get("mixer.in_proj.weight"), h1, rows_in))
        .collect();
    let cw = get("mixer.conv1d.weight");
    let xbc: Vec<Vec<f64>> = (0..t)
        .map(|i| {
            (0..ch)
                .map(|cc| {
                    let mut s = if c.conv_bias {
                        get("mixer.conv1d.bias")[cc]
                    } else {
                        0.0
                    };
                    for j in 0..w {
                        let back = w - 1 - j;
                        if i >= back {
                            s += zx[i - back][di + cc] * cw[cc * w + j];
                        }
                    }
                    silu(s)
                })
                .collect()
        })
        .collect();
    let (alog, dtb, dsk) = (get("mixer.A_log"), get("mixer.dt_bias"), get("mixer.D"));
    let mut ys = vec![vec![0.0; di]; t];
    for hh in 0..h {
        let grp = hh / (h / groups);
        let bcol = di + grp * ns;
        let ccol = di + groups * ns + grp * ns;
        let dts: Vec<f64> = (0..t)
            .map(|i| softplus(zx[i][di + ch + hh] + dtb[hh]))
            .collect();
        let mut gcum = vec![0.0; t];
        let mut acc = 0.0;
        for i in 0..t {
            acc += -alog[hh].exp() * dts[i];
            gcum[i] = acc;
        }
        for i in 0..t {
            let mut o = vec![0.0; hp];
            for s in 0..=i {
                let lvl = level(i, s);
                let lam = if ll {
                    softplus(get("mixer.L")[hh * 15 + lvl] * zx[i][di + ch + h + hh * 15 + lvl])
                } else {
                    1.0
                };
                let qk: f64 = (0..ns).map(|j| xbc[i][ccol + j] * xbc[s][bcol + j]).sum();
                let wgt = lam * (gcum[i] - gcum[s]).exp() * qk * dts[s];
                for (j, ov) in o.iter_mut().enumerate() {
                    *ov += wgt * xbc[s][hh * hp + j];
                }
            }
            for j in 0..hp {
                ys[i][hh * hp + j] = o[j] + dsk[hh] * xbc[i][hh * hp + j];
            }
        }
    }
    let gs = c.norm_group_size;
    let nw = get("mixer.norm.weight");
    (0..t)
        .map(|i| {
            let yg: Vec<f64> = (0..di).map(|j| ys[i][j] * silu(zx[i][j])).collect();
            (0..di / gs)
                .flat_map(|g| rms(&yg[g * gs..(g + 1) * gs], &nw[g * gs..(g + 1) * gs], eps))
                .collect()
        })
        .collect()
}

fn grad_check(arch: Arch, batch: usize, t: usize, tol: f64) {
    let gpu = gpu();
    let c = small_config(arch);
    let model = Mamba2TrainModel::new(&gpu, &c, batch, t).unwrap();
    let reference = reference(&c);
    // Small parameters whole; one coordinate in every row of in_proj (z, xBC, dt and dl rows
    // all checked); 24 spread coordinates of the other big ones.
    let coords = |p: &loglinear_host_gpu::train::Param| -> Vec<usize> {
        if p.len > 64 && p.name.ends_with("in_proj.weight") {
            let (rows, cols) = (p.shape[0], p.shape[1]);
            (0..rows).map(|r| r * cols + (r * 5 + 3) % cols).collect()
        } else {
            spread_coords(p)
        }
    };
    check_gradients(GradCheck {
        gpu: &gpu,
        model: &model,
        losses: &|p, tokens| reference.losses(p, tokens, batch, t),
        coords: &coords,
        // A gradient that is exactly zero (A_log at T = 1: the decay only weighs earlier
        // tokens) is rounding noise on the GPU: judged absolutely.
        exact_zeros: true,
        tol,
        label: &format!("{arch:?}"),
    });
}

#[test]
fn log_linear_gradients_match_finite_differences() {
    grad_check(Arch::LogLinearMamba2, 2, 80, 1e-4);
}

#[test]
fn plain_gradients_match_finite_differences() {
    grad_check(Arch::Mamba2, 2, 70, 1e-4);
}

#[test]
fn short_windows_match_finite_differences() {
    // One token (one level, the conv sees only padding) and an odd batch.
    grad_check(Arch::LogLinearMamba2, 3, 1, 1e-4);
    grad_check(Arch::Mamba2, 3, 5, 1e-4);
}

#[test]
fn forward_losses_match_golden_logits() {
    common::model::forward_losses_match_golden_logits(&["ll_mamba2", "mamba2"]);
}

fn train_run(arch: Arch) {
    let gpu = gpu();
    let mut c = small_config(arch);
    c.vocab_size = 256;
    c.hidden_size = 32;
    c.intermediate_size = 64;
    c.norm_group_size = c.d_inner();
    let model = Mamba2TrainModel::new(&gpu, &c, 2, 32).unwrap();
    common::model::training_reduces_the_loss(&gpu, &model, &format!("{arch:?}"));
}

#[test]
fn log_linear_training_reduces_the_loss() {
    train_run(Arch::LogLinearMamba2);
}

#[test]
fn plain_training_reduces_the_loss() {
    train_run(Arch::Mamba2);
}

#[test]
fn gradients_are_deterministic_and_accumulate_with_the_loss_scale() {
    let gpu = gpu();
    let c = small_config(Arch::LogLinearMamba2);
    let model = Mamba2TrainModel::new(&gpu, &c, 2, 9).unwrap();
    let (tokens, losses, once) = gradients_accumulate(&gpu, &model);
    // Deterministic: another step gives the same bits.
    let (losses2, again) = gpu_step(&gpu, &model, &tokens);
    assert_eq!(losses, losses2);
    assert_eq!(once, again);
}

#[test]
fn params_keys_init_and_load_errors() {
    let gpu = gpu();
    let gdn = ModelConfig {
        arch: Arch::GatedDeltaNet,
        ..small_config(Arch::Mamba2)
    };
    assert!(Mamba2TrainModel::new(&gpu, &gdn, 1, 8).is_err());
    let bad_norm = ModelConfig {
        norm_group_size: 6,
        ..small_config(Arch::Mamba2)
    };
    assert!(Mamba2TrainModel::new(&gpu, &bad_norm, 1, 8).is_err());
    let c = small_config(Arch::LogLinearMamba2);
    let model = Mamba2TrainModel::new(&gpu, &c, 1, 8).unwrap();
    let names: Vec<&str> = model.params().iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names.len(), 3 + 14 * c.num_layers);
    let plain = Mamba2TrainModel::new(&gpu, &small_config(Arch::Mamba2), 1, 8).unwrap();
    assert_eq!(plain.params().len(), 3 + 12 * c.num_layers);
    for key in [
        "backbone.embeddings.weight",
        "backbone.layers.1.mixer.L",
        "backbone.layers.0.mixer.conv1d.bias",
        "backbone.layers.0.mixer.in_proj.weight",
        "backbone.norm_f.weight",
        "lm_head.weight",
    ] {
        assert!(names.contains(&key), "no {key}");
    }
    let p = |k: &str| &model.params()[model.param_index(k).unwrap()];
    // in_proj rows: z 16 + xBC (16 + 2·8) + dt 2 + dl 30.
    assert_eq!(
        p("backbone.layers.0.mixer.in_proj.weight").shape,
        vec![80, 16]
    );
    assert_eq!(
        p("backbone.layers.0.mixer.conv1d.weight").shape,
        vec![32, 1, 4]
    );
    assert_eq!(p("backbone.layers.0.mixer.L").shape, vec![2, 15]);
    for (k, decay) in [
        ("backbone.layers.0.mixer.A_log", false),
        ("backbone.layers.0.mixer.dt_bias", false),
        ("backbone.layers.0.mixer.D", false),
        ("backbone.layers.0.mixer.L", false),
        ("backbone.layers.0.mixer.conv1d.bias", false),
        ("backbone.layers.0.mixer.norm.weight", false),
        ("backbone.layers.0.mixer_norm.weight", false),
        ("backbone.norm_f.weight", false),
        ("backbone.layers.0.mixer.in_proj.weight", true),
        ("backbone.layers.0.mixer.conv1d.weight", true),
        ("backbone.embeddings.weight", true),
        ("lm_head.weight", true),
    ] {
        assert_eq!(p(k).decay, decay, "{k}");
    }

    // init: deterministic in the seed, official values.
    let a = init_is_deterministic(&gpu, &model);
    let by: HashMap<&str, &Vec<f32>> = a.iter().map(|(k, _, v)| (k.as_str(), v)).collect();
    assert!(by["backbone.layers.0.mixer.L"].iter().all(|&x| x == 1.0));
    assert!(by["backbone.layers.0.mixer.D"].iter().all(|&x| x == 1.0));
    assert!(by["backbone.layers.0.mixer.conv1d.bias"]
        .iter()
        .all(|&x| x == 0.0));
    assert!(by["backbone.norm_f.weight"].iter().all(|&x| x == 1.0));
    assert_eq!(
        by["backbone.layers.0.mixer.A_log"].as_slice(),
        &[0.0, 2f32.ln()]
    );
    for &x in by["backbone.layers.0.mixer.dt_bias"] {
        let dt = softplus(x as f64);
        assert!((1e-4..=0.1 + 1e-6).contains(&dt), "dt {dt}");
    }
    let w = by["backbone.layers.0.mixer.in_proj.weight"];
    let std = (w.iter().map(|&x| (x as f64).powi(2)).sum::<f64>() / w.len() as f64).sqrt();
    assert!((std - 0.006).abs() < 0.001, "std {std}");
    let bound = 1.0 / (16f64.sqrt() * 2.0); // out_proj: 1/√fan_in / √(2·2 layers)
    let out = by["backbone.layers.1.mixer.out_proj.weight"];
    assert!(out.iter().all(|&x| (x as f64).abs() <= bound));
    assert!(out.iter().any(|&x| (x as f64).abs() > 0.5 * bound));

    // load: a missing and a mis-sized key are named.
    let full: HashMap<String, Vec<f32>> = a.into_iter().map(|(k, _, v)| (k, v)).collect();
    load_errors_name_the_tensor(&gpu, &model, &full, "backbone.layers.1.mixer.D");
}
