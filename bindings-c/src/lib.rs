//! The C API of mqstore. `include/mqstore.h` is generated from this crate by cbindgen
//! (`cbindgen.toml`); the comments on public items become the header's documentation.
//!
//! Two layers share one header: layer 1 (`client.rs`, feature `net`) is a connected client
//! with blocking calls (`mqstore_net::blocking`: the calling thread does the I/O); layer 2 (`byo.rs`, `codec.rs`, `hlc.rs`)
//! is the core's client state machine, codec and HLC with no I/O, for firmware that brings its
//! own MQTT client.
//!
//! Every entry point runs inside [`ffi`]: arguments are checked, a panic is caught and becomes
//! `MQSTORE_ERR_INTERNAL`, and a failure leaves its message in the calling thread's last
//! error. Handles are checked against the registry of live objects (`handles.rs`), so a NULL,
//! freed or wrong-kind handle is an error instead of a crash.

// The safety contract of every function (valid pointers and lengths, handles from this
// library) is the header's "Ownership" and per-function text; repeating it as a `# Safety`
// section on each of them would only make the header longer.
#![allow(clippy::missing_safety_doc)]
// C names: `mqstore_client`, `mqstore_status`, as the header spells them.
#![allow(non_camel_case_types)]

mod byo;
mod codec;
mod error;
mod handles;
mod hlc;
mod types;

#[cfg(feature = "net")]
mod client;
#[cfg(feature = "net")]
mod jobs;
#[cfg(feature = "net")]
mod shadow;

pub use byo::*;
pub use codec::*;
pub use error::*;
pub use hlc::*;
pub use types::*;

#[cfg(feature = "net")]
pub use client::*;
#[cfg(feature = "net")]
pub use jobs::*;
#[cfg(feature = "net")]
pub use shadow::*;

use std::ffi::c_char;

/// The library's version, `MAJOR.MINOR.PATCH` (a static string: do not free).
#[unsafe(no_mangle)]
pub extern "C" fn mqstore_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// Whether this build has layer 1, the connected client (`mqstore_connect` and the calls on an
/// `mqstore_client`): 1 for `libmqstore`, 0 for a build of layer 2 alone.
#[unsafe(no_mangle)]
pub extern "C" fn mqstore_has_client() -> bool {
    cfg!(feature = "net")
}
