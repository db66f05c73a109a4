//! `loglinear inspect`: a GGUF file's metadata, tensors, types, sizes and bits per weight, and
//! whether the runtime would load it.

use super::table::{human_bytes, print_tensor_table, Row};
use crate::{CliError, Res};
use loglinear_converter::model_source::AlignedBytes;
use loglinear_runtime::gguf::format::{self, ValueType};
use loglinear_runtime::gguf::{GgufFile, GgufModel, MetaArray, MetaValue};
use std::path::PathBuf;

/// `loglinear inspect`'s arguments.
#[derive(clap::Args)]
pub(crate) struct InspectArgs {
    /// The file.
    pub file: PathBuf,
}

fn meta_type(v: &MetaValue<'_>) -> String {
    match v {
        MetaValue::Array(a) => format!(
            "[{}; {}]",
            ValueType::from_id(a.elem_type).map_or("?", ValueType::name),
            a.len
        ),
        v => v.value_type().name().into(),
    }
}

fn meta_text(v: &MetaValue<'_>) -> String {
    match v {
        MetaValue::U8(x) => x.to_string(),
        MetaValue::I8(x) => x.to_string(),
        MetaValue::U16(x) => x.to_string(),
        MetaValue::I16(x) => x.to_string(),
        MetaValue::U32(x) => x.to_string(),
        MetaValue::I32(x) => x.to_string(),
        MetaValue::F32(x) => format!("{x:e}"),
        MetaValue::Bool(x) => x.to_string(),
        MetaValue::Str(s) => format!("{s:?}"),
        MetaValue::Array(a) => array_text(a),
        MetaValue::U64(x) => x.to_string(),
        MetaValue::I64(x) => x.to_string(),
        MetaValue::F64(x) => format!("{x:e}"),
    }
}

fn array_text(a: &MetaArray<'_>) -> String {
    const SHOW: usize = 6;
    let items: Vec<String> = a.iter().take(SHOW).map(|v| meta_text(&v)).collect();
    let more = if a.len as usize > SHOW { ", …" } else { "" };
    format!("[{}{more}]", items.join(", "))
}

/// Runs `loglinear inspect`.
pub(crate) fn run(args: &InspectArgs) -> Res {
    let path = &args.file;
    let bytes = AlignedBytes::read(path)?;
    let file = GgufFile::parse(bytes.as_bytes()).map_err(|error| CliError::Gguf {
        path: path.to_path_buf(),
        error,
    })?;
    outln!(
        "{}: GGUF v3, {} bytes ({}), alignment {}, {} metadata keys, {} tensors",
        path.display(),
        bytes.as_bytes().len(),
        human_bytes(bytes.as_bytes().len()),
        file.alignment(),
        file.metadata_len(),
        file.tensor_count()
    );
    outln!("\nmetadata:");
    let kw = file.metadata().map(|(k, _)| k.len()).max().unwrap_or(3);
    for (k, v) in file.metadata() {
        outln!("  {k:<kw$}  {:<14}  {}", meta_type(&v), meta_text(&v));
    }
    outln!("\ntensors:");
    let rows: Vec<Row> = file
        .tensors()
        .map(|t| {
            let dims = &t.dims[..t.n_dims as usize];
            Row {
                name: t.name.to_string(),
                shape: format!(
                    "[{}]",
                    dims.iter()
                        .map(u64::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                dtype: t.dtype,
                elements: t.len(),
                bytes: t.data.len(),
                note: format!("@{}", t.offset),
            }
        })
        .collect();
    print_tensor_table(&rows, "ggml dims")?;
    match GgufModel::parse(bytes.as_bytes()) {
        Ok(m) => {
            let c = m.config();
            outln!(
                "\nmodel: ok: {} ({}), {} blocks, width {}, {} heads ({}x{}), vocab {}",
                c.arch.name(),
                file.get(format::general::NAME)
                    .and_then(|v| v.as_str())
                    .unwrap_or("unnamed"),
                c.num_layers,
                c.hidden_size,
                c.num_heads,
                c.head_k_dim,
                c.head_v_dim,
                c.vocab_size
            );
        }
        // The listing above is still printed: it helps to see what the file holds.
        Err(e) => {
            return Err(format!(
                "{}: the runtime would refuse this file: {e}",
                path.display()
            )
            .into())
        }
    }
    Ok(())
}
