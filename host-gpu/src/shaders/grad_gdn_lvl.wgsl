// GDN backward, step 4: per (chunk, block of LB dk columns, head), the gradients of the chunk's
// inputs to the level scans, summed over all chunk levels m inside the workgroup (no atomics).
// With H = H_c, D = dL/dH_{c+1} (stored by the scans), σ / ρ = source / reader flags, and the
// chunk products X = σ U − W̃ H (grad_gdn_hscan) and dX = K̃ D (grad_gdn_dhscan):
//   dq̃_i += ρ λ_i[ℓ] H dO_i      dλ_i[ℓ] = ρ q̃_iᵀ H dO_i     (ℓ = c0 + 1 + m)
//   dK̃ += X Dᵀ    dU += σ dX    dW̃ −= dX Hᵀ    dΓ += e^Γ ⟨D, H⟩
// The C × KB outputs are workgroup-memory tiled products over dv (PW columns of dv staged at a
// time; thread = two dk columns × 8 consecutive rows). Row sums over dk (dλ, dγ) are partial per
// dk block: dλ partials go to dlp (summed by grad_gdn_fin), the dγ partials
// dγ_i = dq̃_i·q̃_i + dW̃_i·W̃_i − dK̃_i·K̃_i (+ the block's part of dΓ on the last row) and
// kd_i = dK̃_i·K̃_i to gpack slots g_dgam(b) (summed by grad_gdn_intra). dU: block 0 only.

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> fpack: array<f32>;
@group(0) @binding(2) var<storage, read> gam: array<f32>;
@group(0) @binding(3) var<storage, read> lam: array<f32>;
@group(0) @binding(4) var<storage, read> dout: array<f32>;
@group(0) @binding(5) var<storage, read> hs: array<f32>;
@group(0) @binding(6) var<storage, read> dhs: array<f32>;
@group(0) @binding(7) var<storage, read_write> dlp: array<f32>;
@group(0) @binding(8) var<storage, read_write> gpack: array<f32>;
@group(0) @binding(9) var<storage, read> xs: array<f32>;
@group(0) @binding(10) var<storage, read> dxs: array<f32>;

const PW: u32 = 4u;   // dv columns per staged panel
const RT: u32 = 8u;   // rows per thread (two vec4)
const HB: u32 = 32u;  // column pitch of a thread's two columns (LB / 2)
var<workgroup> sh: array<f32, 256>;        // H [PW][LB]
var<workgroup> sd: array<f32, 256>;        // D [PW][LB]
var<workgroup> sx: array<vec4<f32>, 64>;   // X [PW][C / 4]
var<workgroup> sdx: array<vec4<f32>, 64>;  // dX [PW][C / 4]
var<workgroup> so: array<vec4<f32>, 64>;   // dO [PW][C / 4]
var<workgroup> pan: array<f32, 2048>;      // row reductions: [C][HB] products
var<workgroup> red: array<f32, 256>;

fn pick(a: vec4<f32>, b: vec4<f32>, s: u32) -> f32 {
    if (s < 4u) {
        return a[s];
    }
    return b[s - 4u];
}

