//! Quality against kept levels: which level cap and state type a board should run a model with,
//! from measured bits per byte.
//!
//! A board with little RAM cannot hold every level; fewer levels saturate the top one earlier
//! (at 2^(levels − 1) tokens) and f16 halves the state. What that costs is measured, not
//! modelled: `loglinear eval --levels N --state f16 --context T` on the model's validation text,
//! one row per (context, levels, state), in a CSV file beside the model
//! (`<model>.levels.csv`, columns `context,levels,state,bits_per_byte`; BENCHMARKS.md says how
//! it was made). [`recommend`] picks, among the rows that fit the board, the best one at the
//! context asked for.

use crate::{Plan, PlanError, StateType};
use std::path::{Path, PathBuf};

/// One measurement: bits per byte of the model at `context` with `levels` in `state`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QualityRow {
    /// Tokens per evaluation window.
    pub context: u64,
    /// State levels kept.
    pub levels: usize,
    /// State element type.
    pub state: StateType,
    /// Bits per byte on the validation text.
    pub bits_per_byte: f64,
}

/// A model's measured quality table.
#[derive(Clone, Debug, PartialEq)]
pub struct QualityTable {
    /// The CSV file read.
    pub path: PathBuf,
    /// Its rows.
    pub rows: Vec<QualityRow>,
}

/// What [`recommend`] advises.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Recommendation {
    /// The measured row chosen (its context is the table's, at or above the one asked for).
    pub row: QualityRow,
    /// Its bits per byte minus those of all the model's levels in f32 at the same context.
    pub cost: f64,
}

impl QualityTable {
    /// The table beside a model file: `ll-gdn-mcu16k-q8_0.gguf` → `ll-gdn-mcu16k-q8_0.levels.csv`.
    pub fn path_beside(model: &Path) -> PathBuf {
        model.with_extension("levels.csv")
    }

    /// Reads the table at `path`.
    pub fn read(path: &Path) -> Result<Self, PlanError> {
        Self::parse(&crate::read_text(path)?, path)
    }

    /// Parses a table's CSV text (`path` is for messages).
    pub fn parse(text: &str, path: &Path) -> Result<Self, PlanError> {
        let bad = |reason: String| PlanError::MalformedQuality {
            path: path.to_path_buf(),
            reason,
        };
        let mut reader = csv::ReaderBuilder::new()
            .comment(Some(b'#'))
            .trim(csv::Trim::All)
            .from_reader(text.as_bytes());
        let header = reader.headers().map_err(|e| bad(e.to_string()))?.clone();
        let want = ["context", "levels", "state", "bits_per_byte"];
        if header.iter().ne(want) {
            return Err(bad(format!("the columns must be {}", want.join(","))));
        }
        let mut rows = Vec::new();
        for (i, record) in reader.records().enumerate() {
            let record = record.map_err(|e| bad(e.to_string()))?;
            let field = |k: usize| record.get(k).unwrap_or("");
            let line = i + 2;
            let row = QualityRow {
                context: field(0)
                    .parse()
                    .map_err(|_| bad(format!("line {line}: context {:?}", field(0))))?,
                levels: field(1)
                    .parse()
                    .map_err(|_| bad(format!("line {line}: levels {:?}", field(1))))?,
                state: StateType::from_name(field(2))
                    .ok_or_else(|| bad(format!("line {line}: state {:?}", field(2))))?,
                bits_per_byte: field(3)
                    .parse::<f64>()
                    .ok()
                    .filter(|b| b.is_finite() && *b >= 0.0)
                    .ok_or_else(|| bad(format!("line {line}: bits_per_byte {:?}", field(3))))?,
            };
            rows.push(row);
        }
        if rows.is_empty() {
            return Err(bad("no rows".into()));
        }
        Ok(Self {
            path: path.to_path_buf(),
            rows,
        })
    }
}

/// The best measured (levels, state) that fits the board of `plan`, at the table's context
/// that is the smallest at or above `context` (the largest if none is): the lowest bits per
/// byte, and on a tie the one with less state (f16, then fewer levels). `None` when no row at
/// that context fits, or the table has no row for all levels in f32 there to measure the cost
/// against.
pub fn recommend(table: &QualityTable, plan: &Plan, context: u64) -> Option<Recommendation> {
    let contexts = table.rows.iter().map(|r| r.context);
    let at = contexts
        .clone()
        .filter(|&c| c >= context)
        .min()
        .or_else(|| contexts.max())?;
    let fits = |r: &QualityRow| {
        plan.max_levels
            .iter()
            .any(|&(state, most)| state == r.state && most.is_some_and(|m| r.levels <= m))
    };
    let reference = table
        .rows
        .iter()
        .find(|r| r.context == at && r.levels == plan.model_levels && r.state == StateType::F32)?;
    let state_rank = |s: StateType| if s == StateType::F16 { 0 } else { 1 };
    let best = table
        .rows
        .iter()
        .filter(|r| r.context == at && r.levels <= plan.model_levels && fits(r))
        .min_by(|a, b| {
            a.bits_per_byte
                .total_cmp(&b.bits_per_byte)
                .then(state_rank(a.state).cmp(&state_rank(b.state)))
                .then(a.levels.cmp(&b.levels))
        })?;
    Some(Recommendation {
        row: *best,
        cost: best.bits_per_byte - reference.bits_per_byte,
    })
}
