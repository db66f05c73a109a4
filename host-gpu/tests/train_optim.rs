//! The GPU AdamW and gradient clipping against an f64 CPU reference of torch's maths
//! (torch.optim.AdamW, torch.nn.utils.clip_grad_norm_) on random tensors.

use loglinear_host_gpu::train::optim::{AdamW, AdamWConfig};
use loglinear_host_gpu::train::Param;
use loglinear_host_gpu::Gpu;
use loglinear_tests::random::{uniform_f32, SplitMix64};
use loglinear_tests::rel_max as rel;

/// Max relative error allowed against the f64 reference (max |a − b| / max |b| per tensor).
const TOL: f64 = 1e-6;

/// One tensor in the f64 reference.
struct RefParam {
    decay: bool,
    p: Vec<f64>,
    m: Vec<f64>,
    v: Vec<f64>,
}

/// torch.nn.utils.clip_grad_norm_ then one torch.optim.AdamW step (step count `t`), in f64.
/// Returns the pre-clip norm.
fn reference_step(
    params: &mut [RefParam],
    grads: &[Vec<f32>],
    c: &AdamWConfig,
    t: u64,
    lr: f64,
    clip: Option<f64>,
) -> f64 {
    let norm = grads
        .iter()
        .flatten()
        .map(|&g| (g as f64) * (g as f64))
        .sum::<f64>()
        .sqrt();
    let factor = clip.map_or(1.0, |max| (max / (norm + 1e-6)).min(1.0));
    let bc1 = 1.0 - c.beta1.powi(t as i32);
    let bc2 = 1.0 - c.beta2.powi(t as i32);
    for (rp, g) in params.iter_mut().zip(grads) {
        for i in 0..rp.p.len() {
            let g = g[i] as f64 * factor;
            if rp.decay {
                rp.p[i] *= 1.0 - lr * c.weight_decay;
            }
            rp.m[i] = c.beta1 * rp.m[i] + (1.0 - c.beta1) * g;
            rp.v[i] = c.beta2 * rp.v[i] + (1.0 - c.beta2) * g * g;
            let denom = rp.v[i].sqrt() / bc2.sqrt() + c.eps;
            rp.p[i] -= lr / bc1 * rp.m[i] / denom;
        }
    }
    norm
}

fn make_params(
    gpu: &Gpu,
    rng: &mut SplitMix64,
    sizes: &[(usize, bool)],
) -> (Vec<Param>, Vec<RefParam>) {
    let mut params = Vec::new();
    let mut refs = Vec::new();
    for (i, &(len, decay)) in sizes.iter().enumerate() {
        let value = uniform_f32(rng, len, 1.0);
        params.push(Param {
            name: format!("p{i}"),
            shape: vec![len],
            len,
            value: gpu.storage_from("value", &value).unwrap(),
            grad: gpu.storage_zeroed("grad", 4 * len as u64).unwrap(),
            decay,
        });
        refs.push(RefParam {
            decay,
            p: value.iter().map(|&x| x as f64).collect(),
            m: vec![0.0; len],
            v: vec![0.0; len],
        });
    }
    (params, refs)
}

fn read(gpu: &Gpu, buf: &wgpu::Buffer, len: usize) -> Vec<f32> {
    let mut v = gpu.read_f32(buf).unwrap();
    v.truncate(len);
    v
}

/// Checks values and moments of every parameter against the reference; returns the worst error.
fn compare(gpu: &Gpu, opt: &AdamW, params: &[Param], refs: &[RefParam]) -> f64 {
    let moments = opt.read_moments(gpu).unwrap();
    let mut worst = 0.0f64;
    for ((p, r), (m, v)) in params.iter().zip(refs).zip(&moments) {
        let e = [
            rel(&read(gpu, &p.value, p.len), &r.p),
            rel(m, &r.m),
            rel(v, &r.v),
        ];
        assert!(
            e.iter().all(|&x| x <= TOL),
            "{}: value/m/v errors {e:?} over {TOL}",
            p.name
        );
        worst = e.iter().copied().fold(worst, f64::max);
    }
    worst
}

/// Sizes that cross the 256-thread and 4096-value chunk boundaries, with one no-decay tensor.
const SIZES: [(usize, bool); 4] = [(1, false), (1000, true), (4097, true), (9000, false)];

#[test]
fn adamw_matches_the_f64_reference_over_several_steps() {
    let gpu = Gpu::new().expect("GPU adapter (lavapipe in CI)");
    let mut rng = SplitMix64::new(1);
    let (params, mut refs) = make_params(&gpu, &mut rng, &SIZES);
    let config = AdamWConfig::default();
    let mut opt = AdamW::new(&gpu, &params, config).unwrap();
    let mut worst = 0.0f64;
    for (t, lr) in [(1u64, 1e-3), (2, 2e-3), (3, 5e-4), (4, 1e-2), (5, 3e-3)] {
        let grads: Vec<Vec<f32>> = params
            .iter()
            .map(|p| uniform_f32(&mut rng, p.len, 0.5))
            .collect();
        for (p, g) in params.iter().zip(&grads) {
            gpu.write(&p.grad, g);
        }
        let report = opt.step(&gpu, lr, None).unwrap();
        let norm = reference_step(&mut refs, &grads, &config, t, lr, None);
        assert!((report.grad_norm as f64 - norm).abs() / norm <= TOL);
        assert_eq!(report.clip_factor, 1.0);
        worst = worst.max(compare(&gpu, &opt, &params, &refs));
    }
    assert_eq!(opt.steps(), 5);
    eprintln!("AdamW vs f64 reference, 5 steps: worst relative error {worst:.2e}");
}

