// γ of the chunk's rows in workgroup memory, 0 past the last token (needs the kernel's `gam`
// binding, [t][heads]). The caller puts a workgroup barrier after load_gammas.
var<workgroup> gs: array<f32, 64>;

fn load_gammas(t0: u32, n: u32, h: u32, lid: u32) {
    if (lid < CHUNK) {
        var x = 0.0;
        if (lid < n) {
            x = gam[(t0 + lid) * P.heads + h];
        }
        gs[lid] = x;
    }
}
