// Local inclusive cumsum of the log decay inside each chunk: gam[t][h] = Σ_{s in chunk, s <= t} g[s][h].
// One workgroup per (chunk, head). Only local sums are ever formed (spec §7.5).

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> g: array<f32>;
@group(0) @binding(2) var<storage, read_write> gam: array<f32>;

var<workgroup> buf: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) a: u32) {
    let c = wg.x;
    let h = wg.y;
    let t = c * CHUNK + a;
    var x = 0.0;
    if (t < P.t) {
        x = g[t * P.heads + h];
    }
    buf[a] = x;
    workgroupBarrier();
    for (var off = 1u; off < CHUNK; off = off * 2u) {
        var y = buf[a];
        if (a >= off) {
            y = y + buf[a - off];
        }
        workgroupBarrier();
        buf[a] = y;
        workgroupBarrier();
    }
    if (t < P.t) {
        gam[t * P.heads + h] = buf[a];
    }
}
