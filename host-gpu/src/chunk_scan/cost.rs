//! What each dispatch of a chunk scan costs, for benchmark reports: its floating-point
//! operations (multiply and add counted as 2) and its device-memory traffic in bytes (every
//! buffer the kernel reads or writes counted once, caches ignored). `ChunkScan::new` attaches
//! one of these to every dispatch it records, so the per-kernel figures and the totals of
//! `ChunkScan::flops` / `ChunkScan::bytes` come from the same counts.

use super::{ChunkScan, Form, ScanLimits, ScanShape, CHUNK};

/// The work and memory traffic of one dispatch.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DispatchCost {
    /// Floating-point operations, masked-out tile entries excluded.
    pub flops: f64,
    /// Bytes read and written in device memory.
    pub bytes: f64,
}

impl DispatchCost {
    /// The part of this cost that `n` of `of` heads take (one head group's dispatch).
    pub(super) fn share(self, n: usize, of: usize) -> Self {
        let f = n as f64 / of.max(1) as f64;
        Self {
            flops: self.flops * f,
            bytes: self.bytes * f,
        }
    }
}

/// A dispatch's cost from its operation count and the f32 values it moves.
fn cost(flops: f64, floats: f64) -> DispatchCost {
    DispatchCost {
        flops,
        bytes: 4.0 * floats,
    }
}

/// The shape's sizes as floats: T × heads, one state (dk × dv) per head, q and k values.
struct Sizes {
    t: f64,
    h: f64,
    dk: f64,
    dv: f64,
    th: f64,
    state: f64,
    qk: f64,
    lam: f64,
}

fn sizes(s: &ScanShape) -> Sizes {
    let (t, h, dk, dv) = (s.t as f64, s.heads as f64, s.dk as f64, s.dv as f64);
    Sizes {
        t,
        h,
        dk,
        dv,
        th: t * h,
        state: h * dk * dv,
        qk: t * s.qk_heads as f64 * dk,
        lam: t * h * s.lambda_cols as f64,
    }
}

/// Values of the walk's packed reader rows (`olvl`), written by the scan, read by the combine.
fn reader_row_values(s: &ScanShape) -> f64 {
    (s.level_output_slots() * CHUNK) as f64 * s.heads as f64 * s.dv as f64
}

/// `chunk_gamma`: the running sum of g within each chunk (g in, γ out).
pub(super) fn gamma(s: &ScanShape) -> DispatchCost {
    let z = sizes(s);
    cost(z.th, 2.0 * z.th)
}

/// `chunk_intra_m2` / `chunk_intra_gdn`: the masked attention inside each chunk (q, k, v, λ, γ
/// in, o out); the GDN kernel also builds (I + P)⁻¹ and writes q̃, K̃, W̃ and U for the scan.
pub(super) fn intra(s: &ScanShape) -> DispatchCost {
    let z = sizes(s);
    let c = CHUNK as f64;
    // Lower-triangular C × C scores (≈ C/2 pairs per row) times dk, then times dv.
    let tri = (c + 1.0) / 2.0;
    let mut flops = z.th * tri * 2.0 * (z.dk + z.dv);
    let mut floats = 2.0 * z.qk + z.th * z.dv + z.lam + z.th + z.th * z.dv;
    if s.form == Form::Gdn {
        // K Kᵀ, the inverse (~C³/6), M = S1 A_w (~C³/6), q̃/W̃ (2 dk per pair), U (dv per pair).
        flops += z.th * tri * 2.0 * z.dk;
        flops += (z.t / c) * z.h * 2.0 * (c * c * c / 3.0);
        flops += z.th * tri * 2.0 * (2.0 * z.dk + z.dv);
        // β in; q̃, K̃, W̃ and U out.
        floats += z.th + 3.0 * z.th * z.dk + z.th * z.dv;
    }
    cost(flops, floats)
}