#[test]
fn clipping_scales_by_the_global_norm_and_reports_the_pre_clip_norm() {
    let gpu = Gpu::new().expect("GPU adapter (lavapipe in CI)");
    let mut rng = SplitMix64::new(2);
    let (params, mut refs) = make_params(&gpu, &mut rng, &SIZES);
    let config = AdamWConfig {
        weight_decay: 0.3,
        ..AdamWConfig::default()
    };
    let mut opt = AdamW::new(&gpu, &params, config).unwrap();
    // Step 1 is clipped (norm about 30 > 1), step 2 is not (norm about 0.03 < 1).
    for (t, scale) in [(1u64, 1.0f32), (2, 1e-3)] {
        let grads: Vec<Vec<f32>> = params
            .iter()
            .map(|p| uniform_f32(&mut rng, p.len, scale))
            .collect();
        for (p, g) in params.iter().zip(&grads) {
            gpu.write(&p.grad, g);
        }
        let report = opt.step(&gpu, 1e-3, Some(1.0)).unwrap();
        let norm = reference_step(&mut refs, &grads, &config, t, 1e-3, Some(1.0));
        let err = (report.grad_norm as f64 - norm).abs() / norm;
        assert!(err <= TOL, "norm {} vs {norm}", report.grad_norm);
        let factor = (1.0 / (norm + 1e-6)).min(1.0);
        assert!(((report.clip_factor as f64) - factor).abs() <= TOL * factor);
        if t == 1 {
            assert!(report.clip_factor < 0.1, "{report:?}");
        } else {
            assert_eq!(report.clip_factor, 1.0);
        }
        let worst = compare(&gpu, &opt, &params, &refs);
        eprintln!("clip step {t}: norm {norm:.6} (err {err:.1e}), worst error {worst:.2e}");
    }
}

#[test]
fn the_norm_is_deterministic() {
    let gpu = Gpu::new().expect("GPU adapter (lavapipe in CI)");
    let mut rng = SplitMix64::new(3);
    let (params, _) = make_params(&gpu, &mut rng, &[(70_000, true), (333, false)]);
    for p in &params {
        gpu.write(&p.grad, &uniform_f32(&mut rng, p.len, 1.0));
    }
    let opt = AdamW::new(&gpu, &params, AdamWConfig::default()).unwrap();
    let mut norms = Vec::new();
    for _ in 0..3 {
        let mut enc = gpu.encoder("norm");
        opt.encode_grad_norm(&gpu, &mut enc, Some(0.5)).unwrap();
        gpu.submit_and_wait(enc).unwrap();
        norms.push(opt.read_report(&gpu).unwrap());
    }
    assert_eq!(norms[0].grad_norm.to_bits(), norms[1].grad_norm.to_bits());
    assert_eq!(norms[0].grad_norm.to_bits(), norms[2].grad_norm.to_bits());
    assert_eq!(opt.steps(), 0, "a norm pass is not a step");
}

#[test]
fn weight_decay_applies_only_where_the_flag_is_set() {
    let gpu = Gpu::new().expect("GPU adapter (lavapipe in CI)");
    let mut rng = SplitMix64::new(4);
    let (params, refs) = make_params(&gpu, &mut rng, &[(500, true), (500, false)]);
    let config = AdamWConfig {
        weight_decay: 0.5,
        ..AdamWConfig::default()
    };
    let mut opt = AdamW::new(&gpu, &params, config).unwrap();
    // Zero gradients: Adam's update is exactly 0, only the decay moves the weights.
    opt.step(&gpu, 0.1, None).unwrap();
    let decayed = read(&gpu, &params[0].value, 500);
    let kept = read(&gpu, &params[1].value, 500);
    let factor = (1.0f64 - 0.1 * 0.5) as f32;
    for (got, want) in decayed.iter().zip(&refs[0].p) {
        assert_eq!(*got, *want as f32 * factor);
    }
    for (got, want) in kept.iter().zip(&refs[1].p) {
        assert_eq!(*got, *want as f32);
    }
}

#[test]
fn moments_round_trip_and_bad_input_is_an_error() {
    let gpu = Gpu::new().expect("GPU adapter (lavapipe in CI)");
    let mut rng = SplitMix64::new(5);
    let (params, _) = make_params(&gpu, &mut rng, &[(10, true), (5000, false)]);
    let mut opt = AdamW::new(&gpu, &params, AdamWConfig::default()).unwrap();
    let m = uniform_f32(&mut rng, 5000, 1.0);
    let v: Vec<f32> = uniform_f32(&mut rng, 5000, 1.0)
        .iter()
        .map(|x| x.abs())
        .collect();
    opt.load_moments(&gpu, 1, &m, &v).unwrap();
    opt.set_steps(7);
    let got = opt.read_moments(&gpu).unwrap();
    assert_eq!(got[1].0, m);
    assert_eq!(got[1].1, v);
    assert_eq!(got[0].0, vec![0.0; 10]);
    assert_eq!(opt.steps(), 7);
    assert!(opt.load_moments(&gpu, 2, &m, &v).is_err());
    assert!(opt.load_moments(&gpu, 0, &m, &v).is_err());
    assert!(opt.step(&gpu, f64::NAN, None).is_err());
    assert!(opt.step(&gpu, 1e-3, Some(0.0)).is_err());
    assert_eq!(opt.steps(), 7, "refused steps are not counted");
}
