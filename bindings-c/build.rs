//! Gives the shared library its soname, so programs linked against it load `libmqstore.so.0`
//! (the ABI's major version) and an installed newer 0.x replaces it in place.

fn main() {
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if target_os == "linux" {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libmqstore.so.0");
    }
}
