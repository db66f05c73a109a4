// Precomputed strategy, step 1 (Mamba-2) on cooperative matrices (tensor cores): the work of
// chunk_pre_contrib_m2.wgsl (xs[c][h] = K̃_cᵀ V_c for c < NT − 1, one workgroup per (64 × 64 tile
// of dk × dv, chunk, head)), with the 64-deep product over the chunk's rows (A = K̃ᵀ, B = V) in
// stages of common/coop_stage.wgsl, fp32-accurate. Needs the header and pieces coop_stage.wgsl
// names and chunk_pre_common.wgsl.

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> k: array<f32>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
@group(0) @binding(3) var<storage, read> gam: array<f32>;
@group(0) @binding(4) var<storage, read_write> xs: array<f32>;

var<workgroup> fk: array<f32, CHUNK>; // e^{Γ − γ_j}

@compute @workgroup_size(PWG)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
    @builtin(subgroup_id) sg: u32,
    @builtin(subgroup_invocation_id) lane: u32,
) {
    let n_kb = (P.dk + CT - 1u) / CT;
    let kb = wg.x % n_kb;
    let vb = wg.x / n_kb;
    let c = wg.y;
    let h = wg.z;
    let t0 = c * CHUNK;
    if (lid < CHUNK) {
        let g_last = gam[(t0 + CHUNK - 1u) * P.heads + h];
        fk[lid] = exp(g_last - gam[(t0 + lid) * P.heads + h]);
    }
    workgroupBarrier();
    var acc0 = MatC();
    var acc1 = MatC();
    var st: Stage;
    st.a_by_rows = false;
    st.b_by_cols = false;
    for (var j0 = 0u; j0 < CHUNK; j0 += KD) {
        for (var j = 0u; j < PER; j++) {
            // Consecutive threads read consecutive columns of one row of k and of v.
            let e = lid + j * PWG;
            let t = t0 + j0 + e / CT;
            let kk = kb * CT + e % CT;
            var kv = 0.0;
            if (kk < P.dk) {
                kv = k[qk_row(t, h) + kk] * fk[j0 + e / CT];
            }
            st.a[j] = kv;
            let d = vb * CT + e % CT;
            var vv = 0.0;
            if (d < P.dv) {
                vv = v[(t * P.heads + h) * P.dv + d];
            }
            st.b[j] = vv;
        }
        stage_product(&st, lid, sg, lane, &acc0, &acc1);
    }
    let base = (c * P.heads + h) * P.dk * P.dv;
    let r0 = kb * CT + sub_row0(sg);
    let d0 = vb * CT + sub_col0(sg);
    store_block(tile_block(acc0, sg), lane, base, r0, d0);
    tile_block_done();
    store_block(tile_block(acc1, sg), lane, base, r0, d0 + S);
    tile_block_done();
}

// Writes this subgroup's S×S block at o_tile[ob] to xs: rows (dk) r0.., columns (dv) d0...
fn store_block(ob: u32, lane: u32, base: u32, r0: u32, d0: u32) {
    for (var e = lane; e < S * S; e += SG) {
        let kk = r0 + e / S;
        let d = d0 + e % S;
        if (kk < P.dk && d < P.dv) {
            xs[base + kk * P.dv + d] = o_tile[ob + (e / S) * OS + e % S];
        }
    }
}
