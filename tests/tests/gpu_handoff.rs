//! GPU prefill → CPU decode hand-off: the state a GPU prefill leaves, loaded into a runtime
//! `Session`, must continue exactly as a session that stepped every token on the CPU.

use loglinear_converter::model_source::{AlignedBytes, IndexedGguf};
use loglinear_converter::{Checkpoint, ExportOptions, ExportedModel, TensorStore};
use loglinear_host_gpu::{Gpu, GpuError, GpuModel, Prefill, PrefillOptions};
use loglinear_runtime::{DType, Model, Session, SessionConfig};
use loglinear_tests::prefill_fixture::{arena, lcg_bytes, random_store, session, step_all, wide};
use loglinear_tests::*;

/// GPU prefill of `ids[..split]` continued on the CPU for the rest, against a CPU session that
/// steps everything: the prefill logits, the states at the split and the continued logits.
/// Returns the worst error seen, and the prefill.
fn gpu_then_cpu_vs_cpu(
    what: &str,
    gpu: &Gpu,
    model: &Model<'_>,
    ids: &[u32],
    split: usize,
    levels: usize,
    tol: f64,
) -> Prefill {
    let gm = GpuModel::new(gpu, model).unwrap();
    let p = gm.prefill(&ids[..split], levels, false).unwrap();

    let mut a_cpu = arena(model, levels);
    let mut cpu = session(model, &mut a_cpu, levels);
    let cpu_prefill = step_all(&mut cpu, &ids[..split]);
    let v = model.config().vocab_size;
    check_rel_max(
        &format!("{what} prefill logits vs CPU"),
        &p.last_logits,
        &wide(&cpu_prefill[(split - 1) * v..]),
        tol,
    );
    check_rel_max(
        &format!("{what} states vs CPU"),
        &p.states,
        &wide(cpu.states()),
        tol,
    );
    check_rel_max(
        &format!("{what} conv states vs CPU"),
        &p.conv,
        &wide(cpu.conv_states()),
        tol,
    );

    let mut a_gpu = arena(model, levels);
    let mut handed = session(model, &mut a_gpu, levels);
    p.load_into(&mut handed).unwrap();
    assert_eq!(handed.t(), split as u64);
    let ours = step_all(&mut handed, &ids[split..]);
    let theirs = step_all(&mut cpu, &ids[split..]);
    check_rel_max(
        &format!("{what} continued logits vs CPU"),
        &ours,
        &wide(&theirs),
        tol,
    );
    eprintln!(
        "{what}: GPU prefill of {split} tokens {:.1} ms",
        p.gpu_seconds * 1e3
    );
    p
}

