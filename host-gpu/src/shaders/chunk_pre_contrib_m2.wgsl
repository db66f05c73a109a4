// Precomputed strategy, step 1 (Mamba-2): every source chunk's contribution to the inter-chunk
// states, xs[c][h] = K̃_cᵀ V_c with K̃_c[j] = e^{Γ_c − γ_j} k_j (decayed to the end of chunk c),
// for c < NT − 1. One workgroup per (64 × 64 tile of dk × dv, chunk, head); each thread owns a
// 4 × 4 block of the tile; the 64-deep product runs over the chunk's rows in steps of DEPTH.

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> k: array<f32>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
@group(0) @binding(3) var<storage, read> gam: array<f32>;
@group(0) @binding(4) var<storage, read_write> xs: array<f32>;

const TILE: u32 = 64u;
const DEPTH: u32 = 16u;

// vec4 elements so that the inner product reads four values per load.
var<workgroup> ks: array<vec4<f32>, 256>; // [DEPTH][TILE / 4]: K̃ rows of this step, dk columns of the tile
var<workgroup> vs: array<vec4<f32>, 256>; // [DEPTH][TILE / 4]: V rows of this step, dv columns of the tile
var<workgroup> fk: array<f32, 64>;   // e^{Γ − γ_j}

fn store_row(base: u32, kk: u32, d0: u32, a: vec4<f32>) {
    if (kk >= P.dk) {
        return;
    }
    for (var e = 0u; e < 4u; e++) {
        if (d0 + e < P.dv) {
            xs[base + kk * P.dv + d0 + e] = a[e];
        }
    }
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let n_kb = (P.dk + TILE - 1u) / TILE;
    let kb = wg.x % n_kb;
    let vb = wg.x / n_kb;
    let c = wg.y;
    let h = wg.z;
    let t0 = c * CHUNK;
    let tx = lid % 16u; // columns vb·64 + 4 tx ..
    let ty = lid / 16u; // rows kb·64 + 4 ty ..
    if (lid < CHUNK) {
        let g_last = gam[(t0 + CHUNK - 1u) * P.heads + h];
        fk[lid] = exp(g_last - gam[(t0 + lid) * P.heads + h]);
    }
    workgroupBarrier();
    var acc = zero16();
    for (var j0 = 0u; j0 < CHUNK; j0 += DEPTH) {
        for (var e = lid; e < DEPTH * TILE; e += PWG) {
            let jj = e / TILE;
            let x = e % TILE;
            let t = t0 + j0 + jj;
            let kk = kb * TILE + x;
            var kv = 0.0;
            if (kk < P.dk) {
                kv = k[qk_row(t, h) + kk] * fk[j0 + jj];
            }
            ks[e / 4u][e % 4u] = kv;
            let d = vb * TILE + x;
            var vv = 0.0;
            if (d < P.dv) {
                vv = v[(t * P.heads + h) * P.dv + d];
            }
            vs[e / 4u][e % 4u] = vv;
        }
        workgroupBarrier();
        for (var jj = 0u; jj < DEPTH; jj++) {
            let kr = ks[jj * (TILE / 4u) + ty];
            let vr = vs[jj * (TILE / 4u) + tx];
            acc = add_outer(acc, kr, vr);
        }
        workgroupBarrier();
    }
    let base = (c * P.heads + h) * P.dk * P.dv;
    let k0 = kb * TILE + 4u * ty;
    let d0 = vb * TILE + 4u * tx;
    store_row(base, k0, d0, acc.a);
    store_row(base, k0 + 1u, d0, acc.b);
    store_row(base, k0 + 2u, d0, acc.c);
    store_row(base, k0 + 3u, d0, acc.d);
}
