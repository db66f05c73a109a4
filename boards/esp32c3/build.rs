//! Link scripts of the image: esp-hal's `linkall.x` (the ESP32-C3's memory map and start-up,
//! with the flash segments that the bootloader maps) and defmt's `defmt.x`.
fn main() {
    println!("cargo:rustc-link-arg-bins=-Tlinkall.x");
    println!("cargo:rustc-link-arg-bins=-Tdefmt.x");
}
