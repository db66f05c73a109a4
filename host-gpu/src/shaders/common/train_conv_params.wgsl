// The uniform block of train_conv.wgsl, train_conv_bwd.wgsl and train_conv_bwd_w.wgsl (one
// layout).
struct ConvParams {
    rows: u32,
    batch: u32,
    stride: u32,
    c0: u32,
    channels: u32,
    width: u32,
}
