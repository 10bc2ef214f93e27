//! `mqstore._native`: the Python binding's native module. It converts types, maps errors and
//! waits; the protocol and the client are the core's (`mqstore_net::client`, `net::lease`,
//! and the session itself as `ClientCore` for programs with their own MQTT client).
//! The public, typed API is the Python package around it (`python/mqstore/`).

mod client;
mod codec;
mod commands;
mod core;
mod driven;
mod errors;
mod jobs;
mod keyspace;
mod runtime;
mod shadow;
mod types;

use pyo3::prelude::*;

#[pymodule]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add("__version__", env!("CARGO_PKG_VERSION"))?;
    module.add_class::<client::Client>()?;
    module.add_class::<core::ClientCore>()?;
    module.add_class::<client::Scan>()?;
    module.add_class::<client::Observation>()?;
    module.add_class::<client::Lease>()?;
    module.add_class::<jobs::Jobs>()?;
    module.add_class::<shadow::Shadow>()?;
    module.add_class::<commands::CommandReply>()?;
    module.add_class::<commands::CommandWatch>()?;
    module.add_class::<commands::FanOut>()?;
    module.add_class::<keyspace::KeyspaceWatch>()?;
    module.add_class::<types::Hlc>()?;
    module.add_class::<types::SetResult>()?;
    module.add_class::<types::Versioned>()?;
    module.add_class::<types::DeleteResult>()?;
    module.add_class::<types::Change>()?;
    module.add_function(wrap_pyfunction!(jobs::operator_call, module)?)?;
    #[cfg(feature = "test-hooks")]
    {
        module.add_function(wrap_pyfunction!(errors::error_examples, module)?)?;
        module.add_function(wrap_pyfunction!(errors::error_kinds, module)?)?;
        module.add_function(wrap_pyfunction!(runtime::_panicking_call, module)?)?;
    }
    module.add_function(wrap_pyfunction!(runtime::_shutdown, module)?)?;
    codec::register(module)?;
    Ok(())
}
