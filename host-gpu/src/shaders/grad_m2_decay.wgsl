// Decay offsets of the inter-chunk levels, dec[m][c][h], so that every weight below is the exp
// of a sum of non-positive terms (spec §7.5):
// * reader chunk c of level m: the chunk totals Γ of the chunks between the end of its group's
//   source half and c (exclusive): H_c = exp(dec) X, so row i reads with exp(γ_i + dec);
// * source chunk c: the Γ of the chunks after c up to the end of the source half: row j enters
//   X with exp((Γ_c − γ_j) + dec);
// * 0 elsewhere. One thread per (chunk, head); y = level.

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> gam: array<f32>;
@group(0) @binding(2) var<storage, read_write> dec: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let idx = gid.x;
    if (idx >= P.nt * P.heads) {
        return;
    }
    let c = idx / P.heads;
    let h = idx % P.heads;
    let m = gid.y;
    let half = 1u << m;
    let s_end = ((c >> (m + 1u)) << (m + 1u)) + half - 1u;
    var d = 0.0;
    let role = chunk_role(m, c);
    if (role == ROLE_READER) {
        for (var cc = s_end + 1u; cc < c; cc++) {
            d += chunk_total(cc, h);
        }
    } else if (role == ROLE_SOURCE) {
        for (var cc = c + 1u; cc <= s_end; cc++) {
            d += chunk_total(cc, h);
        }
    }
    dec[dec_idx(m, c, h)] = d;
}
