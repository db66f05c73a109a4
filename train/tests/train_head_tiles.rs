//! The head in row tiles inside a training graph: an MQAR model (Zoology's data, vocabulary
//! 8192, length 256, dim 64, tied head) at the smallest batch whose full rows × vocab logits
//! exceed the adapter's storage-binding limit (lavapipe's 128 MiB: batch 17; wgpu's
//! 2 GiB − 4: batch 256, the MQAR protocol's), with the head on every row. One step's losses
//! and gradients against the head on the scored rows only (`head_rows`, whose logits fit one
//! binding): losses to 1e-6 relative, every gradient to 1e-5.

use loglinear_host_gpu::train::IGNORED_TARGET;
use loglinear_host_gpu::Gpu;
use loglinear_runtime::ModelConfig;
use loglinear_train::model::{new_train_graph_with, GraphOptions, InitScheme};
use loglinear_train::mqar::data::{generate, MqarConfig};
use loglinear_train::mqar::{model_config, MqarArch};

mod common;
use common::{gpu, read, rel_l2};

const SEQ: usize = 256;
const VOCAB: usize = 8192;
const DIM: usize = 64;
/// Key–value pairs per example (a few scored positions per sequence).
const KV: usize = 8;

/// One step (zero, forward, backward at scale 1 / scored): losses and every gradient.
fn step(
    gpu: &Gpu,
    c: &ModelConfig,
    batch: usize,
    head_rows: Option<usize>,
    inputs: &[u32],
    targets: &[u32],
) -> (Vec<f32>, Vec<Vec<f32>>) {
    let options = GraphOptions {
        tie_embeddings: true,
        init: InitScheme::Zoology,
        head_rows,
    };
    let m = new_train_graph_with(gpu, c, batch, SEQ, options).unwrap();
    m.init_params(gpu, 5).unwrap();
    let scored = targets.iter().filter(|&&t| t != IGNORED_TARGET).count();
    let ib = gpu.storage_from("inputs", inputs).unwrap();
    let tb = gpu.storage_from("targets", targets).unwrap();
    let mut enc = gpu.encoder("step");
    m.encode_zero_grads(&mut enc);
    m.encode_forward_targets(&mut enc, &ib, &tb).unwrap();
    m.encode_backward(&mut enc, 1.0 / scored as f32);
    gpu.submit_and_wait(enc).unwrap();
    (
        read(gpu, m.losses(), batch * SEQ),
        m.read_grads(gpu).unwrap(),
    )
}

#[test]
#[ignore = "minutes on lavapipe: run with --ignored (on a GPU: batch 256, 2 GiB of logits)"]
fn mqar_logits_over_the_binding_limit_train() {
    let gpu = gpu();
    let limit = gpu
        .limits
        .max_storage_buffer_binding_size
        .min(gpu.limits.max_buffer_size);
    let window = (4 * SEQ * VOCAB) as u64;
    let batch = (limit / window) as usize + 1;
    assert!(batch as u64 * window > limit);
    let c = model_config(MqarArch::LlGdn, DIM, VOCAB, 2).unwrap();
    let data = generate(&MqarConfig::zoology(KV), 7, batch).unwrap();
    let targets: Vec<u32> = data
        .targets
        .iter()
        .zip(&data.mask)
        .map(|(&t, &m)| if m { t } else { IGNORED_TARGET })
        .collect();
    let scored = targets.iter().filter(|&&t| t != IGNORED_TARGET).count();
    eprintln!(
        "batch {batch}: {} bytes of logits (limit {limit}), {scored} scored rows",
        batch as u64 * window
    );
    let (losses, grads) = step(&gpu, &c, batch, None, &data.inputs, &targets);
    let (want_losses, want_grads) = step(&gpu, &c, batch, Some(scored), &data.inputs, &targets);
    for (i, (&a, &b)) in losses.iter().zip(&want_losses).enumerate() {
        assert!(a.is_finite(), "loss {i} is {a}");
        let err = (a as f64 - b as f64).abs();
        assert!(err <= 1e-6 * (b as f64).abs(), "loss {i}: {a} vs {b}");
    }
    for (g, (a, b)) in grads.iter().zip(&want_grads).enumerate() {
        assert!(b.iter().any(|&x| x != 0.0), "gradient {g} is zero");
        let e = rel_l2(a, b);
        assert!(e <= 1e-5, "gradient {g}: rel L2 {e:.3e}");
    }
    let mean = losses.iter().map(|&l| l as f64).sum::<f64>() / scored as f64;
    eprintln!("mean loss {mean:.4} over {scored} scored positions");
}
