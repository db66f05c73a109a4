//! Chunkwise CPU prefill against token-by-token stepping on the five golden stress models
//! (Log-Linear Mamba-2 in both layouts, Log-Linear GDN, plain Mamba-2, plain GDN): final
//! Fenwick states, conv states and last logits, then greedy decoding continued from the
//! hand-off, for prompt lengths that cover every case of the chunk algorithm.

mod cpu_prefill_common;

use cpu_prefill_common::*;
use loglinear_converter::Checkpoint;
use loglinear_tests::*;

/// Every stress model's checkpoint directory, with its manifest kind.
fn stress_models() -> Vec<(String, String, std::path::PathBuf)> {
    let m = manifest();
    let out: Vec<_> = cases(&m, "model")
        .into_iter()
        .filter(|(_, e)| e["style"] == "stress")
        .map(|(name, e)| {
            let dir = golden_dir().join(e["dir"].as_str().unwrap());
            (name, e["kind"].as_str().unwrap().to_owned(), dir)
        })
        .collect();
    assert_eq!(out.len(), 5, "expected the 5 stress models");
    out
}

/// T = 1, below the conv width, below one chunk, one chunk exactly, a partial second chunk,
/// 64·2^k, and a long prompt with a partial last chunk (levels up to 11).
#[test]
fn prompt_lengths_match_stepping() {
    let mut worst = Errors::default();
    for (name, _, dir) in stress_models() {
        let ckpt = Checkpoint::load(&dir).unwrap();
        let model = ckpt.model().unwrap();
        let c = *model.config();
        let ids = lcg_ids(1500, c.vocab_size, 12345);
        let levels = c.default_state_levels();
        for t in [1, 3, 50, 64, 100, 128, 256, 1500] {
            let e = prefill_vs_stepping(&name, &model, &ids[..t], levels, 8, TOL);
            worst = worst.max(e);
        }
    }
    eprintln!("worst over the golden models: {worst:?}");
}

/// Fewer levels than the prompt needs: the top level saturates (levels 4: exact up to 8
/// tokens, so inside the first chunk; levels 9: the saturated chunk level is 1).
#[test]
fn saturating_levels_match_stepping() {
    for (name, kind, dir) in stress_models() {
        if !kind.starts_with("ll_") {
            continue;
        }
        let ckpt = Checkpoint::load(&dir).unwrap();
        let model = ckpt.model().unwrap();
        let ids = lcg_ids(700, model.config().vocab_size, 777);
        prefill_vs_stepping(&name, &model, &ids[..300], 4, 8, TOL);
        prefill_vs_stepping(&name, &model, &ids[..700], 9, 8, TOL);
        prefill_vs_stepping(&name, &model, &ids[..65], 2, 4, TOL);
    }
}

/// The golden decode trace: prefill `decode.prefill_len` tokens of the longest sequence chunkwise, then
/// the golden decode steps on the handed-over session.
#[test]
fn golden_decode_trace_after_prefill() {
    for (name, _, dir) in stress_models() {
        let ckpt = Checkpoint::load(&dir).unwrap();
        let model = ckpt.model().unwrap();
        let levels = model.config().default_state_levels();
        let g = read_arrays(&dir.join("golden.safetensors"));
        let ids = decode_ids(&g, &name);
        let split = get(&g, "decode.prefill_len", &name).data[0] as usize;
        let mut a = arena(&model, levels);
        let mut s = session(&model, &mut a, levels);
        let p =
            loglinear_cpu_prefill::prefill_into(&model, &ids[..split], &mut s, &Default::default())
                .unwrap();
        check_rel_max(
            &format!("{name} prefill logits vs golden"),
            &p.last_logits,
            &get(&g, "decode.prefill_last_logits", &name).data,
            TOL,
        );
        let steps = get(&g, "decode.step_ids", &name).ids();
        let mut logits = Vec::new();
        for &id in &steps {
            logits.extend_from_slice(s.step(id).unwrap());
        }
        check_rel_max(
            &format!("{name} decode logits vs golden"),
            &logits,
            &get(&g, "decode.step_logits", &name).data,
            TOL,
        );
    }
}
