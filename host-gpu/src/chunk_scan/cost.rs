//! What one chunk scan costs, for benchmark reports: its floating-point operations and its
//! device-memory traffic.

use super::{ChunkScan, Form, ScanLimits, ScanStrategy, CHUNK};

impl ChunkScan {
    /// Floating-point operations one `encode` performs (multiply and add counted as 2), for
    /// benchmark reports. Counts the work the kernels do, masked-out tile entries excluded.
    pub fn flops(&self) -> f64 {
        let s = self.shape;
        let (t, h, dk, dv) = (s.t as f64, s.heads as f64, s.dk as f64, s.dv as f64);
        let c = CHUNK as f64;
        // Intra: lower-triangular C×C scores (≈ C/2 pairs per row) times dk, then times dv.
        let tri = (c + 1.0) / 2.0;
        let mut f = t * h * tri * 2.0 * (dk + dv);
        if s.form == Form::Gdn {
            // K Kᵀ, the inverse (~C³/6), M = S1 A_w (~C³/6), q̃/W̃ (2 dk per pair), U (dv per pair).
            f += t * h * tri * 2.0 * dk;
            f += (t / c) * h * 2.0 * (c * c * c / 3.0);
            f += t * h * tri * 2.0 * (2.0 * dk + dv);
        }
        // Scans, in units of 2·dk·dv per token and level: a regular level works on one state per
        // chunk: Mamba-2 readers read (1), sources add (1); GDN readers read, form W̃ h and K̃ᵀ X
        // (3), sources form W̃ h and K̃ᵀ (U − X) (2). The saturated level does both every chunk.
        // (The final-state kernel's ≤ 64 token steps per level are not counted.)
        let (regular, saturated) = match s.form {
            Form::Mamba2 => (1.0, 2.0),
            Form::Gdn => (2.5, 5.0),
        };
        let scans = s.scans();
        if self.strategy == ScanStrategy::Precomputed {
            // K̃ᵀV once per chunk, then a q̃ row times a state per reader row and level (the
            // elementwise up-sweep and prefix are not counted).
            let reader_rows = (s.level_output_slots() * CHUNK) as f64;
            return f + 2.0 * t * h * dk * dv + reader_rows * h * 2.0 * dk * dv;
        }
        let sat = usize::from(scans > 0 && scans == s.m_top() + 1);
        f += ((scans - sat) as f64 * regular + sat as f64 * saturated) * 2.0 * t * h * dk * dv;
        f
    }

    /// Estimated device-memory traffic of one `encode` in bytes, for benchmark reports: every
    /// buffer a kernel reads or writes counted once per kernel that touches it (caches ignored).
    pub fn bytes(&self) -> f64 {
        let s = self.shape;
        let (t, h, dk, dv) = (s.t as f64, s.heads as f64, s.dk as f64, s.dv as f64);
        let qk = t * s.qk_heads as f64 * dk;
        let lam = t * h * s.lambda_cols as f64;
        let scans = s.scans() as f64;
        let slots = (s.level_output_slots() * CHUNK) as f64 * h * dv;
        // gamma: g in, γ out; intra: q, k, v, λ, γ (and β) in, o out.
        let mut f = 2.0 * t * h + 2.0 * qk + t * h * dv + lam + t * h + t * h * dv;
        if self.strategy == ScanStrategy::Precomputed {
            // Contributions: k, v in, one state per chunk out; up-sweep: three states per block
            // and level; readers: per reader chunk and level a state and q̃ (λ, γ), o in and out.
            let states = s.chunks().saturating_sub(1) as f64 * h * dk * dv;
            let reader_chunks = s.level_output_slots() as f64;
            f += 2.0 * qk + t * h * dv + states;
            f += 1.5 * states * (s.scans() as f64 - 1.0).max(0.0);
            f += reader_chunks * h * (dk * dv + CHUNK as f64 * (dk + 2.0)) + 2.0 * t * h * dv;
            f += (s.scans() + s.levels) as f64 * h * dk * dv;
            return 4.0 * f;
        }
        // scans: per level the per-chunk inputs and γ, λ; the packed reader outputs.
        let per_level = if s.form == Form::Gdn {
            f += 3.0 * t * h * dk + t * h * dv + t * h; // q̃, K̃, W̃, U out; β in
            3.0 * t * h * dk + t * h * dv
        } else {
            2.0 * qk + t * h * dv
        };
        f += scans * (per_level + t * h + lam) + slots;
        // combine: o in and out, reader outputs in; state: hand-off in, state out.
        if scans > 0.0 {
            f += 2.0 * t * h * dv + slots;
        }
        f += (scans + s.levels as f64) * h * dk * dv;
        4.0 * f
    }
}