/// `chunk_scan_m2` / `chunk_scan_gdn`: the level walk over the chunks, every scanned level.
/// In units of 2·dk·dv per token and level, a regular level works on one state per chunk:
/// Mamba-2 readers read (1), sources add (1); GDN readers read, form W̃ h and K̃ᵀ X (3), sources
/// form W̃ h and K̃ᵀ (U − X) (2). The saturated level does both every chunk. Per level it reads
/// the chunk inputs, γ and λ; it writes the reader rows and one hand-off state per level.
pub(super) fn scan_walk(s: &ScanShape) -> DispatchCost {
    let z = sizes(s);
    let (regular, saturated) = match s.form {
        Form::Mamba2 => (1.0, 2.0),
        Form::Gdn => (2.5, 5.0),
    };
    let scans = s.scans();
    let sat = usize::from(scans > 0 && scans == s.m_top() + 1);
    let units = (scans - sat) as f64 * regular + sat as f64 * saturated;
    let inputs = match s.form {
        Form::Mamba2 => 2.0 * z.qk + z.th * z.dv,
        Form::Gdn => 3.0 * z.th * z.dk + z.th * z.dv,
    };
    let scans = scans as f64;
    cost(
        units * 2.0 * z.th * z.dk * z.dv,
        scans * (inputs + z.th + z.lam + z.state) + reader_row_values(s),
    )
}

/// `chunk_combine`: o += the reader rows of every level (o in and out, reader rows in).
pub(super) fn combine(s: &ScanShape) -> DispatchCost {
    let z = sizes(s);
    let rows = reader_row_values(s);
    cost(rows, 2.0 * z.th * z.dv + rows)
}

/// `chunk_state`: the decoder state after the last token (hand-off states in, one state per
/// level out). Its steps over the last chunk's ≤ 64 tokens per level are not counted.
pub(super) fn state(s: &ScanShape) -> DispatchCost {
    let z = sizes(s);
    cost(0.0, (s.scans() + s.levels) as f64 * z.state)
}

/// States of the precomputed strategy's contribution buffer: one per chunk but the last.
fn contributions(s: &ScanShape) -> f64 {
    s.chunks().saturating_sub(1) as f64 * sizes(s).state
}

/// `chunk_pre_contrib_m2`: K̃ᵀV of every chunk but the last (k, v, γ in, one state out each).
pub(super) fn pre_contrib(s: &ScanShape) -> DispatchCost {
    let z = sizes(s);
    let flops = 2.0 * z.t * z.h * z.dk * z.dv;
    cost(flops, z.qk + z.th * z.dv + z.th + contributions(s))
}

/// `chunk_pre_sweep` at chunk level `m`: per block of 2^m chunks, one decayed state added to
/// another (two states in, one out).
pub(super) fn pre_sweep(s: &ScanShape, m: usize) -> DispatchCost {
    let blocks = ((s.chunks() - 1) >> m) as f64;
    let state = sizes(s).state;
    cost(2.0 * blocks * state, 3.0 * blocks * state)
}

/// `chunk_pre_prefix`: the running sum over the saturated level's blocks (each block's state
/// read, decayed and added, written back).
pub(super) fn pre_prefix(s: &ScanShape) -> DispatchCost {
    let blocks = ((s.chunks() - 1) >> s.m_top()) as f64;
    let state = sizes(s).state;
    cost(2.0 * blocks * state, 2.0 * blocks * state)
}

/// `chunk_pre_read_m2`: per reader chunk and level, a state and the chunk's q rows, λ and γ in;
/// a q row times the state per reader row; o in and out; the hand-off states out.
pub(super) fn pre_read(s: &ScanShape) -> DispatchCost {
    let z = sizes(s);
    let c = CHUNK as f64;
    let reader_chunks = s.level_output_slots() as f64;
    let flops = reader_chunks * c * z.h * 2.0 * z.dk * z.dv;
    let floats = reader_chunks * z.h * (z.dk * z.dv + c * (z.dk + 2.0))
        + 2.0 * z.th * z.dv
        + s.scans() as f64 * z.state;
    cost(flops, floats)
}

