// Backward of v = x·dt and y = o + D·x per (row, head), from dv (operator) and dy (= d_o):
//   dx[r][h·P + j] = dv·dt + D[h]·dy (written into the x columns of the conv-output gradient),
//   sdt[r][h] = Σ_j dv·x (the dt gradient through v),
//   prow[r][2H + h] = Σ_j dy·x (the row's share of dD).
struct XBwdParams {
    rows: u32,
    heads: u32,
    p: u32,
    stride: u32,
    prow_stride: u32,
}

@group(0) @binding(0) var<storage, read> xbc: array<f32>;
@group(0) @binding(1) var<storage, read> dt: array<f32>;
@group(0) @binding(2) var<storage, read> d_skip: array<f32>;
@group(0) @binding(3) var<storage, read> dy: array<f32>;
@group(0) @binding(4) var<storage, read> dv: array<f32>;
@group(0) @binding(5) var<storage, read_write> dxbc: array<f32>;
@group(0) @binding(6) var<storage, read_write> sdt: array<f32>;
@group(0) @binding(7) var<storage, read_write> prow: array<f32>;
@group(0) @binding(8) var<uniform> p: XBwdParams;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let i = flat_index(wg, nw, li);
    if (i >= p.rows * p.heads) {
        return;
    }
    let r = i / p.heads;
    let h = i % p.heads;
    let d = dt[i];
    let ds = d_skip[h];
    var s_dt = 0.0;
    var s_d = 0.0;
    for (var j = 0u; j < p.p; j++) {
        let at = r * p.stride + h * p.p + j;
        let x = xbc[at];
        let dvj = dv[i * p.p + j];
        let dyj = dy[i * p.p + j];
        dxbc[at] = dvj * d + ds * dyj;
        s_dt += dvj * x;
        s_d += dyj * x;
    }
    sdt[i] = s_dt;
    prow[r * p.prow_stride + 2u * p.heads + h] = s_d;
}