// Sums pan's [C][HB] products per row (rows < n; threads < n), between two barriers.
fn row_sum(lid: u32) -> f32 {
    var sum = 0.0;
    for (var j = 0u; j < HB; j++) {
        sum += pan[lid * HB + j];
    }
    return sum;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let nlb = n_lb();
    let c = wg.x / nlb;
    let kb = wg.x % nlb;
    let k0 = kb * LB;
    let h = P.head0 + wg.y;
    let t0 = c * CHUNK;
    let n = chunk_rows(c);
    let dk = P.dk;
    let dv = P.dv;
    let eg = exp(gam[(t0 + n - 1u) * P.heads + h]);
    // This thread: dk columns kx0 = k0 + kc and kx1 = kx0 + HB, rows r0 .. r0 + RT (vec4 rq,
    // rq + 1 of a panel row).
    let kc = lid % HB;
    let r0 = (lid / HB) * RT;
    let rq = r0 / 4u;
    let kx0 = k0 + kc;
    let kx1 = kx0 + HB;

    // Accumulators [column][rows 0-3, 4-7].
    var aq00 = vec4<f32>(0.0);
    var aq01 = vec4<f32>(0.0);
    var aq10 = vec4<f32>(0.0);
    var aq11 = vec4<f32>(0.0);
    var ak00 = vec4<f32>(0.0);
    var ak01 = vec4<f32>(0.0);
    var ak10 = vec4<f32>(0.0);
    var ak11 = vec4<f32>(0.0);
    var aw00 = vec4<f32>(0.0);
    var aw01 = vec4<f32>(0.0);
    var aw10 = vec4<f32>(0.0);
    var aw11 = vec4<f32>(0.0);
    var gacc = 0.0;
    for (var m = 0u; m < P.n_scans; m++) {
        let rd = reads(c, m);
        let has_d = !(group_last(c, m) || c + 1u == P.nt);
        if (!rd && !has_d) {
            continue;
        }
        let sb = state_at(m, c, h);
        let xb = xs_at(m, c, h);
        // H = 0 entering the first chunk of a group of 2^(m+1): no dX Hᵀ.
        let h_zero = (c & ((2u << m) - 1u)) == 0u;
        var y00 = vec4<f32>(0.0);
        var y01 = vec4<f32>(0.0);
        var y10 = vec4<f32>(0.0);
        var y11 = vec4<f32>(0.0);
        for (var d0 = 0u; d0 < dv; d0 += PW) {
            workgroupBarrier();
            {
                // H, D (consecutive threads: consecutive d of one state row).
                let p = lid % PW;
                let kl = lid / PW;
                let kk = k0 + kl;
                let d = d0 + p;
                var hv = 0.0;
                var dd = 0.0;
                if (kk < dk && d < dv) {
                    hv = hs[sb + kk * dv + d];
                    if (has_d) {
                        dd = dhs[sb + kk * dv + d];
                    }
                }
                sh[p * LB + kl] = hv;
                sd[p * LB + kl] = dd;
            }
            {
                // X, dX, dO: row i, column p.
                let i = lid / PW;
                let p = lid % PW;
                let d = d0 + p;
                var x = 0.0;
                var dx = 0.0;
                var o = 0.0;
                if (i < n && d < dv) {
                    if (has_d) {
                        x = xs[xb + i * dv + d];
                        dx = dxs[xb + i * dv + d];
                    }
                    if (rd) {
                        o = dout[((t0 + i) * P.heads + h) * dv + d];
                    }
                }
                let a = p * (CHUNK / 4u) + i / 4u;
                sx[a][i % 4u] = x;
                sdx[a][i % 4u] = dx;
                so[a][i % 4u] = o;
            }
            workgroupBarrier();
            if (has_d) {
                gacc += sh[lid] * sd[lid];
                for (var p = 0u; p < PW; p++) {
                    let d0v = sd[p * LB + kc];
                    let d1v = sd[p * LB + HB + kc];
                    let a = p * (CHUNK / 4u) + rq;
                    let x0 = sx[a];
                    let x1 = sx[a + 1u];
                    ak00 += x0 * d0v;
                    ak01 += x1 * d0v;
                    ak10 += x0 * d1v;
                    ak11 += x1 * d1v;
                }
                if (!h_zero) {
                    for (var p = 0u; p < PW; p++) {
                        let h0v = sh[p * LB + kc];
                        let h1v = sh[p * LB + HB + kc];
                        let a = p * (CHUNK / 4u) + rq;
                        let x0 = sdx[a];
                        let x1 = sdx[a + 1u];
                        aw00 -= x0 * h0v;
                        aw01 -= x1 * h0v;
                        aw10 -= x0 * h1v;
                        aw11 -= x1 * h1v;
                    }
                }
            }
            if (rd) {
                for (var p = 0u; p < PW; p++) {
                    let h0v = sh[p * LB + kc];
                    let h1v = sh[p * LB + HB + kc];
                    let a = p * (CHUNK / 4u) + rq;
                    let o0 = so[a];
                    let o1 = so[a + 1u];
                    y00 += o0 * h0v;
                    y01 += o1 * h0v;
                    y10 += o0 * h1v;
                    y11 += o1 * h1v;
                }
            }
        }
        if (rd) {
            // dq̃ and the products q̃ ⊙ (H dO) for the dλ row sums.
            let col = C0P1 + m;
            var lv0 = vec4<f32>(0.0);
            var lv1 = vec4<f32>(0.0);
            for (var s = 0u; s < RT; s++) {
                let i = r0 + s;
                var q0 = 0.0;
                var q1 = 0.0;
                var l = 0.0;
                if (i < n) {
                    let t = t0 + i;
                    l = lam[lam_idx(t, h, col)];
                    if (kx0 < dk) {
                        q0 = fpack[frow(t, h) + kx0];
                    }
                    if (kx1 < dk) {
                        q1 = fpack[frow(t, h) + kx1];
                    }
                }
                if (s < 4u) {
                    lv0[s] = l;
                } else {
                    lv1[s - 4u] = l;
                }
                pan[i * HB + kc] = q0 * pick(y00, y01, s) + q1 * pick(y10, y11, s);
            }
            aq00 += lv0 * y00;
            aq01 += lv1 * y01;
            aq10 += lv0 * y10;
            aq11 += lv1 * y11;
            workgroupBarrier();
            if (lid < n) {
                dlp[dlp_idx(t0 + lid, h, m, kb)] = row_sum(lid);
            }
        }
    }

    // Outputs of this block's columns, and the row products for the dγ partials.
    var pa: array<f32, 8>;
    var pk: array<f32, 8>;
    for (var s = 0u; s < RT; s++) {
        let i = r0 + s;
        if (i < n) {
            let t = t0 + i;
            let f = frow(t, h);
            let g = grow(t, h);
            if (kx0 < dk) {
                let vq = pick(aq00, aq01, s);
                let vk = pick(ak00, ak01, s);
                let vw = pick(aw00, aw01, s);
                gpack[g + kx0] = vq;
                gpack[g + dk + kx0] = vk;
                gpack[g + 2u * dk + kx0] = vw;
                pa[s] = vq * fpack[f + kx0] + vw * fpack[f + 2u * dk + kx0];
                pk[s] = vk * fpack[f + dk + kx0];
            }
            if (kx1 < dk) {
                let vq = pick(aq10, aq11, s);
                let vk = pick(ak10, ak11, s);
                let vw = pick(aw10, aw11, s);
                gpack[g + kx1] = vq;
                gpack[g + dk + kx1] = vk;
                gpack[g + 2u * dk + kx1] = vw;
                pa[s] += vq * fpack[f + kx1] + vw * fpack[f + 2u * dk + kx1];
                pk[s] += vk * fpack[f + dk + kx1];
            }
        }
    }
    red[lid] = gacc;
    workgroupBarrier();
    for (var w = 128u; w > 0u; w >>= 1u) {
        if (lid < w) {
            red[lid] += red[lid + w];
        }
        workgroupBarrier();
    }
    // Row sums over the block's columns: kd first, then a (pan holds one [C][HB] at a time).
    for (var s = 0u; s < RT; s++) {
        pan[(r0 + s) * HB + kc] = pk[s];
    }
    workgroupBarrier();
    var kd = 0.0;
    if (lid < n) {
        kd = row_sum(lid);
    }
    workgroupBarrier();
    for (var s = 0u; s < RT; s++) {
        pan[(r0 + s) * HB + kc] = pa[s];
    }
    workgroupBarrier();
    if (lid < n) {
        var dg = row_sum(lid) - kd;
        if (lid + 1u == n) {
            dg += eg * red[0];
        }
        let g = grow(t0 + lid, h);
        gpack[g + g_dgam(kb)] = dg;
        gpack[g + g_dgam(kb) + 1u] = kd;
    }

    // dU = Σ_m σ dX (block 0 only; dX is 0 where D is).
    if (kb == 0u) {
        for (var e = lid; e < n * dv; e += 256u) {
            let i = e / dv;
            let d = e % dv;
            var u = 0.0;
            for (var m = 0u; m < P.n_scans; m++) {
                let has_d = !(group_last(c, m) || c + 1u == P.nt);
                if (!reads(c, m) && has_d) {
                    u += dxs[xs_at(m, c, h) + i * dv + d];
                }
            }
            gpack[grow(t0 + i, h) + 3u * dk + d] = u;
        }
    }
}
