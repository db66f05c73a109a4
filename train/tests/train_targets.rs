//! Explicit targets with an ignore marker and per-token correctness, in both training graphs
//! (through `train::graph::TrainGraph`):
//! 1. the masked loss kernel against a CPU port (lse, losses, first-argmax correctness with
//!    ties, gradients; an ignored row gives exactly zeros), and run in tiles of rows equal to
//!    one dispatch over all of them;
//! 2. per model: explicit targets equal to the windows' next tokens reproduce `encode_forward`
//!    bit for bit; all targets ignored give zero losses and exactly zero gradients; the
//!    gradients of a mask and of its complement add up to the unmasked gradients;
//! 3. the correct flags of every golden model against the argmax of its golden logits.

use loglinear_host_gpu::train::kernels::{LossShape, MaskedLossIo, TrainKernels};
use loglinear_host_gpu::train::IGNORED_TARGET;
use loglinear_host_gpu::wgpu;
use loglinear_host_gpu::Gpu;
use loglinear_runtime::Arch;
use loglinear_train::model::{new_train_graph, TrainGraph};

mod common;
use common::model::golden_models;
use common::{gpu, load_large_params, read, rel_l2, symmetric, tiny_config, SplitMix64};

/// First index of the largest value (the runtime's greedy choice).
fn argmax(row: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in row.iter().enumerate() {
        if x > row[best] {
            best = i;
        }
    }
    best
}

#[test]
fn masked_loss_kernel_matches_cpu() {
    let gpu = gpu();
    let k = TrainKernels::new(&gpu).unwrap();
    let (t, batch, vocab) = (5, 3, 150);
    let rows = t * batch;
    let mut r = SplitMix64::new(5);
    let mut logits: Vec<f32> = (0..rows * vocab)
        .map(|_| (3.0 * symmetric(&mut r)) as f32)
        .collect();
    // Ties: row 2's maximum at 7 and 70 (the first wins, and is the target), row 4's at 3
    // and 130 (the target is the later one: not correct).
    for (row, a, b) in [(2usize, 7usize, 70usize), (4, 3, 130)] {
        logits[row * vocab + a] = 9.0;
        logits[row * vocab + b] = 9.0;
    }
    // Targets [B][T]; rows are (t, b): row = t·B + b.
    let mut targets = vec![0u32; rows];
    for row in 0..rows {
        let (tt, b) = (row / batch, row % batch);
        let x = &logits[row * vocab..(row + 1) * vocab];
        targets[b * t + tt] = match row {
            2 => 7,
            4 => 130,
            6 => IGNORED_TARGET,
            r if r % 3 == 0 => argmax(x) as u32,
            r => ((r * 37) % vocab) as u32,
        };
    }
    let scale = 0.25f32;
    let tb = gpu.storage_from("targets", &targets).unwrap();
    let sb = gpu.storage_from("scale", &[scale]).unwrap();
    // The loss on rows first..first + n with a logits buffer of those rows only (what the
    // head's tiles do), forward then backward (in place), over `tiles` in order: losses,
    // correctness and the tiles' dlogits one after another.
    let loss_tiles = |tiles: &[(usize, usize)]| {
        let lse = gpu.storage_zeroed("lse", 4 * rows as u64).unwrap();
        let loss = gpu.storage_zeroed("loss", 4 * rows as u64).unwrap();
        let correct = gpu.storage_zeroed("correct", 4 * rows as u64).unwrap();
        let mut dlogits = Vec::new();
        for &(first, n) in tiles {
            let part = &logits[first * vocab..(first + n) * vocab];
            let lb = gpu.storage_from("logits", part).unwrap();
            let io = MaskedLossIo {
                targets: &tb,
                logits: &lb,
                lse: &lse,
                scale: &sb,
                correct: &correct,
            };
            let shape = LossShape::new(t, batch, vocab).tile(first, n);
            let fwd = k.masked_loss(&gpu, io, &loss, shape).unwrap();
            let bwd = k.masked_loss_backward(&gpu, io, shape).unwrap();
            let mut enc = gpu.encoder("masked loss");
            fwd.encode(&mut enc);
            bwd.encode(&mut enc);
            gpu.submit_and_wait(enc).unwrap();
            dlogits.extend(read(&gpu, &lb, n * vocab));
        }
        (read(&gpu, &loss, rows), read(&gpu, &correct, rows), dlogits)
    };
    let (got_loss, got_correct, got_d) = loss_tiles(&[(0, rows)]);
    // Tiles of 4, 4 and 7 rows give the one dispatch's values bit for bit.
    let tiled = loss_tiles(&[(0, 4), (4, 4), (8, 7)]);
    assert_eq!(tiled.0, got_loss, "tiled losses");
    assert_eq!(tiled.1, got_correct, "tiled correctness");
    assert_eq!(tiled.2, got_d, "tiled dlogits");
    let mut worst = 0.0f64;
    for row in 0..rows {
        let (tt, b) = (row / batch, row % batch);
        let i = b * t + tt;
        let x = &logits[row * vocab..(row + 1) * vocab];
        let m = x.iter().fold(f64::MIN, |a, &v| a.max(v as f64));
        let l = m + x.iter().map(|&v| (v as f64 - m).exp()).sum::<f64>().ln();
        let d = &got_d[row * vocab..(row + 1) * vocab];
        if targets[i] == IGNORED_TARGET {
            assert_eq!(got_loss[i], 0.0, "ignored loss");
            assert_eq!(got_correct[i], 0.0, "ignored correct");
            assert!(d.iter().all(|&g| g == 0.0), "ignored row has gradient");
            continue;
        }
        let tg = targets[i] as usize;
        let want_loss = l - x[tg] as f64;
        worst = worst.max((got_loss[i] as f64 - want_loss).abs());
        let want_correct = if argmax(x) == tg { 1.0 } else { 0.0 };
        assert_eq!(got_correct[i], want_correct, "row {row}: correct flag");
        for v in 0..vocab {
            let p = (x[v] as f64 - l).exp() - if v == tg { 1.0 } else { 0.0 };
            worst = worst.max((d[v] as f64 - scale as f64 * p).abs());
        }
    }
    // Rows 0, 2 (tie, first) are correct; row 4 (tie, later index) is not.
    assert_eq!(got_correct[2 % batch * t + 2 / batch], 1.0);
    assert_eq!(got_correct[4 % batch * t + 4 / batch], 0.0);
    eprintln!("masked loss kernel: worst abs error {worst:.2e}");
    assert!(worst < 2e-6, "worst abs error {worst:.3e}");
}

