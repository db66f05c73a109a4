// Intra-chunk part, Mamba-2 form, on cooperative matrices (tensor cores): the work of
// chunk_intra_m2.wgsl (A_ij = (q_i·k_j) exp(γ_i − γ_j) λ_i[min(lev(i,j), top)] for j <= i,
// o_c = A V_c, first writer of `o`; one workgroup per (chunk, head)) with both tile products,
// Q Kᵀ over dk and A V over the chunk's rows, in stages of common/coop_stage.wgsl,
// fp32-accurate. The score tile A stays in workgroup memory in f32 between them. Needs the
// header and pieces coop_stage.wgsl names, common/coop_o_blocks.wgsl and
// common/chunk_gammas.wgsl.

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read> v: array<f32>;
@group(0) @binding(4) var<storage, read> gam: array<f32>;
@group(0) @binding(5) var<storage, read> lam: array<f32>;
@group(0) @binding(6) var<storage, read_write> o: array<f32>;

const PWG: u32 = 256u;
// Rows of the score tile: a multiple of 4 (16-byte aligned cooperative stores).
const SCS: u32 = CHUNK + 4u;
var<workgroup> sc: array<f32, CHUNK * SCS>;

@compute @workgroup_size(PWG)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
    @builtin(subgroup_id) sg: u32,
    @builtin(subgroup_invocation_id) lane: u32,
) {
    let c = wg.x;
    let h = wg.y;
    let t0 = c * CHUNK;
    let n = min(CHUNK, P.t - t0);
    load_gammas(t0, n, h, lid);
    workgroupBarrier();
    let r0 = sub_row0(sg);
    let c0 = sub_col0(sg);
    var st: Stage;

    // Scores Q Kᵀ: A = q rows, B = k rows as columns; consecutive threads read consecutive dk
    // columns of one row of each.
    st.a_by_rows = true;
    st.b_by_cols = true;
    var acc0 = MatC();
    var acc1 = MatC();
    for (var x0 = 0u; x0 < P.dk; x0 += KD) {
        for (var j = 0u; j < PER; j++) {
            let e = lid + j * PWG;
            let r = e / KD;
            let x = x0 + e % KD;
            var qv = 0.0;
            var kv = 0.0;
            if (r < n && x < P.dk) {
                let b = qk_row(t0 + r, h) + x;
                qv = q[b];
                kv = k[b];
            }
            st.a[j] = qv;
            st.b[j] = kv;
        }
        stage_product(&st, lid, sg, lane, &acc0, &acc1);
    }
    coopStoreT(acc0, &sc[r0 * SCS + c0], SCS);
    coopStoreT(acc1, &sc[r0 * SCS + c0 + S], SCS);
    workgroupBarrier();
    for (var e = lid; e < CHUNK * CHUNK; e += PWG) {
        let i = e / CHUNK;
        let j = e % CHUNK;
        var val = 0.0;
        if (j <= i && i < n) {
            // Mask before exp: the exponent is <= 0.
            val = sc[i * SCS + j] * exp(gs[i] - gs[j]) * lam[lam_idx(t0 + i, h, level_col(i, j))];
        }
        sc[i * SCS + j] = val;
    }
    workgroupBarrier();

    // o = A V, 64 dv columns at a time: A = the score tile, B = v rows (consecutive threads on
    // consecutive columns).
    st.b_by_cols = false;
    for (var d0 = 0u; d0 < P.dv; d0 += CT) {
        acc0 = MatC();
        acc1 = MatC();
        for (var j0 = 0u; j0 < CHUNK; j0 += KD) {
            for (var j = 0u; j < PER; j++) {
                let e = lid + j * PWG;
                st.a[j] = sc[(e / KD) * SCS + j0 + e % KD];
                let t = j0 + e / CT;
                let d = d0 + e % CT;
                var vv = 0.0;
                if (t < n && d < P.dv) {
                    vv = v[((t0 + t) * P.heads + h) * P.dv + d];
                }
                st.b[j] = vv;
            }
            stage_product(&st, lid, sg, lane, &acc0, &acc1);
        }
        o_blocks(acc0, acc1, sg, lane, h, t0, n, r0, d0 + c0, false);
    }
}
