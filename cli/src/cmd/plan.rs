//! `loglinear plan`: the memory planner of the `loglinear-planner` crate (shared with
//! `firmware/build.rs`, which fails the build with the same report), plus what only the CLI
//! does: its flags, and planning a checkpoint folder by converting it in memory.

use loglinear_converter::checkpoint::{Checkpoint, ImportError};
use loglinear_converter::command_paths::{CommandPaths, Reads};
use loglinear_converter::export::{parse_dtype, ExportError, ExportOptions, ExportedModel};
use loglinear_converter::model_source::{AlignedBytes, LoadError};
use loglinear_runtime::gguf::GgufModel;
use loglinear_runtime::DType;
use std::path::PathBuf;

use loglinear_planner::{
    plan_model, recommend, BoardProfile, ContextLimit, Plan, QualityTable, Recommendation,
    StateType,
};
use serde_json::{json, Value};

/// Why a plan could not be made.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The board profile, or the plan itself (levels that do not suit the model).
    #[error(transparent)]
    Planner(#[from] loglinear_planner::PlanError),
    /// The model file or folder does not load.
    #[error(transparent)]
    Model(#[from] LoadError),
    /// A checkpoint folder that does not convert.
    #[error("{path}: {source}")]
    Export {
        /// The folder.
        path: PathBuf,
        /// The cause.
        source: ExportError,
    },
}

/// Options of `loglinear plan`.
#[derive(Clone, Debug, clap::Args)]
pub struct PlanArgs {
    /// Board name (a folder under boards/) or board folder.
    #[arg(long)]
    pub board: String,
    /// GGUF model file or checkpoint folder, e.g. models/ll-gdn-mcu-q8_0.gguf.
    #[arg(short = 'm', long)]
    pub model: PathBuf,
    /// Context length T in tokens for the live-state figure (default: the levels' exact
    /// capacity, 2^(levels−1)).
    #[arg(long)]
    pub context: Option<u64>,
    /// State storage type (default: the board's firmware.state).
    #[arg(long, value_enum)]
    pub state: Option<StateType>,
    /// State levels (default: the board's firmware.levels).
    #[arg(long)]
    pub levels: Option<usize>,
    /// The model's measured quality table (bits per byte against levels and state type,
    /// columns context,levels,state,bits_per_byte) for the recommendation (default: the
    /// `.levels.csv` file beside the model, when there is one).
    #[arg(long, value_name = "FILE.csv")]
    pub levels_table: Option<PathBuf>,
    /// For a checkpoint folder: the matrix storage type of the GGUF file it would become.
    #[arg(long = "type", value_parser = parse_dtype, default_value = "f32")]
    pub matrix_type: DType,
    /// Print the plan as one JSON object (bytes as numbers, the fit, the recommendations).
    #[arg(long)]
    pub json: bool,
}

/// Loads the model at `path` (GGUF file, or checkpoint converted in memory with
/// `matrix_type`) and plans it.
pub fn plan(args: &PlanArgs) -> Result<Plan, PlanError> {
    let board = BoardProfile::find(&args.board)?;
    let path = &args.model;
    let bytes = if path.is_dir() {
        let ckpt = Checkpoint::load(path).map_err(|source: ImportError| {
            PlanError::Model(LoadError::Checkpoint {
                path: path.clone(),
                source,
            })
        })?;
        let opts = ExportOptions {
            matrix_type: args.matrix_type,
            ..ExportOptions::default()
        };
        let gguf = ExportedModel::from_checkpoint(&ckpt, &opts)
            .and_then(|m| m.to_gguf())
            .map_err(|source| PlanError::Export {
                path: path.clone(),
                source,
            })?;
        AlignedBytes::from_slice(&gguf)
    } else {
        AlignedBytes::read(path)?
    };
    // Parsed here rather than by `plan_file_bytes`, so errors name the file.
    let model_err = |error| LoadError::model_file(path, bytes.as_bytes(), error);
    let gguf = GgufModel::parse(bytes.as_bytes()).map_err(model_err)?;
    let model = gguf.model().map_err(|error| LoadError::Model {
        path: path.clone(),
        error,
    })?;
    loglinear_converter::model_source::refuse_non_finite(&model, path)?;
    Ok(plan_model(
        &board,
        &model,
        bytes.as_bytes().len() as u64,
        args.state,
        args.levels,
        args.context,
    )?)
}

/// The recommendations of the model's quality table at the plan's context (with `--context`)
/// or at each context the table measured.
pub struct Advice {
    /// The table read.
    pub table: PathBuf,
    /// Per context asked about: the best measured setting that fits, if any.
    pub at: Vec<(u64, Option<Recommendation>)>,
}

/// The recommended levels and state type; `None` without a quality table.
pub fn recommendations(args: &PlanArgs, plan: &Plan) -> Result<Option<Advice>, PlanError> {
    let path = match &args.levels_table {
        Some(path) => path.clone(),
        None => {
            let beside = QualityTable::path_beside(&args.model);
            if !beside.is_file() {
                return Ok(None);
            }
            beside
        }
    };
    let table = QualityTable::read(&path)?;
    let mut contexts: Vec<u64> = match args.context {
        Some(t) => vec![t],
        None => table.rows.iter().map(|r| r.context).collect(),
    };
    contexts.sort_unstable();
    contexts.dedup();
    let at = contexts
        .into_iter()
        .map(|t| (t, recommend(&table, plan, t)))
        .collect();
    Ok(Some(Advice { table: path, at }))
}

/// The advice as report lines.
fn advice_text(advice: &Advice, plan: &Plan) -> String {
    let mut out = format!(
        "recommended for {} (measured bits per byte: {})",
        plan.board.name,
        advice.table.display()
    );
    for (t, r) in &advice.at {
        match r {
            Some(r) => out.push_str(&format!(
                "\n  {t}-token context: {} levels, {} state, {:+.3} bits per byte \
                 ({:.4} measured at {} tokens, against all {} levels in f32)",
                r.row.levels,
                r.row.state,
                r.cost,
                r.row.bits_per_byte,
                r.row.context,
                plan.model_levels
            )),
            None => out.push_str(&format!(
                "\n  {t}-token context: no measured setting fits the board"
            )),
        }
    }
    out
}

/// The plan and advice as one JSON object.
fn plan_json(plan: &Plan, advice: Option<&Advice>) -> Value {
    let max_levels: serde_json::Map<String, Value> = plan
        .max_levels
        .iter()
        .map(|(s, l)| (s.to_string(), json!(l)))
        .collect();
    let context_limit = match plan.context_limit() {
        ContextLimit::Unbounded => json!({ "unbounded": true }),
        ContextLimit::Exact { levels, tokens } => {
            json!({ "unbounded": false, "levels": levels, "tokens": tokens })
        }
        ContextLimit::None => Value::Null,
    };
    let advice = advice.map(|a| {
        json!({
            "table": a.table.display().to_string(),
            "at": a.at.iter().map(|(t, r)| json!({
                "context": t,
                "recommended": r.as_ref().map(|r| json!({
                    "levels": r.row.levels,
                    "state": r.row.state.to_string(),
                    "bits_per_byte": r.row.bits_per_byte,
                    "measured_context": r.row.context,
                    "cost_bits_per_byte": r.cost,
                })),
            })).collect::<Vec<_>>(),
        })
    });
    json!({
        "board": plan.board.name,
        "fits": plan.fits(),
        "state": plan.state.to_string(),
        "levels": plan.levels,
        "model_levels": plan.model_levels,
        "context": plan.context,
        "exact_capacity": plan.exact_capacity,
        "live_levels": plan.session.live_levels,
        "flash": {
            "model_bytes": plan.model_bytes,
            "code_bytes": plan.code_bytes,
            "needed_bytes": plan.flash_total(),
            "available_bytes": plan.board.flash.length,
            "over_bytes": plan.flash_over(),
        },
        "ram": {
            "arena_bytes": plan.session.arena,
            "state_allocated_bytes": plan.session.state_allocated,
            "state_live_bytes": plan.session.state_live,
            "conv_bytes": plan.session.conv,
            "scratch_bytes": plan.session.scratch,
            "stack_bytes": plan.stack_estimate(),
            "needed_bytes": plan.ram_total(),
            "available_bytes": plan.board.ram.length,
            "over_bytes": plan.ram_over(),
        },
        "max_levels": max_levels,
        "context_limit": context_limit,
        "recommendations": advice,
    })
}

impl PlanArgs {
    /// What `plan` reads (the board's profile is found and read by the planner, which names
    /// it in its errors).
    pub(crate) fn paths(&self) -> CommandPaths {
        CommandPaths::new()
            .reads("--model", Some(&self.model), Reads::Model)
            .reads("--levels-table", self.levels_table.as_deref(), Reads::File)
    }
}

/// Runs `loglinear plan`: prints the plan and any advice; fails when the model does not fit.
pub(crate) fn run(args: &PlanArgs) -> crate::Res {
    let plan = plan(args)?;
    let advice = recommendations(args, &plan)?;
    if args.json {
        outln!("{:#}", plan_json(&plan, advice.as_ref()));
    } else {
        outln!("{plan}");
        if let Some(advice) = &advice {
            outln!("{}", advice_text(advice, &plan));
        }
    }
    if !plan.fits() {
        return Err(format!("the model does not fit board {}", plan.board.name).into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(board: &str, model: PathBuf) -> PlanArgs {
        PlanArgs {
            board: board.into(),
            model,
            context: None,
            state: None,
            levels: None,
            levels_table: None,
            matrix_type: DType::F32,
            json: false,
        }
    }

    #[test]
    fn model_that_does_not_parse_is_a_typed_error() {
        let file = std::env::temp_dir().join(format!("plan-bad-{}", std::process::id()));
        std::fs::write(&file, b"GGUF not really a model").unwrap();
        let e = plan(&args("mps2-an386", file.clone())).unwrap_err();
        std::fs::remove_file(&file).ok();
        assert!(matches!(e, PlanError::Model(_)), "{e}");
        assert!(e.to_string().contains("plan-bad-"), "{e}");
    }

    #[test]
    fn unknown_board_is_the_planners_error() {
        let model =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models/ll-gdn-mcu-q8_0.gguf");
        let e = plan(&args("no-such-board", model)).unwrap_err();
        assert!(
            matches!(
                e,
                PlanError::Planner(loglinear_planner::PlanError::UnknownBoard { .. })
            ),
            "{e}"
        );
    }

    #[test]
    fn the_cli_plans_what_the_planner_plans() {
        // A GGUF file through the CLI path gives the planner crate's plan of the same bytes
        // (what firmware/build.rs computes).
        let model =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models/ll-gdn-mcu-q8_0.gguf");
        let cli = plan(&args("microbit", model.clone())).unwrap();
        let board = BoardProfile::find("microbit").unwrap();
        let bytes = std::fs::read(&model).unwrap();
        let crate_plan =
            loglinear_planner::plan_file_bytes(&board, &bytes, None, None, None).unwrap();
        assert_eq!(cli.to_string(), crate_plan.to_string());
        assert!(!cli.fits());
    }
}
