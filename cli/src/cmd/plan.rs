//! `loglinear plan`: the memory planner of the `loglinear-planner` crate (shared with
//! `firmware/build.rs`, which fails the build with the same report), plus what only the CLI
//! does: its flags, and planning a checkpoint folder by converting it in memory.

use loglinear_converter::checkpoint::{Checkpoint, ImportError};
use loglinear_converter::export::{parse_dtype, ExportError, ExportOptions, ExportedModel};
use loglinear_converter::model_source::{AlignedBytes, LoadError};
use loglinear_runtime::gguf::GgufModel;
use loglinear_runtime::DType;
use std::path::PathBuf;

use loglinear_planner::{plan_model, recommend, BoardProfile, Plan, QualityTable, StateType};

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
    /// GGUF model file or checkpoint folder.
    #[arg(long)]
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
    Ok(plan_model(
        &board,
        &model,
        bytes.as_bytes().len() as u64,
        args.state,
        args.levels,
        args.context,
    )?)
}

/// The recommended levels and state type at the plan's context (with `--context`) or at each
/// context the model's quality table measured, as report lines; `None` without a table.
pub fn recommendations(args: &PlanArgs, plan: &Plan) -> Result<Option<String>, PlanError> {
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
    let mut out = format!(
        "recommended for {} (measured bits per byte: {})",
        plan.board.name,
        path.display()
    );
    for t in contexts {
        match recommend(&table, plan, t) {
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
    Ok(Some(out))
}

/// Runs `loglinear plan`: prints the plan and any advice; fails when the model does not fit.
pub(crate) fn run(args: &PlanArgs) -> crate::Res {
    let plan = plan(args)?;
    outln!("{plan}");
    if let Some(advice) = recommendations(args, &plan)? {
        outln!("{advice}");
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
