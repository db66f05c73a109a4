// Intra-chunk part, Mamba-2 form: A_ij = (q_i·k_j) exp(γ_i − γ_j) λ_i[min(lev(i,j), top)] for
// j <= i, o_c = A V_c. One workgroup (256 threads) per (chunk, head); A lives in workgroup memory.
// This kernel is the first writer of `o`.

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read> v: array<f32>;
@group(0) @binding(4) var<storage, read> gam: array<f32>;
@group(0) @binding(5) var<storage, read> lam: array<f32>;
@group(0) @binding(6) var<storage, read_write> o: array<f32>;

var<workgroup> a_tile: array<f32, 4096>;

// The score panels (qk_panels.wgsl): KP dk columns of q, then of k, in a_tile.
const KP: u32 = 16u;
const K_PANEL: u32 = KP * KPS;

fn panel_put(x: u32, r: u32, qv: f32, kv: f32) {
    a_tile[x * KPS + r] = qv;
    a_tile[K_PANEL + x * KPS + r] = kv;
}

fn q_panel4(x: u32, r: u32) -> vec4<f32> {
    let b = x * KPS + r;
    return vec4<f32>(a_tile[b], a_tile[b + 1u], a_tile[b + 2u], a_tile[b + 3u]);
}

fn k_panel4(x: u32, r: u32) -> vec4<f32> {
    let b = K_PANEL + x * KPS + r;
    return vec4<f32>(a_tile[b], a_tile[b + 1u], a_tile[b + 2u], a_tile[b + 3u]);
}

// a_tile[i][j0..j0+3] = dots · exp(γ_i − γ_j) · λ_i[col(i, j)] where j <= i < n, else 0.
fn store_scores(t0: u32, n: u32, h: u32, i: u32, j0: u32, dots: vec4<f32>) {
    for (var s = 0u; s < 4u; s++) {
        let j = j0 + s;
        var val = 0.0;
        if (j <= i && i < n) {
            // Mask before exp: the exponent is <= 0.
            val = dots[s] * exp(gs[i] - gs[j]) * lam[lam_idx(t0 + i, h, level_col(i, j))];
        }
        a_tile[i * CHUNK + j] = val;
    }
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let c = wg.x;
    let h = wg.y;
    let t0 = c * CHUNK;
    let n = min(CHUNK, P.t - t0);
    load_gammas(t0, n, h, lid);
    workgroupBarrier();

    // Each thread: a 4x4 block of the 64x64 score tile (rows i0.., columns j0..), in the vec4
    // accumulators of a Rows16, over panels of KP dk columns staged in a_tile.
    let i0 = (lid / 16u) * 4u;
    let j0 = (lid % 16u) * 4u;
    var acc = zero16();
    let has_block = j0 <= i0 + 3u && i0 < n;
    for (var x0 = 0u; x0 < P.dk; x0 += KP) {
        workgroupBarrier();
        stage_panel(t0, n, h, x0, lid);
        workgroupBarrier();
        if (has_block) {
            for (var x = 0u; x < KP; x++) {
                acc = add_outer(acc, q_panel4(x, i0), k_panel4(x, j0));
            }
        }
    }
    workgroupBarrier();
    store_scores(t0, n, h, i0, j0, acc.a);
    store_scores(t0, n, h, i0 + 1u, j0, acc.b);
    store_scores(t0, n, h, i0 + 2u, j0, acc.c);
    store_scores(t0, n, h, i0 + 3u, j0, acc.d);
    workgroupBarrier();

    // o = A V: thread = (column d, group of 16 rows).
    let r0 = (lid / 64u) * 16u;
    if (r0 < n) {
        for (var d = lid % 64u; d < P.dv; d += 64u) {
            let rows = a_tile_times_v(t0, n, h, r0, d);
            for (var r = 0u; r < 16u; r++) {
                if (r0 + r < n) {
                    o[((t0 + r0 + r) * P.heads + h) * P.dv + d] = row_of(rows, r);
                }
            }
        }
    }
}
