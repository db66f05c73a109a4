//! The stage marks of the training graphs (`encode_forward_marked` / `encode_backward_marked`,
//! what `train_bench --stages` times), in all four architectures:
//! 1. the marks come in recording order: embedding, then per layer mixer in / operator /
//!    mixer out + MLP, then the head; the backward the mirror image;
//! 2. a pass put between the stages at every mark (as the timestamps are) changes nothing:
//!    losses and every gradient equal an unmarked step's exactly.

use loglinear_host_gpu::wgpu;
use loglinear_host_gpu::Gpu;
use loglinear_runtime::Arch;
use loglinear_train::model::{new_train_graph, Stage, TrainGraph};

mod common;
use common::{gpu, load_large_params, read, tiny_config};

const BATCH: usize = 2;
const T: usize = 12;

/// Losses and gradients of one step; `marked`: an empty compute pass at every mark, and the
/// marks in order.
fn step(gpu: &Gpu, m: &dyn TrainGraph, marked: bool) -> (Vec<f32>, Vec<Vec<f32>>, Vec<Stage>) {
    let vocab = m.config().vocab_size;
    let tokens: Vec<u32> = (0..BATCH * (T + 1))
        .map(|i| ((i * 7 + i / 5) % vocab) as u32)
        .collect();
    let tokens = gpu.storage_from("tokens", &tokens).unwrap();
    let mut seen = Vec::new();
    let mut mark = |enc: &mut wgpu::CommandEncoder, s: Stage| {
        if marked {
            let _pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
        }
        seen.push(s);
    };
    let mut enc = gpu.encoder("stages");
    m.encode_zero_grads(&mut enc);
    m.encode_forward_marked(&mut enc, &tokens, &mut mark);
    m.encode_backward_marked(&mut enc, 0.5, &mut mark);
    gpu.submit_and_wait(enc).unwrap();
    let losses = read(gpu, m.losses(), BATCH * T);
    (losses, m.read_grads(gpu).unwrap(), seen)
}

fn expected(layers: usize) -> Vec<Stage> {
    let mut v = vec![Stage::Embed];
    for _ in 0..layers {
        v.extend([Stage::MixerIn, Stage::Operator, Stage::MixerOut]);
    }
    v.extend([Stage::Head, Stage::HeadBwd]);
    for _ in 0..layers {
        v.extend([Stage::MixerOutBwd, Stage::OperatorBwd, Stage::MixerInBwd]);
    }
    v.push(Stage::EmbedBwd);
    v
}

#[test]
fn marks_in_order_and_change_nothing() {
    let gpu = gpu();
    for arch in [
        Arch::LogLinearGatedDeltaNet,
        Arch::GatedDeltaNet,
        Arch::LogLinearMamba2,
        Arch::Mamba2,
    ] {
        let c = tiny_config(arch);
        let m = new_train_graph(&gpu, &c, BATCH, T).unwrap();
        load_large_params(&gpu, m.as_ref());
        let (l0, g0, _) = step(&gpu, m.as_ref(), false);
        let (l1, g1, seen) = step(&gpu, m.as_ref(), true);
        assert_eq!(seen, expected(c.num_layers), "{arch:?}");
        assert!(l0.iter().all(|x| x.is_finite()), "{arch:?}");
        assert_eq!(l0, l1, "{arch:?}: losses");
        assert_eq!(g0, g1, "{arch:?}: gradients");
        let forward = seen.iter().filter(|s| !s.is_backward()).count();
        assert_eq!(forward, 2 + 3 * c.num_layers, "{arch:?}");
    }
}

/// The same for the forward over explicit inputs and targets (what `train_bench --mqar
/// --stages` times): marks in order, and losses and gradients as an unmarked step's.
#[test]
fn target_marks_in_order_and_change_nothing() {
    let gpu = gpu();
    for arch in [Arch::LogLinearGatedDeltaNet, Arch::LogLinearMamba2] {
        let c = tiny_config(arch);
        let m = new_train_graph(&gpu, &c, BATCH, T).unwrap();
        load_large_params(&gpu, m.as_ref());
        let vocab = c.vocab_size;
        let inputs: Vec<u32> = (0..BATCH * T)
            .map(|i| ((i * 5 + 1) % vocab) as u32)
            .collect();
        // Every third target ignored.
        let targets: Vec<u32> = (0..BATCH * T)
            .map(|i| {
                if i % 3 == 0 {
                    u32::MAX
                } else {
                    ((i * 3) % vocab) as u32
                }
            })
            .collect();
        let inputs = gpu.storage_from("inputs", &inputs).unwrap();
        let targets = gpu.storage_from("targets", &targets).unwrap();
        let run = |marked: bool| {
            let mut seen = Vec::new();
            let mut mark = |enc: &mut wgpu::CommandEncoder, s: Stage| {
                if marked {
                    let _pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
                }
                seen.push(s);
            };
            let mut enc = gpu.encoder("target stages");
            m.encode_zero_grads(&mut enc);
            m.encode_forward_targets_marked(&mut enc, &inputs, &targets, &mut mark)
                .unwrap();
            m.encode_backward_marked(&mut enc, 0.5, &mut mark);
            gpu.submit_and_wait(enc).unwrap();
            let losses = read(&gpu, m.losses(), BATCH * T);
            (losses, m.read_grads(&gpu).unwrap(), seen)
        };
        let (l0, g0, _) = run(false);
        let (l1, g1, seen) = run(true);
        assert_eq!(seen, expected(c.num_layers), "{arch:?}");
        assert!(l0.iter().any(|&x| x > 0.0), "{arch:?}: no loss");
        assert_eq!(l0, l1, "{arch:?}: losses");
        assert_eq!(g0, g1, "{arch:?}: gradients");
    }
}
