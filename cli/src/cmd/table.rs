//! The tensor table that `convert`, `quantize` and `inspect` print.

use crate::Res;
use loglinear_converter::export::TensorReport;
use loglinear_runtime::DType;

pub(crate) fn human_bytes(n: usize) -> String {
    if n >= 1 << 20 {
        format!("{:.2} MiB", n as f64 / (1u64 << 20) as f64)
    } else if n >= 1 << 10 {
        format!("{:.1} KiB", n as f64 / 1024.0)
    } else {
        format!("{n} B")
    }
}

pub(crate) fn bpw(bytes: usize, elems: usize) -> f64 {
    bytes as f64 * 8.0 / elems.max(1) as f64
}

/// One row of a tensor table.
pub(crate) struct Row {
    pub(crate) name: String,
    pub(crate) shape: String,
    pub(crate) dtype: DType,
    pub(crate) elements: usize,
    pub(crate) bytes: usize,
    pub(crate) note: String,
}

/// Prints a tensor table and the totals per type and overall.
pub(crate) fn print_tensor_table(rows: &[Row], shape_title: &str) -> Res {
    let w = rows.iter().map(|r| r.name.len()).max().unwrap_or(6).max(6);
    let sw = rows
        .iter()
        .map(|r| r.shape.len())
        .max()
        .unwrap_or(5)
        .max(shape_title.len());
    outln!(
        "{:<w$}  {shape_title:>sw$}  {:<5}  {:>10}  note",
        "tensor",
        "type",
        "bytes"
    );
    let (mut bytes, mut elems) = (0, 0);
    let mut by_type: Vec<(DType, usize, usize, usize)> = Vec::new();
    for r in rows {
        outln!(
            "{:<w$}  {:>sw$}  {:<5}  {:>10}  {}",
            r.name,
            r.shape,
            r.dtype.name(),
            r.bytes,
            r.note
        );
        bytes += r.bytes;
        elems += r.elements;
        match by_type.iter_mut().find(|(t, ..)| *t == r.dtype) {
            Some((_, c, n, b)) => {
                *c += 1;
                *n += r.elements;
                *b += r.bytes;
            }
            None => by_type.push((r.dtype, 1, r.elements, r.bytes)),
        }
    }
    for (t, c, n, b) in by_type {
        outln!(
            "  {:<5} {c:>4} tensors {n:>10} weights {:>11}  {:.2} bits/weight",
            t.name(),
            human_bytes(b),
            bpw(b, n)
        );
    }
    outln!(
        "{} tensors, {elems} weights, {} of tensor data, {:.3} bits per weight",
        rows.len(),
        human_bytes(bytes),
        bpw(bytes, elems)
    );
    Ok(())
}

pub(crate) fn report_rows(reports: &[TensorReport]) -> Vec<Row> {
    reports
        .iter()
        .map(|r| Row {
            name: r.name.clone(),
            shape: match r.shape.as_slice() {
                [n] => format!("{n}"),
                [a, b] => format!("{a}x{b}"),
                s => format!(
                    "[{}]",
                    s.iter()
                        .map(usize::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            },
            dtype: r.dtype,
            elements: r.elements,
            bytes: r.bytes,
            note: r.note.clone().unwrap_or_default(),
        })
        .collect()
}
