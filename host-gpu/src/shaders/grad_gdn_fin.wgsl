// GDN backward, step 7: per (chunk, head), dβ from the row sums of step 5 and dg as the reverse
// cumsum of dγ inside the chunk (γ is the chunk-local inclusive cumsum of g).

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> tiles: array<f32>;
@group(0) @binding(2) var<storage, read_write> dg: array<f32>;
@group(0) @binding(3) var<storage, read_write> dbeta: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let c = wg.x;
    let h = head0() + wg.y;
    let t0 = c * C;
    let n = chunk_rows(c);
    let base = ch_base(c, h);
    if (lid < n) {
        var s = 0.0;
        for (var r = lid; r < n; r++) {
            s += tiles[base + ROW_DG + r];
        }
        dg[(t0 + lid) * P.heads + h] = s;
        dbeta[(t0 + lid) * P.heads + h] = tiles[base + ROW_DB + lid];
    }
}
