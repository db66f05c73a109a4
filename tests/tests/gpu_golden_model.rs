//! Whole-model GPU prefill against `golden/model` (the 5 stress models; the `init` ones too when
//! `LOGLINEAR_GOLDEN_DIR` points at the full set): logits at every
//! position at every stored length, and the residual stream after each block where the case
//! stores it.

use loglinear_converter::Checkpoint;
use loglinear_host_gpu::{Gpu, GpuModel, PrefillOptions};
use loglinear_tests::*;

#[test]
fn prefill_logits_and_hidden_match_golden() {
    let gpu = Gpu::new_fp32().expect("GPU adapter");
    eprintln!("GPU: {}", gpu.describe());
    let m = manifest();
    let mut stress_kinds = Vec::new();
    for (name, entry) in cases(&m, "model") {
        let dir = golden_dir().join(entry["dir"].as_str().unwrap());
        let ckpt = Checkpoint::load(&dir).unwrap_or_else(|e| panic!("{name}: {e}"));
        let model = ckpt.model().unwrap();
        let g = read_arrays(&dir.join("golden.safetensors"));
        let gm = GpuModel::new(&gpu, &model).unwrap();
        for t in model_lengths(&g, &name) {
            let ids = get(&g, &format!("ids_T{t}"), &name).ids();
            let opts = PrefillOptions {
                levels: model.config().default_state_levels(),
                all_logits: true,
                hidden: g.contains_key(&format!("hidden_T{t}.layer0")),
                profile: false,
            };
            let p = gm.prefill_with(&ids, &opts).unwrap();
            let logits = get(&g, &format!("logits_T{t}"), &name);
            check_rel_max(
                &format!("{name} logits_T{t}"),
                p.all_logits.as_ref().unwrap(),
                &logits.data,
                tol::MODEL,
            );
            let v = model.config().vocab_size;
            check_rel_max(
                &format!("{name} last logits T{t}"),
                &p.last_logits,
                &logits.data[(t - 1) * v..],
                tol::MODEL,
            );
            if let Some(hidden) = &p.hidden {
                for (layer, h) in hidden.iter().enumerate() {
                    let r = get(&g, &format!("hidden_T{t}.layer{layer}"), &name);
                    check_rel_max(
                        &format!("{name} hidden_T{t}.layer{layer}"),
                        h,
                        &r.data,
                        tol::MODEL,
                    );
                }
            }
            eprintln!("{name} T{t}: GPU {:.1} ms", p.gpu_seconds * 1e3);
        }
        if entry["style"] == "stress" {
            stress_kinds.push(entry["kind"].as_str().unwrap_or_default().to_string());
        }
    }
    for kind in ["ll_mamba2", "mamba2", "ll_gdn", "gdn"] {
        assert!(
            stress_kinds.iter().any(|k| k == kind),
            "expected a stress model of kind {kind}"
        );
    }
}
