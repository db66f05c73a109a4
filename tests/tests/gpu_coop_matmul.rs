//! The projection matmul on cooperative matrices (tensor cores), on adapters that have them.
//!
//! Its inputs are rounded to the configuration's element type (f16 on NVIDIA), so it is held
//! to the reduced-precision tolerances of tests/golden/README.md §7: 3e-2 for f16 inputs
//! (as bf16 matmuls), 3e-3 for f32 inputs (as TF32). The fp32 kernel, which every other test
//! checks, keeps the fp32 tolerances. lavapipe has no cooperative matrices: there these tests
//! report as ignored, with the reason (libtest-mimic: libtest can ignore only at compile time).
//!
//! On a GPU that has them, `Gpu::new()` takes this path unless `LOGLINEAR_GPU_NO_COOP=1`; the
//! fp32-tolerance suites build their device with `Gpu::new_fp32()`, so they check the fp32 path
//! on every adapter.

use libtest_mimic::Trial;
use loglinear_converter::Checkpoint;
use loglinear_host_gpu::gpu::{CoopMatmul, GpuOptions};
use loglinear_host_gpu::ops::{Kernels, MatmulPath};
use loglinear_host_gpu::weights::GpuMatrix;
use loglinear_host_gpu::{wgpu, Gpu, GpuModel, PrefillOptions, Rows};
use loglinear_runtime::quant::{BlockQ4_0, BlockQ8_0, QK};
use loglinear_runtime::DType;
use loglinear_tests::prefill_fixture::{arena, session, step_all};
use loglinear_tests::*;

/// A device with cooperative matrices on, or None when the adapter has none the kernel can
/// use.
fn coop_gpu() -> Option<(Gpu, CoopMatmul)> {
    let gpu = Gpu::new_with(GpuOptions {
        cooperative_matrix: true,
        ..GpuOptions::default()
    })
    .expect("GPU adapter");
    let cfg = gpu.coop_matmul()?;
    Some((gpu, cfg))
}

fn main() {
    let args = libtest_mimic::Arguments::from_args();
    let probe = Gpu::new_with(GpuOptions {
        cooperative_matrix: true,
        ..GpuOptions::default()
    })
    .expect("GPU adapter");
    let absent = probe.coop_matmul().is_none();
    eprintln!(
        "GPU: {}; cooperative-matrix configurations: {:?}",
        probe.describe(),
        probe.coop
    );
    drop(probe);
    if absent {
        eprintln!(
            "coop_matmul: the adapter has no cooperative matrices the matmul can use: both tests \
             are ignored"
        );
    }
    let trial = |name: &str, test: fn(Gpu, CoopMatmul)| {
        Trial::test(name, move || {
            let (gpu, cfg) = coop_gpu().ok_or("the adapter has no cooperative matrices")?;
            test(gpu, cfg);
            Ok(())
        })
        .with_ignored_flag(absent)
    };
    let trials = vec![
        trial(
            "coop_matmul_matches_the_exact_product",
            coop_matmul_matches_the_exact_product,
        ),
        trial(
            "coop_prefill_matches_golden_models",
            coop_prefill_matches_golden_models,
        ),
    ];
    libtest_mimic::run(&args, trials).exit();
}

/// README §7: "GPU with TF32 / bf16 matmuls 3e-3 / 3e-2".
fn tolerance(cfg: &CoopMatmul) -> f64 {
    match cfg.input {
        wgpu::CooperativeScalarType::F16 => 3e-2,
        _ => 3e-3,
    }
}

struct Lcg(u32);

