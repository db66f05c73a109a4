// The output of a chunk kernel on cooperative matrices (common/coop_stage.wgsl) whose 64 × 64
// tile is rows of a chunk by 64 columns of o: chunk_intra_m2_coop writes it, chunk_pre_read_m2_coop
// adds it. Needs the kernel's `o` binding ([t][heads][dv]).

// This subgroup's two accumulators (columns d0 and d0 + S of rows r0.. of the chunk t0, n
// rows) into o, assigned or added. Call it in uniform control flow.
fn o_blocks(acc0: MatC, acc1: MatC, sg: u32, lane: u32, h: u32, t0: u32, n: u32, r0: u32,
            d0: u32, add: bool) {
    o_block(tile_block(acc0, sg), lane, h, t0, n, r0, d0, add);
    tile_block_done();
    o_block(tile_block(acc1, sg), lane, h, t0, n, r0, d0 + S, add);
    tile_block_done();
}

fn o_block(ob: u32, lane: u32, h: u32, t0: u32, n: u32, r0: u32, d0: u32, add: bool) {
    for (var e = lane; e < S * S; e += SG) {
        let i = r0 + e / S;
        let d = d0 + e % S;
        if (i < n && d < P.dv) {
            let at = ((t0 + i) * P.heads + h) * P.dv + d;
            var x = o_tile[ob + (e / S) * OS + e % S];
            if (add) {
                x += o[at];
            }
            o[at] = x;
        }
    }
}
