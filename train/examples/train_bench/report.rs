//! `--json FILE`: the results as one JSON object, anchors included.

use crate::model::ModelRow;
use crate::mqar::MqarRow;
use crate::op::OpRow;
use crate::Args;
use loglinear_host_gpu::Gpu;

pub fn json_report(
    gpu: &Gpu,
    a: &Args,
    ops: &[OpRow],
    models: &[ModelRow],
    mqar: &[MqarRow],
) -> serde_json::Value {
    use serde_json::json;
    let ops: Vec<_> = ops
        .iter()
        .map(|r| {
            let mut o = json!({
                "form": r.form.name(), "t": r.t, "batch": r.batch,
                "tokens": a.tokens, "heads": a.heads, "dk": a.dk, "dv": a.dv, "levels": a.levels,
            });
            match &r.result {
                Ok(x) => {
                    o["scan"] = json!(x.strategy);
                    o["sub_calls"] = json!(x.sub_calls);
                    o["fwd_ms"] = json!(x.fwd);
                    o["bwd_ms"] = json!(x.bwd);
                    o["fwd_bwd_ms"] = json!(x.both);
                    if let Some((f, b)) = x.gpu {
                        o["gpu_fwd_ms"] = json!(f);
                        o["gpu_bwd_ms"] = json!(b);
                    }
                    o["fwd_gflops"] = json!(x.fwd_flops / (x.fwd_ms() / 1e3) / 1e9);
                    o["fwd_gbytes_per_s"] = json!(x.fwd_bytes / (x.fwd_ms() / 1e3) / 1e9);
                    for (key, best) in [
                        ("anchor_fwd", &r.best.fwd),
                        ("anchor_fwd_bwd", &r.best.fwd_bwd),
                    ] {
                        if let Some(b) = best {
                            o[key] = json!({ "ms": b.ms, "who": b.who });
                        }
                    }
                }
                Err(e) => o["error"] = json!(e),
            }
            o
        })
        .collect();
    let models: Vec<_> = models
        .iter()
        .map(|r| {
            let mut o = json!({ "model": r.name, "seq": a.seq, "batch": a.batch });
            if let Some(c) = &r.config {
                o["layers"] = json!(c.num_layers);
                o["hidden"] = json!(c.hidden_size);
                o["heads"] = json!(c.num_heads);
                o["dk"] = json!(c.head_k_dim);
                o["dv"] = json!(c.head_v_dim);
                o["arch"] = json!(c.arch.name());
            }
            match &r.result {
                Ok(x) => {
                    o["params"] = json!(x.params);
                    o["step_ms"] = json!(x.step);
                    o["tokens_per_s"] = json!((a.seq * a.batch) as f64 / (x.step / 1e3));
                    o["loss_first"] = json!(x.loss.0);
                    o["loss_last"] = json!(x.loss.1);
                    if let Some(g) = x.gpu {
                        o["gpu_fwd_ms"] = json!(g[0]);
                        o["gpu_bwd_ms"] = json!(g[1]);
                        o["gpu_opt_ms"] = json!(g[2]);
                    }
                    o["dispatches"] = json!(x.dispatches);
                    if !x.stages.is_empty() {
                        o["gpu_stages_ms"] = x
                            .stages
                            .iter()
                            .map(|s| {
                                json!({ "stage": s.label, "ms": s.gpu_ms, "dispatches": s.dispatches })
                            })
                            .collect();
                    }
                }
                Err(e) => o["error"] = json!(e),
            }
            o
        })
        .collect();
    let mqar: Vec<_> = mqar
        .iter()
        .map(|r| {
            let mut o = json!({ "model": r.arch, "dim": r.dim, "seq": a.seq, "batch": a.batch });
            match &r.result {
                Ok(x) => {
                    o["params"] = json!(x.params);
                    o["step_ms"] = json!(x.pipelined_ms);
                    o["step_alone_ms"] = json!(x.alone_ms);
                    o["record_ms"] = json!(x.record_ms);
                    if let Some(g) = x.gpu {
                        o["gpu_fwd_ms"] = json!(g[0]);
                        o["gpu_bwd_ms"] = json!(g[1]);
                        o["gpu_opt_ms"] = json!(g[2]);
                    }
                    o["dispatches"] = json!(x.dispatches);
                }
                Err(e) => o["error"] = json!(e),
            }
            o
        })
        .collect();
    json!({
        "adapter": gpu.describe_for_training(),
        "warmup": a.warmup,
        "iters": a.iters,
        "operator": ops,
        "models": models,
        "mqar": mqar,
    })
}