/// Every golden stress model: prefill `decode.prefill_len` tokens of its longest sequence on
/// the GPU, continue with the decode steps on the CPU; against the golden decode trace and a
/// CPU-only session.
#[test]
fn golden_models_continue_on_the_cpu() {
    let gpu = Gpu::new_fp32().expect("GPU adapter");
    let m = manifest();
    let mut stress_kinds = Vec::new();
    for (name, entry) in cases(&m, "model") {
        if entry["style"] != "stress" {
            continue;
        }
        let dir = golden_dir().join(entry["dir"].as_str().unwrap());
        let ckpt = Checkpoint::load(&dir).unwrap();
        let model = ckpt.model().unwrap();
        let c = *model.config();
        let g = read_arrays(&dir.join("golden.safetensors"));
        let ids = decode_ids(&g, &name);
        let split = get(&g, "decode.prefill_len", &name).data[0] as usize;
        let levels = c.default_state_levels();
        let p = gpu_then_cpu_vs_cpu(&name, &gpu, &model, &ids, split, levels, tol::MODEL);

        // Against the golden decode trace.
        check_rel_max(
            &format!("{name} prefill logits"),
            &p.last_logits,
            &get(&g, "decode.prefill_last_logits", &name).data,
            tol::MODEL,
        );
        let state_n = p.states.len() / c.num_layers;
        let conv_n = p.conv.len() / c.num_layers;
        for layer in 0..c.num_layers {
            let key = if c.arch.is_log_linear() {
                "fenwick"
            } else {
                "ssm"
            };
            let r = get(&g, &format!("decode.state.layer{layer}.{key}"), &name);
            let ours = &p.states[layer * state_n..][..state_n];
            check_rel_max(
                &format!("{name} layer {layer} state"),
                ours,
                &r.data,
                tol::MODEL,
            );
            let conv_ref: Vec<f64> = if c.arch.is_mamba2() {
                get(&g, &format!("decode.state.layer{layer}.conv"), &name)
                    .data
                    .clone()
            } else {
                ["q", "k", "v"]
                    .iter()
                    .flat_map(|s| {
                        get(&g, &format!("decode.state.layer{layer}.conv_{s}"), &name)
                            .data
                            .clone()
                    })
                    .collect()
            };
            check_rel_max(
                &format!("{name} layer {layer} conv"),
                &p.conv[layer * conv_n..][..conv_n],
                &conv_ref,
                tol::MODEL,
            );
        }
        let mut a = arena(&model, levels);
        let mut s = session(&model, &mut a, levels);
        p.load_into(&mut s).unwrap();
        let steps = get(&g, "decode.step_ids", &name).ids();
        assert_eq!(steps, ids[split..]);
        let logits = step_all(&mut s, &steps);
        check_rel_max(
            &format!("{name} decode logits"),
            &logits,
            &get(&g, "decode.step_logits", &name).data,
            tol::MODEL,
        );

        // An f16 session takes the same state, narrowed once.
        let cfg = SessionConfig {
            levels: Some(levels),
            ..Default::default()
        };
        let mut a16 = vec![0u8; Session::<half::f16>::arena_bytes(&model, &cfg).unwrap()];
        let mut s16 = Session::<half::f16>::new(&model, &mut a16, cfg).unwrap();
        p.load_into(&mut s16).unwrap();
        assert!(s16
            .states()
            .iter()
            .zip(&p.states)
            .all(|(h, &f)| *h == half::f16::from_f32(f)));
        stress_kinds.push(entry["kind"].as_str().unwrap_or_default().to_string());
    }
    for kind in ["ll_mamba2", "mamba2", "ll_gdn", "gdn"] {
        assert!(
            stress_kinds.iter().any(|k| k == kind),
            "expected a stress model of kind {kind}"
        );
    }
}

/// Fewer levels than the prompt needs: the top level saturates, on the GPU as in the decoder.
#[test]
fn saturating_levels_continue_on_the_cpu() {
    let gpu = Gpu::new_fp32().expect("GPU adapter");
    let m = manifest();
    for (name, entry) in cases(&m, "model") {
        if entry["style"] != "stress"
            || !["ll_mamba2", "ll_gdn"].contains(&entry["kind"].as_str().unwrap())
        {
            continue;
        }
        if entry["layout"] == "log_linear_mamba2" {
            continue; // the same weights as hattention
        }
        let dir = golden_dir().join(entry["dir"].as_str().unwrap());
        let ckpt = Checkpoint::load(&dir).unwrap();
        let model = ckpt.model().unwrap();
        let g = read_arrays(&dir.join("golden.safetensors"));
        let ids = decode_ids(&g, &name);
        let split = get(&g, "decode.prefill_len", &name).data[0] as usize;
        gpu_then_cpu_vs_cpu(
            &format!("{name} levels 4"),
            &gpu,
            &model,
            &ids,
            split,
            4,
            tol::MODEL,
        );
    }
}

