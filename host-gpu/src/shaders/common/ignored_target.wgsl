// A target the loss skips (loss 0, no gradient, not scored); `IGNORED_TARGET` on the Rust side
// (train/mod.rs).
const IGNORED: u32 = 0xFFFFFFFFu;