/// Losses and gradients (scale 1) of one forward + backward.
fn run(
    gpu: &Gpu,
    m: &dyn TrainGraph,
    forward: &dyn Fn(&mut wgpu::CommandEncoder),
) -> (Vec<f32>, Vec<f32>) {
    let mut enc = gpu.encoder("step");
    m.encode_zero_grads(&mut enc);
    forward(&mut enc);
    m.encode_backward(&mut enc, 1.0);
    gpu.submit_and_wait(enc).unwrap();
    let losses = read(gpu, m.losses(), m.batch() * m.seq_len());
    let grads = m.read_grads(gpu).unwrap().concat();
    (losses, grads)
}

fn masked_gradients(arch: Arch) {
    let gpu = gpu();
    let c = tiny_config(arch);
    let (batch, t) = (2, 20);
    let m = new_train_graph(&gpu, &c, batch, t).unwrap();
    load_large_params(&gpu, &*m);
    let windows: Vec<u32> = (0..batch * (t + 1))
        .map(|i| ((i * 13 + i / 3) % c.vocab_size) as u32)
        .collect();
    let mut inputs = Vec::new();
    let mut targets = Vec::new();
    for w in windows.chunks(t + 1) {
        inputs.extend_from_slice(&w[..t]);
        targets.extend_from_slice(&w[1..]);
    }
    let wb = gpu.storage_from("windows", &windows).unwrap();
    let ib = gpu.storage_from("inputs", &inputs).unwrap();
    let with_targets = |tg: &[u32]| {
        let tb = gpu.storage_from("targets", tg).unwrap();
        run(&gpu, &*m, &|enc| {
            m.encode_forward_targets(enc, &ib, &tb).unwrap()
        })
    };
    let (l_win, g_win) = run(&gpu, &*m, &|enc| m.encode_forward(enc, &wb));
    let (l_all, g_all) = with_targets(&targets);
    assert_eq!(
        l_win, l_all,
        "{arch:?}: explicit next-token targets change the losses"
    );
    assert_eq!(
        g_win, g_all,
        "{arch:?}: explicit next-token targets change the gradients"
    );
    assert!(g_all.iter().any(|&g| g != 0.0));

    let (l_none, g_none) = with_targets(&vec![IGNORED_TARGET; batch * t]);
    assert!(l_none.iter().all(|&x| x == 0.0), "{arch:?}: ignored losses");
    assert!(
        g_none.iter().all(|&x| x == 0.0),
        "{arch:?}: all targets ignored, yet a gradient"
    );

    // A mask keeping about a third of the positions, and its complement.
    let keep: Vec<bool> = (0..batch * t).map(|i| (i * 7) % 3 == 0).collect();
    let masked = |want: bool| -> Vec<u32> {
        targets
            .iter()
            .zip(&keep)
            .map(|(&x, &k)| if k == want { x } else { IGNORED_TARGET })
            .collect()
    };
    let (l_a, g_a) = with_targets(&masked(true));
    let (l_b, g_b) = with_targets(&masked(false));
    for i in 0..batch * t {
        let (a, b) = if keep[i] {
            (l_a[i], l_b[i])
        } else {
            (l_b[i], l_a[i])
        };
        assert_eq!(a, l_all[i], "{arch:?}: kept loss {i}");
        assert_eq!(b, 0.0, "{arch:?}: ignored loss {i}");
    }
    let sum: Vec<f32> = g_a.iter().zip(&g_b).map(|(a, b)| a + b).collect();
    let e = rel_l2(&sum, &g_all);
    let ea = rel_l2(&g_a, &g_all);
    eprintln!(
        "{arch:?}: grad(mask) + grad(complement) vs unmasked rel L2 {e:.2e} (mask alone {ea:.2e})"
    );
    assert!(e < 1e-5, "{arch:?}: rel L2 {e:.3e}");
    assert!(ea > 0.1, "{arch:?}: the mask changes nothing");
}

