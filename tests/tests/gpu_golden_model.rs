//! Whole-model GPU prefill against `golden/model` (the 5 stress models; the `init` ones too when
//! `LOGLINEAR_GOLDEN_DIR` points at the full set): logits at every
//! position and the residual stream after each block, for ids_T100 and ids_T300.

use loglinear_converter::Checkpoint;
use loglinear_host_gpu::{Gpu, GpuModel, PrefillOptions};
use loglinear_tests::*;

#[test]
fn prefill_logits_and_hidden_match_golden() {
    let gpu = Gpu::new_fp32().expect("GPU adapter");
    eprintln!("GPU: {}", gpu.describe());
    let m = manifest();
    let mut stress = 0;
    for (name, entry) in cases(&m, "model") {
        let dir = golden_dir().join(entry["dir"].as_str().unwrap());
        let ckpt = Checkpoint::load(&dir).unwrap_or_else(|e| panic!("{name}: {e}"));
        let model = ckpt.model().unwrap();
        let g = read_arrays(&dir.join("golden.safetensors"));
        let gm = GpuModel::new(&gpu, &model).unwrap();
        for t in [100, 300] {
            let ids = get(&g, &format!("ids_T{t}"), &name).ids();
            let opts = PrefillOptions {
                levels: model.config().default_state_levels(),
                all_logits: true,
                hidden: t == 100,
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
        stress += usize::from(entry["style"] == "stress");
    }
    assert_eq!(stress, 5, "expected the 5 stress models");
}
