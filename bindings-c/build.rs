//! Gives the shared library its soname, so programs linked against it load `libmqstore.so.0`
//! (the ABI's major version) and an installed newer 0.x replaces it in place. Built without the
//! `net` feature it is the bring-your-own-MQTT layer alone, installed beside the full library
//! as `libmqstore_byo` (bindings-c/Makefile), under a soname of its own.

fn main() {
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let library = if std::env::var_os("CARGO_FEATURE_NET").is_some() {
        "mqstore"
    } else {
        "mqstore_byo"
    };
    if target_os == "linux" {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,lib{library}.so.0");
    }
}