/// A long prompt (24 chunks of 64, levels up to 11, a partial last chunk): GPU prefill of 1500
/// tokens continued for 20 steps, against CPU-only stepping.
#[test]
fn long_prompts_continue_on_the_cpu() {
    let gpu = Gpu::new_fp32().expect("GPU adapter");
    let m = manifest();
    // A fixed pseudo-random token stream (LCG), so that every position differs.
    let bytes = lcg_bytes(1520, 12345);
    for (name, entry) in cases(&m, "model") {
        let layout = entry["layout"].as_str().unwrap();
        if entry["style"] != "stress" || !["hattention", "h_gated_deltanet"].contains(&layout) {
            continue;
        }
        let dir = golden_dir().join(entry["dir"].as_str().unwrap());
        let ckpt = Checkpoint::load(&dir).unwrap();
        let model = ckpt.model().unwrap();
        let vocab = model.config().vocab_size as u32;
        let ids: Vec<u32> = bytes.iter().map(|&b| b % vocab).collect();
        gpu_then_cpu_vs_cpu(
            &format!("{name} T1500"),
            &gpu,
            &model,
            &ids,
            1500,
            15,
            tol::MODEL,
        );
    }
}

/// The first `n` bytes of a prompt text as byte-level tokens.
fn prompt_ids(n: usize) -> Vec<u32> {
    let text = "The quick brown fox jumps over the lazy dog. Log-linear attention keeps a Fenwick \
                tree of states, one per power-of-two block of the past, so the memory grows with \
                the logarithm of the context length.";
    text.bytes().take(n).map(u32::from).collect()
}

/// Trained models: a Q8_0 model file, an F32 checkpoint, and F16 and Q4_0 exports of it.
#[test]
fn trained_models_continue_on_the_cpu() {
    let gpu = Gpu::new_fp32().expect("GPU adapter");
    let ids = prompt_ids(120);
    // The first 100 tokens prefilled, at the model's default levels.
    let check = |what: &str, model: &Model<'_>| {
        let levels = model.config().default_state_levels();
        gpu_then_cpu_vs_cpu(what, &gpu, model, &ids, 100, levels, tol::MODEL);
    };

    let bytes = AlignedBytes::read(&models_dir().join("ll-gdn-mcu-q8_0.gguf")).unwrap();
    let gguf = IndexedGguf::parse(bytes.as_bytes()).unwrap();
    let model = gguf.model().unwrap();
    assert_eq!(model.mlp(0).unwrap().up.dtype(), DType::Q8_0);
    check("ll-gdn-mcu q8_0", &model);

    let ckpt = Checkpoint::load(models_dir().join("ll-mamba2-mcu")).unwrap();
    check("ll-mamba2-mcu f32", &ckpt.model().unwrap());
    for dtype in [DType::F16, DType::Q4_0] {
        let exported = export_as(&ckpt, dtype);
        let model = exported.model().unwrap();
        assert!(model.mlp(0).unwrap().up.dtype() == dtype);
        check(&format!("ll-mamba2-mcu {}", dtype.name()), &model);
    }
}

/// Bad inputs are typed errors, not panics.
#[test]
fn bad_inputs_are_errors() {
    let gpu = Gpu::new_fp32().expect("GPU adapter");
    let m = manifest();
    let (_, entry) = cases(&m, "model")
        .into_iter()
        .find(|(_, e)| e["kind"] == "ll_gdn")
        .unwrap();
    let ckpt = Checkpoint::load(golden_dir().join(entry["dir"].as_str().unwrap())).unwrap();
    let model = ckpt.model().unwrap();
    let gm = GpuModel::new(&gpu, &model).unwrap();
    assert!(gm.prefill(&[], 15, false).is_err());
    let vocab = model.config().vocab_size as u32;
    assert!(gm.prefill(&[1, 2, vocab], 15, false).is_err());
    assert!(gm.prefill(&[1, 2], 1, false).is_err());
    assert!(gm.prefill(&[1, 2], 16, false).is_err());
    // A prompt whose activations would not fit a storage binding is refused before any work.
    let d = model.config().hidden_size;
    let too_many = (gpu.limits.max_storage_buffer_binding_size as usize) / (4 * d) + 1;
    let err = gm.prefill(&vec![0u32; too_many], 15, false);
    assert!(matches!(err, Err(GpuError::TooLarge { .. })), "{err:?}");

    // T = 1 and T < conv width work, straight into a session.
    let mut a = arena(&model, 15);
    let mut s = session(&model, &mut a, 15);
    let mut a_gpu = arena(&model, 15);
    let mut s_gpu = session(&model, &mut a_gpu, 15);
    let p = gm.prefill_into(&[7], &mut s_gpu).unwrap();
    let cpu = s.step(7).unwrap().to_vec();
    check_rel_max("T=1 logits", &p.last_logits, &wide(&cpu), tol::MODEL);
    check_rel_max("T=1 states", &p.states, &wide(s.states()), tol::MODEL);
    check_rel_max("T=1 conv", &p.conv, &wide(s.conv_states()), tol::MODEL);
    let next_gpu = s_gpu.step(8).unwrap().to_vec();
    check_rel_max(
        "T=1 then a step",
        &next_gpu,
        &wide(s.step(8).unwrap()),
        tol::MODEL,
    );
}

