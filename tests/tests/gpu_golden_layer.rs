//! GPU layer ops against `golden/layer` (the 4 stress layers; every layer with the full set): the ops before and after the
//! chunk scan on their own (the scan output replaced by the golden `o`), then whole mixers
//! (`y_mixer`) and pre-norm blocks (`y_block`) at every length the case stores.

use loglinear_host_gpu::{Gpu, GpuModel, PrefillOptions};
use loglinear_runtime::Model;
use loglinear_tests::golden_layer::layer_model;
use loglinear_tests::*;
use serde_json::Value;
use std::collections::HashMap;

const KINDS: [&str; 4] = ["ll_mamba2", "mamba2", "ll_gdn", "gdn"];

fn layer_case(kind: &str) -> (Value, HashMap<String, Array>) {
    let m = manifest();
    let (_, entry) = cases(&m, "layer")
        .into_iter()
        .find(|(_, e)| e["kind"] == kind && e["style"] == "stress")
        .unwrap_or_else(|| panic!("no stress layer of kind {kind}"));
    let arrays = read_arrays(&golden_dir().join(entry["file"].as_str().unwrap()));
    (entry, arrays)
}

/// Every layer case of the manifest: the 4 stress layers of the project copy, plus the `init`
/// ones when `LOGLINEAR_GOLDEN_DIR` points at the full set.
fn all_layer_cases() -> Vec<(String, Value, HashMap<String, Array>)> {
    let m = manifest();
    cases(&m, "layer")
        .into_iter()
        .map(|(name, entry)| {
            let arrays = read_arrays(&golden_dir().join(entry["file"].as_str().unwrap()));
            (name, entry, arrays)
        })
        .collect()
}

/// Pre-scan ops (projections, conv, gates, λ, q/k/v for the scan) and post-scan ops (skip,
/// gate, norms, out_proj) at the length with stored intermediates, with the golden `o`
/// standing in for the scan.
#[test]
fn ops_around_the_scan_match_golden() {
    let gpu = Gpu::new_fp32().expect("GPU adapter");
    for kind in KINDS {
        let (entry, arrays) = layer_case(kind);
        let t = layer_inter_length(&arrays, kind);
        let x = get(&arrays, &format!("T{t}.x"), kind);
        let (config, store) = layer_model(kind, &entry, &arrays, x);
        let model = Model::new(config, &store).unwrap();
        let gm = GpuModel::new(&gpu, &model).unwrap();
        let o = get(&arrays, &format!("T{t}.inter.o"), kind).f32();
        let tr = gm.mixer_trace(0, &x.f32(), Some(&o)).unwrap();
        let mut compared = 0;
        for (name, ours) in &tr.inter {
            if *name == "o" {
                continue;
            }
            let r = get(&arrays, &format!("T{t}.inter.{name}"), kind);
            check_rel_max(&format!("{kind} T{t} {name}"), ours, &r.data, tol::LAYER);
            compared += 1;
        }
        assert!(
            compared >= 8,
            "{kind}: only {compared} intermediates compared"
        );
        let y = get(&arrays, &format!("T{t}.y_mixer"), kind);
        check_rel_max(
            &format!("{kind} T{t} y_mixer (golden o)"),
            &tr.y_mixer,
            &y.data,
            tol::LAYER,
        );
    }
}

/// Whole mixers and blocks, the chunk scan included, at every T, for every layer case of the
/// manifest.
#[test]
fn layers_match_golden() {
    let gpu = Gpu::new_fp32().expect("GPU adapter");
    let all = all_layer_cases();
    for kind in KINDS {
        assert!(
            all.iter()
                .any(|(_, e, _)| e["kind"] == kind && e["style"] == "stress"),
            "expected a stress layer of kind {kind}"
        );
    }
    for (name, entry, arrays) in &all {
        let (entry, arrays) = (entry.clone(), arrays);
        for t in layer_lengths(arrays, name) {
            let what = format!("{name} T{t}");
            let x = get(arrays, &format!("T{t}.x"), &what);
            let (config, store) = layer_model(name, &entry, arrays, x);
            let model = Model::new(config, &store).unwrap();
            let gm = GpuModel::new(&gpu, &model).unwrap();
            let tr = gm.mixer_trace(0, &x.f32(), None).unwrap();
            let y = get(arrays, &format!("T{t}.y_mixer"), &what);
            check_rel_max(&format!("{what} y_mixer"), &tr.y_mixer, &y.data, tol::LAYER);
            if let Some(o) = arrays.get(&format!("T{t}.inter.o")) {
                check_rel_max(&format!("{what} o"), &tr.inter["o"], &o.data, tol::LAYER);
            }
            let ids: Vec<u32> = (0..t as u32).collect();
            let opts = PrefillOptions {
                levels: config.default_state_levels(),
                all_logits: false,
                hidden: true,
                profile: false,
            };
            let p = gm.prefill_with(&ids, &opts).unwrap();
            let yb = get(arrays, &format!("T{t}.y_block"), &what);
            check_rel_max(
                &format!("{what} y_block"),
                &p.hidden.as_ref().unwrap()[0],
                &yb.data,
                tol::LAYER,
            );
        }
    }
}