#[test]
fn gdn_ignored_targets_give_no_gradient() {
    masked_gradients(Arch::LogLinearGatedDeltaNet);
}

#[test]
fn mamba2_ignored_targets_give_no_gradient() {
    masked_gradients(Arch::LogLinearMamba2);
}

#[test]
fn correct_flags_match_golden_argmax() {
    let gpu = gpu();
    for gm in golden_models(&["ll_gdn", "gdn", "ll_mamba2", "mamba2"]) {
        let name = &gm.name;
        let v = gm.ckpt.config.vocab_size;
        let n = gm.lengths()[0];
        let ids = gm.ids(n);
        let logits: Vec<f32> = gm.logits(n).iter().map(|&x| x as f32).collect();
        let t = gm.window();
        let m = gm.train_graph(&gpu, 1, t);
        // Targets: the golden argmax at positions ≡ 0 (mod 3), the runner-up at ≡ 1, ignored
        // at ≡ 2. Positions whose top two logits are within 1e-3 are skipped (fp32 order).
        let mut targets = Vec::with_capacity(t);
        let mut clear = Vec::with_capacity(t);
        for i in 0..t {
            let row = &logits[i * v..(i + 1) * v];
            let best = argmax(row);
            let mut second = if best == 0 { 1 } else { 0 };
            for (j, &x) in row.iter().enumerate() {
                if j != best && x > row[second] {
                    second = j;
                }
            }
            clear.push(row[best] - row[second] > 1e-3);
            targets.push(match i % 3 {
                0 => best as u32,
                1 => second as u32,
                _ => IGNORED_TARGET,
            });
        }
        let ib = gpu.storage_from("inputs", &ids[..t]).unwrap();
        let tb = gpu.storage_from("targets", &targets).unwrap();
        let mut enc = gpu.encoder("fwd");
        m.encode_forward_targets(&mut enc, &ib, &tb).unwrap();
        gpu.submit_and_wait(enc).unwrap();
        let correct = read(&gpu, m.correct(), t);
        let losses = read(&gpu, m.losses(), t);
        let mut checked = 0;
        for i in 0..t {
            if targets[i] == IGNORED_TARGET {
                assert_eq!((correct[i], losses[i]), (0.0, 0.0), "{name}: position {i}");
            } else if clear[i] {
                let want = if i % 3 == 0 { 1.0 } else { 0.0 };
                assert_eq!(correct[i], want, "{name}: position {i}");
                checked += 1;
            }
        }
        eprintln!("{name}: {checked} correct flags checked against the golden argmax");
        assert!(checked > t / 2);
    }
}