/// A random model of a mid-size config (not trained: only for timing).
fn random_model_store(json: serde_json::Value) -> (loglinear_runtime::ModelConfig, TensorStore) {
    let (config, _) = loglinear_converter::parse_config(&json).unwrap();
    let store = random_store(&config, 1, Some(0.5));
    (config, store)
}

/// Prefill throughput of mid-size random models (F32 and Q8_0 weights) at a few prompt
/// lengths. A benchmark for a real GPU: `cargo test --release --test handoff -- --ignored`.
#[test]
#[ignore = "benchmark: run on a real GPU"]
fn prefill_throughput() {
    // Whatever the adapter offers (cooperative matrices unless LOGLINEAR_GPU_NO_COOP=1).
    let gpu = Gpu::new().expect("GPU adapter");
    eprintln!("GPU: {}", gpu.describe());
    let configs = [
        serde_json::json!({"model_type": "hattention", "vocab_size": 256, "hidden_size": 768,
            "num_hidden_layers": 8, "num_heads": 24, "head_dim": 64, "state_size": 128,
            "n_groups": 1, "expand": 2, "conv_kernel": 4, "layer_norm_epsilon": 1e-5}),
        serde_json::json!({"model_type": "h_gated_deltanet", "vocab_size": 256, "hidden_size": 768,
            "num_hidden_layers": 8, "num_heads": 6, "head_dim": 128, "expand_v": 2,
            "conv_size": 4, "norm_eps": 1e-6}),
    ];
    let ids = lcg_bytes(16384, 7);
    for json in configs {
        let (config, store) = random_model_store(json);
        for dtype in [DType::F32, DType::Q8_0] {
            let opts = ExportOptions {
                matrix_type: dtype,
                ..ExportOptions::default()
            };
            let exported = ExportedModel::from_source(config, &store, &opts, &mut |_| {}).unwrap();
            let model = exported.model().unwrap();
            let gm = GpuModel::new(&gpu, &model).unwrap();
            gm.prefill(&ids[..256], 15, false).unwrap(); // warm-up
            for t in [2048, 16384] {
                let p = gm.prefill(&ids[..t], 15, false).unwrap();
                let opts = PrefillOptions {
                    levels: 15,
                    all_logits: false,
                    hidden: false,
                    profile: true,
                };
                let profiled = gm.prefill_with(&ids[..t], &opts).unwrap();
                for (phase, secs) in &profiled.phases {
                    eprintln!("    {phase}: {:.1} ms", secs * 1e3);
                }
                assert!(p.last_logits.iter().all(|v| v.is_finite()));
                eprintln!(
                    "{} {} T={t}: {:.1} ms, {:.0} tokens/s",
                    config.arch.name(),
                    dtype.name(),
                    p.gpu_seconds * 1e3,
                    t as f64 / p.gpu_seconds
                );
            }
        }
    }
}
