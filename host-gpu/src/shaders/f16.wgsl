// IEEE half bits (low 16 bits of h) to f32, exactly (subnormals included, unlike some
// unpack2x16float implementations that may flush them).
fn f16_bits_to_f32(h: u32) -> f32 {
    let e = (h >> 10u) & 0x1fu;
    let m = h & 0x3ffu;
    var v: f32;
    if (e == 0u) {
        v = f32(m) * 5.9604645e-8; // m · 2^-24
    } else if (e == 31u) {
        v = bitcast<f32>(0x7f800000u | (m << 13u));
    } else {
        v = bitcast<f32>(((e + 112u) << 23u) | (m << 13u));
    }
    return select(v, -v, (h & 0x8000u) != 0u);
}
