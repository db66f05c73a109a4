// Precomputed strategy, step 4 (Mamba-2) on cooperative matrices (tensor cores): the work of
// chunk_pre_read_m2.wgsl (same workgroups, levels, hand-off states and sum into o), with each
// level's 64 × dk by dk × 64 tile product (A = q̃, B = the level's state rows) in stages of
// common/coop_stage.wgsl, fp32-accurate. Needs chunk_pre_read_common.wgsl,
// common/coop_o_blocks.wgsl and the header and pieces coop_stage.wgsl names.

@compute @workgroup_size(PWG)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
    @builtin(subgroup_id) sg: u32,
    @builtin(subgroup_invocation_id) lane: u32,
) {
    let vb = wg.x;
    let c = wg.y + 1u;
    let h = wg.z;
    let t0 = c * CHUNK;
    let n = min(CHUNK, P.t - t0);
    let last_chunk = c == P.nt - 1u;
    var acc0 = MatC();
    var acc1 = MatC();
    var st: Stage;
    st.a_by_rows = true;
    st.b_by_cols = false;
    for (var m = 0u; m < P.n_scans; m++) {
        if (!reads_level(c, m)) {
            if (last_chunk) {
                zero_handoff(m, h, vb, lid);
            }
            continue;
        }
        let lv = read_level(c, h, m, n, lid);
        for (var k0 = 0u; k0 < P.dk; k0 += KD) {
            for (var j = 0u; j < PER; j++) {
                let e = lid + j * PWG;
                // q̃: consecutive threads read consecutive k of one row.
                let i = e / KD;
                let kq = e % KD;
                var x = 0.0;
                if (i < n && k0 + kq < P.dk) {
                    x = q[qk_row(t0 + i, h) + k0 + kq] * fac[i];
                }
                st.a[j] = x;
                let kr = e / CT;
                let d = vb * TILE + e % CT;
                var y = 0.0;
                if (k0 + kr < P.dk && d < P.dv) {
                    y = xs[lv.sbase + (k0 + kr) * P.dv + d];
                }
                st.b[j] = y;
            }
            stage_product(&st, lid, sg, lane, &acc0, &acc1);
        }
        if (last_chunk) {
            write_handoff(m, h, vb, lv, lid);
        }
    }
    o_blocks(acc0, acc1, sg, lane, h, t0, n, sub_row0(sg), vb * TILE + sub_col0(sg), true);
}