impl ChunkScan {
    /// Floating-point operations one `encode` performs: the sum over its dispatches.
    pub fn flops(&self) -> f64 {
        self.dispatches.iter().map(|d| d.cost.flops).sum()
    }

    /// Estimated device-memory traffic of one `encode` in bytes: the sum over its dispatches.
    pub fn bytes(&self) -> f64 {
        self.dispatches.iter().map(|d| d.cost.bytes).sum()
    }

    /// The label and cost of each dispatch `encode` records, in order (`step_labels` order).
    pub fn dispatch_costs(&self) -> Vec<(&'static str, DispatchCost)> {
        self.dispatches
            .iter()
            .map(|d| (d.step.label, d.cost))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One head, one chunk plus one token (2 chunks, so one scanned level), dk = 2, dv = 3.
    fn tiny(form: Form) -> ScanShape {
        ScanShape {
            form,
            t: CHUNK + 1,
            heads: 1,
            qk_heads: 1,
            dk: 2,
            dv: 3,
            lambda_cols: 4,
            levels: 2,
        }
    }

    #[test]
    fn the_walk_of_the_tiny_shape_costs_what_its_buffers_hold() {
        let s = tiny(Form::Gdn);
        let t = (CHUNK + 1) as f64;
        assert_eq!(s.scans(), 1);
        // γ: g in, γ out, one add per token.
        assert_eq!(gamma(&s), cost(t, 2.0 * t));
        // q, k (2 each), v (3), λ (4), γ (1), o (3), β (1); q̃, K̃, W̃ (2 each), U (3).
        assert_eq!(
            intra(&s).bytes,
            4.0 * t * (2.0 + 2.0 + 3.0 + 4.0 + 1.0 + 3.0 + 1.0 + 9.0)
        );
        // One scanned level: q̃, K̃, W̃, U, γ, λ per token, one 2 × 3 hand-off state, and the
        // reader rows of the one reader chunk (64 rows of dv = 3).
        let rows = s.level_output_slots() as f64 * CHUNK as f64 * 3.0;
        assert_eq!(s.level_output_slots(), 1);
        assert_eq!(
            scan_walk(&s).bytes,
            4.0 * (t * (6.0 + 3.0 + 1.0 + 4.0) + 6.0 + rows)
        );
        assert_eq!(combine(&s), cost(rows, 2.0 * t * 3.0 + rows));
        // Hand-off in (one level), two levels out.
        assert_eq!(state(&s), cost(0.0, 3.0 * 6.0));
    }

    #[test]
    fn the_saturated_level_counts_both_gdn_states() {
        // One scanned level, and it is the saturated top: 5 units of 2·dk·dv per token.
        let s = tiny(Form::Gdn);
        assert_eq!(s.scans(), s.m_top() + 1);
        let t = (CHUNK + 1) as f64;
        assert_eq!(scan_walk(&s).flops, 5.0 * 2.0 * t * 6.0);
        assert_eq!(scan_walk(&tiny(Form::Mamba2)).flops, 2.0 * 2.0 * t * 6.0);
    }

    #[test]
    fn the_precomputed_sweep_touches_three_states_per_block() {
        // 9 chunks: 8 contributions; level 1 has 4 blocks, level 3 one.
        let s = ScanShape {
            t: 9 * CHUNK,
            levels: 6,
            ..tiny(Form::Mamba2)
        };
        assert_eq!(pre_sweep(&s, 1), cost(2.0 * 4.0 * 6.0, 3.0 * 4.0 * 6.0));
        assert_eq!(pre_sweep(&s, 3), cost(2.0 * 6.0, 3.0 * 6.0));
        assert_eq!(contributions(&s), 8.0 * 6.0);
    }
}
