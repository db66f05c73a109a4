//! Link scripts of the image: cortex-m-rt's `link.x` (which includes the board's `memory.x`,
//! found through loglinear-firmware's build script) and defmt's `defmt.x`.
fn main() {
    println!("cargo:rustc-link-arg-bins=--nmagic");
    println!("cargo:rustc-link-arg-bins=-Tlink.x");
    println!("cargo:rustc-link-arg-bins=-Tdefmt.x");
}
