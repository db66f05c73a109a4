// Moves between the head's compact slots and the graph's rows (GraphOptions::head_rows), by an
// index map from train_rows_compact.wgsl whose entry is a source row, IGNORED (the value is 0)
// or DROPPED (NaN, so a capacity overflow poisons the loss instead of silently losing rows):
//   gather_rows:     dst[i][c] = src[index_map[i]][c] for i < rows, c < cols
//                    (slots from rows with slot_row; rows from slots with row_slot)
//   scatter_targets: dst[b·T + t] = src[index_map[t·B + b]] (per-target outputs [B][T] from
//                    per-slot ones, with row_slot; rows are in (t, b) order)
struct MapParams {
    rows: u32,
    cols: u32,
    t: u32,
    batch: u32,
    // A quiet NaN's bits, passed in so that no shader compiler folds a NaN constant.
    nan_bits: u32,
}

@group(0) @binding(0) var<storage, read> index_map: array<u32>;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;
@group(0) @binding(3) var<uniform> p: MapParams;

const DROPPED: u32 = 0xFFFFFFFEu;

fn mapped(s: u32, c: u32) -> f32 {
    if (s == IGNORED) {
        return 0.0;
    }
    if (s == DROPPED) {
        return bitcast<f32>(p.nan_bits);
    }
    return src[s * p.cols + c];
}

@compute @workgroup_size(256)
fn gather_rows(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
               @builtin(local_invocation_index) li: u32) {
    let i = flat_index(wg, nw, li);
    if (i >= p.rows * p.cols) {
        return;
    }
    dst[i] = mapped(index_map[i / p.cols], i % p.cols);
}

@compute @workgroup_size(256)
fn scatter_targets(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
                   @builtin(local_invocation_index) li: u32) {
    let i = flat_index(wg, nw, li);
    if (i >= p.t * p.batch) {
        return;
    }
    let b = i / p.t;
    let t = i % p.t;
    dst[i] = mapped(index_map[t * p.batch + b], 0u);
}
