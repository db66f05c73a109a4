// The sources' gradient state of every chunk c but the last: Z_c = Σ_{m: c is a source}
// exp(dec[m][c]) Y of c's level-m pair, the levels in order (deterministic). A source row j of
// chunk c then takes dk_j += exp(Γ_c − γ_j) Z_c v_j and dv_j += exp(Γ_c − γ_j) Z_cᵀ k_j with one
// product for all levels (grad_m2_apply.wgsl, MODE 1 and 2). One thread per element of dk×dv;
// workgroup = (256 elements, chunk, head).

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> xy: array<f32>;
@group(0) @binding(2) var<storage, read> dec: array<f32>;
@group(0) @binding(3) var<storage, read_write> z: array<f32>;
// Only for grad_m2_common.wgsl's helpers (unused here, so not in the pipeline layout).
@group(0) @binding(4) var<storage, read> gam: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wg: vec3<u32>) {
    let e = gid.x;
    let c = wg.y;
    let h = wg.z;
    let mat = P.dk * P.dv;
    if (e >= mat) {
        return;
    }
    var s = 0.0;
    for (var m = 0u; m < inter_levels(); m++) {
        if (chunk_role(m, c) == ROLE_SOURCE) {
            s += exp(dec[dec_idx(m, c, h)]) * xy[xy_base(1u, pair_of(m, c), h) + e];
        }
    }
    z[(c * P.heads + h) * mat + e] = s;
}