impl Lcg {
    fn next(&mut self) -> f32 {
        self.0 = self.0.wrapping_mul(1664525).wrapping_add(1013904223);
        (self.0 >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0
    }
}

/// `w` (`rows × cols`, f32) stored as `dtype`, and the values the GPU will see after
/// dequantizing it.
fn stored(dtype: DType, w: &[f32]) -> (Vec<u8>, Vec<f32>) {
    match dtype {
        DType::F32 => (bytemuck::cast_slice(w).to_vec(), w.to_vec()),
        DType::F16 => {
            let h: Vec<half::f16> = w.iter().map(|&v| half::f16::from_f32(v)).collect();
            let back = h.iter().map(|v| v.to_f32()).collect();
            (bytemuck::cast_slice(&h).to_vec(), back)
        }
        DType::Q8_0 => {
            let blocks: Vec<BlockQ8_0> = w
                .chunks_exact(QK)
                .map(|c| BlockQ8_0::quantize(c.try_into().unwrap()))
                .collect();
            let mut back = vec![0.0; w.len()];
            for (b, out) in blocks.iter().zip(back.chunks_exact_mut(QK)) {
                b.dequantize(out);
            }
            (bytemuck::cast_slice(&blocks).to_vec(), back)
        }
        DType::Q4_0 => {
            let blocks: Vec<BlockQ4_0> = w
                .chunks_exact(QK)
                .map(|c| BlockQ4_0::quantize(c.try_into().unwrap()))
                .collect();
            let mut back = vec![0.0; w.len()];
            for (b, out) in blocks.iter().zip(back.chunks_exact_mut(QK)) {
                b.dequantize(out);
            }
            (bytemuck::cast_slice(&blocks).to_vec(), back)
        }
    }
}

/// Every weight type, with row counts and K that are not multiples of the tiles, and X / Y as
/// column slices of wider rows: the coop kernel against an f64 product of the same
/// (dequantized) weights.
fn coop_matmul_matches_the_exact_product(gpu: Gpu, cfg: CoopMatmul) {
    let coop = Kernels::new_with(&gpu, true).unwrap();
    assert_eq!(
        coop.matmul_path(),
        MatmulPath::Coop(cfg),
        "coop kernels did not build: {:?}",
        coop.coop_note()
    );
    let fp32 = Kernels::new_with(&gpu, false).unwrap();
    assert_eq!(fp32.matmul_path(), MatmulPath::Fp32);
    let mut rng = Lcg(11);
    for dtype in [DType::F32, DType::F16, DType::Q8_0, DType::Q4_0] {
        for (m, n, k) in [(100, 200, 96), (257, 70, 160), (64, 64, 1536)] {
            let k = if matches!(dtype, DType::F32 | DType::F16) && k == 96 {
                72
            } else {
                k
            };
            let (x_offset, x_stride, y_offset, y_stride) = (3, k + 8, 2, n + 5);
            let x: Vec<f32> = (0..x_offset + m * x_stride).map(|_| rng.next()).collect();
            let w: Vec<f32> = (0..n * k).map(|_| rng.next()).collect();
            let (bytes, w_seen) = stored(dtype, &w);
            let matrix = GpuMatrix {
                rows: n,
                cols: k,
                dtype,
                buf: gpu.storage_from("w", &bytes).unwrap(),
            };
            let xb = gpu.storage_from("x", &x).unwrap();
            let mut reference = Vec::new();
            for r in 0..m {
                for c in 0..n {
                    let row = &x[x_offset + r * x_stride..][..k];
                    let s: f64 = row
                        .iter()
                        .zip(&w_seen[c * k..][..k])
                        .map(|(&a, &b)| a as f64 * b as f64)
                        .sum();
                    reference.push(s);
                }
            }
            for (name, kernels, tol) in [("coop", &coop, tolerance(&cfg)), ("fp32", &fp32, 1e-5)] {
                let yb = gpu
                    .storage_zeroed("y", ((y_offset + m * y_stride) * 4) as u64)
                    .unwrap();
                let x = Rows::new(&xb, x_offset, x_stride);
                let y = Rows::new(&yb, y_offset, y_stride);
                let step = kernels.matmul(&gpu, &matrix, x, y, m).unwrap();
                let mut enc = gpu.encoder("matmul");
                step.encode(&mut enc);
                gpu.submit_and_wait(enc).unwrap();
                let y = gpu.read_f32(&yb).unwrap();
                let ours: Vec<f32> = (0..m)
                    .flat_map(|r| y[y_offset + r * y_stride..][..n].to_vec())
                    .collect();
                check_rel_max(
                    &format!("{name} {} m{m} n{n} k{k}", dtype.name()),
                    &ours,
                    &reference,
                    tol,
                );
                // Nothing outside the Y slice is written.
                assert!(y[..y_offset].iter().all(|&v| v == 0.0));
                for r in 0..m - 1 {
                    let gap = &y[y_offset + r * y_stride + n..][..y_stride - n];
                    assert!(gap.iter().all(|&v| v == 0.0), "row {r} written past n");
                }
            }
        }
    }
}

/// The golden stress models prefilled with the coop matmuls: logits at every position and
/// hidden states against golden/model, then the hand-off: the GPU state continued on the CPU
/// against the golden decode trace.
fn coop_prefill_matches_golden_models(gpu: Gpu, cfg: CoopMatmul) {
    let tol = tolerance(&cfg);
    let m = manifest();
    let mut stress_kinds = Vec::new();
    let mut worst = 0.0f64;
    for (name, entry) in cases(&m, "model") {
        if entry["style"] != "stress" {
            continue;
        }
        let dir = golden_dir().join(entry["dir"].as_str().unwrap());
        let ckpt = Checkpoint::load(&dir).unwrap_or_else(|e| panic!("{name}: {e}"));
        let model = ckpt.model().unwrap();
        let c = *model.config();
        let g = read_arrays(&dir.join("golden.safetensors"));
        let gm = GpuModel::new(&gpu, &model).unwrap();
        let levels = c.default_state_levels();
        let mut note = |what: String, ours: &[f32], reference: &[f64]| {
            worst = worst.max(rel_max(ours, reference));
            check_rel_max(&what, ours, reference, tol);
        };
        for t in model_lengths(&g, &name) {
            let ids = get(&g, &format!("ids_T{t}"), &name).ids();
            let opts = PrefillOptions {
                levels,
                all_logits: true,
                hidden: g.contains_key(&format!("hidden_T{t}.layer0")),
                profile: false,
            };
            let p = gm.prefill_with(&ids, &opts).unwrap();
            let logits = get(&g, &format!("logits_T{t}"), &name);
            note(
                format!("coop {name} logits_T{t}"),
                p.all_logits.as_ref().unwrap(),
                &logits.data,
            );
            if let Some(hidden) = &p.hidden {
                for (layer, h) in hidden.iter().enumerate() {
                    let r = get(&g, &format!("hidden_T{t}.layer{layer}"), &name);
                    note(format!("coop {name} hidden_T{t}.layer{layer}"), h, &r.data);
                }
            }
        }
        // Hand-off: prefill the golden prefix, continue on the CPU.
        let ids = decode_ids(&g, &name);
        let split = get(&g, "decode.prefill_len", &name).data[0] as usize;
        let p = gm.prefill(&ids[..split], levels, false).unwrap();
        note(
            format!("coop {name} prefill last logits"),
            &p.last_logits,
            &get(&g, "decode.prefill_last_logits", &name).data,
        );
        let mut arena = arena(&model, levels);
        let mut s = session(&model, &mut arena, levels);
        p.load_into(&mut s).unwrap();
        let logits = step_all(&mut s, &get(&g, "decode.step_ids", &name).ids());
        note(
            format!("coop {name} decode logits after the hand-off"),
            &logits,
            &get(&g, "decode.step_logits", &name).data,
        );
        stress_kinds.push(entry["kind"].as_str().unwrap_or_default().to_string());
    }
    for kind in ["ll_mamba2", "mamba2", "ll_gdn", "gdn"] {
        assert!(
            stress_kinds.iter().any(|k| k == kind),
            "expected a stress model of kind {kind}"
        );
    }
    eprintln!(
        "coop path ({}): worst rel_max vs golden {worst:.2e}",
        cfg.describe()
    );
}
