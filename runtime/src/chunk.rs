//! The chunk-scan shape (spec §7), as plain data: the chunk size, the two recurrences, and the
//! sizes of one scan. The CPU prefill (`loglinear-cpu-prefill`) and the GPU kernels
//! (`loglinear-host-gpu`) both take a [`ScanShape`], so they agree on every derived count.

use crate::level::{bitlen, LevelPolicy};

/// Chunk size (the official one; intra-chunk levels 0..=6).
pub const CHUNK: usize = 64;

/// Token level of chunk level 0: c0 + 1 with [`CHUNK`] = 2^c0.
pub const C0P1: usize = 7;

const _: () = assert!(CHUNK == 1 << (C0P1 - 1));

/// Which recurrence a scan runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// Log-Linear Mamba-2: scalar decay per token, S ← α S + k vᵀ.
    Mamba2,
    /// Log-Linear Gated DeltaNet: decay times the delta rule, S ← α (I − β k kᵀ) S + β k vᵀ.
    Gdn,
}

impl Form {
    /// `mamba2` or `gdn`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Mamba2 => "mamba2",
            Self::Gdn => "gdn",
        }
    }
}

/// A form name that is not `mamba2`, `m2` or `gdn`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnknownForm;

impl core::fmt::Display for UnknownForm {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("unknown form (mamba2 or m2, gdn)")
    }
}

#[cfg(feature = "std")]
impl std::error::Error for UnknownForm {}

/// `mamba2` / `m2` or `gdn`, any case: the one spelling of the forms that every tool
/// (benchmarks, profilers, anchor files) reads.
impl core::str::FromStr for Form {
    type Err = UnknownForm;

    fn from_str(name: &str) -> Result<Self, UnknownForm> {
        let name = name.trim();
        if name.eq_ignore_ascii_case("mamba2") || name.eq_ignore_ascii_case("m2") {
            Ok(Self::Mamba2)
        } else if name.eq_ignore_ascii_case("gdn") {
            Ok(Self::Gdn)
        } else {
            Err(UnknownForm)
        }
    }
}

/// Sizes of one scan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScanShape {
    /// The recurrence.
    pub form: Form,
    /// Tokens (≥ 1; a partial last chunk and T < 64 are allowed).
    pub t: usize,
    /// Heads.
    pub heads: usize,
    /// Heads with their own q and k (Mamba-2 B/C groups; `heads` for GDN); head h reads q/k
    /// row h / (heads / qk_heads). Must divide `heads`.
    pub qk_heads: usize,
    /// Key size.
    pub dk: usize,
    /// Value size.
    pub dv: usize,
    /// λ columns per (token, head) in the λ input (≥ levels; level ℓ reads column ℓ).
    pub lambda_cols: usize,
    /// Levels of the output state: the runtime's [`LevelPolicy`] levels (top = levels − 1);
    /// 1 is the plain single-state recurrence.
    pub levels: usize,
}

impl ScanShape {
    /// Chunks: ⌈T / 64⌉.
    pub fn chunks(&self) -> usize {
        self.t.div_ceil(CHUNK)
    }

    /// The capacity policy of [`ScanShape::levels`]; `None` when that is 0 or over 64.
    pub fn policy(&self) -> Option<LevelPolicy> {
        LevelPolicy::new(self.levels)
    }

    /// The top (saturating) token level: levels − 1.
    pub fn top(&self) -> usize {
        self.levels.saturating_sub(1)
    }

    /// Chunk level of the saturated (top) state.
    pub fn m_top(&self) -> usize {
        self.top().saturating_sub(C0P1)
    }

    /// Inter-chunk scans that can be non-empty: chunk levels m ≤ m_top with 2^m ≤ NT − 1.
    pub fn scans(&self) -> usize {
        let nt1 = (self.chunks() - 1) as u64;
        (bitlen(nt1) as usize).min(self.m_top() + 1)
    }

    /// The q/k head that head `h` reads.
    pub fn qk_head(&self, h: usize) -> usize {
        h / (self.heads / self.qk_heads)
    }

    /// λ column of a pair at token level `level`: saturated at the top level.
    pub fn lambda_col(&self, level: usize) -> usize {
        level.min(self.top())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(t: usize, levels: usize) -> ScanShape {
        ScanShape {
            form: Form::Mamba2,
            t,
            heads: 4,
            qk_heads: 2,
            dk: 8,
            dv: 8,
            lambda_cols: levels,
            levels,
        }
    }

    #[test]
    fn form_names_round_trip_and_unknown_names_are_errors() {
        for form in [Form::Mamba2, Form::Gdn] {
            assert_eq!(form.name().parse(), Ok(form));
        }
        assert_eq!(" M2 ".parse(), Ok(Form::Mamba2));
        assert_eq!("GDN".parse(), Ok(Form::Gdn));
        assert_eq!("mamba".parse::<Form>(), Err(UnknownForm));
        assert_eq!("".parse::<Form>(), Err(UnknownForm));
    }

    #[test]
    fn derived_counts() {
        let s = shape(1000, 15);
        assert_eq!(s.chunks(), 16);
        assert_eq!((s.top(), s.m_top()), (14, 7));
        // NT − 1 = 15 needs chunk levels 0..=3.
        assert_eq!(s.scans(), 4);
        assert_eq!(shape(64, 15).scans(), 0);
        // Saturated: 2^m_top chunks of 64 tokens, m_top = 0 with 8 levels.
        assert_eq!(shape(10_000, 8).scans(), 1);
        assert_eq!((s.qk_head(3), s.lambda_col(20)), (1, 14));
        assert_eq!(shape(5, 1).top(), 0);
        assert!(shape(5, 0).policy().is_none());
    }
}
