// Training matmul with explicit strides: C[m][n] = (acc ? C[m][n] : 0) + Σ_k A(m, k) · B(k, n),
// A(m, k) = a[a_off + m·a_rs + k·a_cs], B(k, n) = b[b_off + k·b_rs + n·b_cs],
// C[m][n] = c[c_off + m·c_rs + n]. One kernel covers the three products of a linear layer:
// forward Y = X·Wᵀ, input gradient dX = dY·W, weight gradient dW += dYᵀ·X.
// Each workgroup computes a 64×64 tile of C, 16 k at a time; each of its 16×16 threads a 4×4
// block (rows ly + 16i, columns lx + 16j): common/tile64.wgsl, which precedes this file.
// Split k (weight gradients, where k is every token and C is small): workgroup z sums only
// k in [z·kz, (z+1)·kz) and writes its partial C at c_off + z·z_stride (acc = 0); a second
// kernel (train_split_sum.wgsl) adds the partials in a fixed order.
struct MatmulParams {
    m: u32,
    n: u32,
    k: u32,
    a_off: u32,
    a_rs: u32,
    a_cs: u32,
    b_off: u32,
    b_rs: u32,
    b_cs: u32,
    c_off: u32,
    c_rs: u32,
    acc: u32,
    kz: u32,
    z_stride: u32,
}

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
@group(0) @binding(3) var<uniform> p: MatmulParams;

@compute @workgroup_size(16, 16)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let row0 = wg.y * TILE;
    let col0 = wg.x * TILE;
    let k_begin = wg.z * p.kz;
    let k_end = min(p.k, k_begin + p.kz);
    var acc = zero16();
    for (var k0 = k_begin; k0 < k_end; k0 += KT) {
        for (var e = li; e < TILE * KT; e += 256u) {
            // Lanes walk k when k is the contiguous index of the operand, else the row.
            var r = e / KT;
            var kk = e % KT;
            if (p.a_rs == 1u) {
                r = e % TILE;
                kk = e / TILE;
            }
            var av = 0.0;
            if (row0 + r < p.m && k0 + kk < k_end) {
                av = a[p.a_off + (row0 + r) * p.a_rs + (k0 + kk) * p.a_cs];
            }
            row_tile[kk * PAD + r] = av;
            var cn = e / KT;
            var kb = e % KT;
            if (p.b_cs == 1u) {
                cn = e % TILE;
                kb = e / TILE;
            }
            var bv = 0.0;
            if (col0 + cn < p.n && k0 + kb < k_end) {
                bv = b[p.b_off + (k0 + kb) * p.b_rs + (col0 + cn) * p.b_cs];
            }
            col_tile[kb * PAD + cn] = bv;
        }
        workgroupBarrier();
        acc = tile_products(acc, lid.x, lid.y);
        workgroupBarrier();
    }
    let base = p.c_off + wg.z * p.z_stride;
    store_row(base, row0 + lid.y, col0 + lid.x, acc.a);
    store_row(base, row0 + lid.y + 16u, col0 + lid.x, acc.b);
    store_row(base, row0 + lid.y + 32u, col0 + lid.x, acc.c);
    store_row(base, row0 + lid.y + 48u, col0 + lid.x, acc.d);
}

fn store_row(base: u32, r: u32, col: u32, v: vec4<f32>) {
    if (r >= p.m) {
        return;
    }
    for (var j = 0u; j < 4u; j++) {
        let n = col + 16u * j;
        if (n < p.n) {
            let i = base + r * p.c_rs + n;
            if (p.acc != 0u) {
                c[i] = c[i] + v[j];
            } else {
                c[i] = v[j];
            }
        }
    }
}
