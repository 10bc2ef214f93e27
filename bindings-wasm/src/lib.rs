//! The WebAssembly module of mqstore's npm package: the core's codec, HLC and client state
//! machine (`ClientCore`) for JavaScript, with no I/O. The TypeScript layer of the package
//! (`js/`) owns the transport and the clock and drives the state machine, as the tokio client
//! and the C library's layer 2 do.
//!
//! Values cross as `Uint8Array` (or strings, UTF-8); requests, responses and events as plain
//! objects shaped like the shared wire vectors. Errors are JS `Error`s with a numeric `code`
//! (the stable `ClientError::code` numbers; 1 for a bad argument), which the TypeScript layer
//! turns into `MqstoreError` subclasses.

mod codec;
mod services;
mod session;

use bytes::Bytes;
use js_sys::{Object, Reflect, Uint8Array};
use mqstore_core::ServiceError;
use mqstore_core::client::ClientError;
use wasm_bindgen::prelude::*;

/// The code of a bad argument (as the C library's `MQSTORE_ERR_INVALID_ARGUMENT`).
const INVALID_ARGUMENT: u16 = 1;

/// A JS `Error` with a `code`.
fn error(code: u16, message: impl AsRef<str>) -> JsValue {
    let e = js_sys::Error::new(message.as_ref());
    let _ = Reflect::set(&e, &"code".into(), &JsValue::from(code));
    e.into()
}

fn invalid(message: impl AsRef<str>) -> JsValue {
    error(INVALID_ARGUMENT, message)
}

fn client_error(e: ClientError) -> JsValue {
    let value = error(e.code(), e.to_string());
    let (name, detail) = match &e {
        ClientError::Service(service) => ("text", service.text().to_owned()),
        ClientError::Jobs { code, .. } => ("jobsCode", code.clone()),
        ClientError::CommandFailed { id, .. }
        | ClientError::CommandRejected { id, .. }
        | ClientError::CommandTimedOut { id } => ("commandId", id.clone()),
        ClientError::PublishRefused { code } => {
            let _ = Reflect::set(&value, &"reasonCode".into(), &JsValue::from(*code));
            return value;
        }
        ClientError::Status { status, .. } => {
            let _ = Reflect::set(&value, &"status".into(), &JsValue::from(*status));
            return value;
        }
        _ => return value,
    };
    let _ = Reflect::set(&value, &name.into(), &detail.into());
    value
}

fn service_error(e: ServiceError) -> JsValue {
    let value = error(e.code(), e.text());
    let _ = Reflect::set(&value, &"text".into(), &e.text().into());
    value
}

/// Sets a property. Names are interned: a JS string made from Rust text goes through a
/// TextDecoder, which costs more than the rest of a small decode.
fn set(object: &Object, name: &str, value: impl Into<JsValue>) {
    let _ = Reflect::set(object, &wasm_bindgen::intern(name).into(), &value.into());
}

/// A short fixed string (a kind, an op) as an interned JS string.
fn word(text: &'static str) -> JsValue {
    wasm_bindgen::intern(text).into()
}

fn get(object: &JsValue, name: &str) -> JsValue {
    Reflect::get(object, &name.into()).unwrap_or(JsValue::UNDEFINED)
}

fn bytes_to_js(bytes: &[u8]) -> Uint8Array {
    Uint8Array::from(bytes)
}

/// A key or value: a `Uint8Array`, or a string (its UTF-8 bytes).
fn bytes_of(value: &JsValue, what: &str) -> Result<Bytes, JsValue> {
    if let Some(text) = value.as_string() {
        return Ok(Bytes::from(text.into_bytes()));
    }
    if let Some(array) = value.dyn_ref::<Uint8Array>() {
        return Ok(Bytes::from(array.to_vec()));
    }
    Err(invalid(format!("{what} must be a Uint8Array or a string")))
}

fn optional_bytes(value: &JsValue, what: &str) -> Result<Option<Bytes>, JsValue> {
    match value.is_undefined() || value.is_null() {
        true => Ok(None),
        false => bytes_of(value, what).map(Some),
    }
}

fn key_of(value: &JsValue, what: &str) -> Result<Bytes, JsValue> {
    let key = bytes_of(value, what)?;
    if key.is_empty() {
        return Err(invalid(format!(
            "{what} is empty: keys are at least one byte"
        )));
    }
    Ok(key)
}

fn optional_u64(value: &JsValue, what: &str) -> Result<Option<u64>, JsValue> {
    if value.is_undefined() || value.is_null() {
        return Ok(None);
    }
    match value.as_f64() {
        Some(n) if n >= 0.0 && n.fract() == 0.0 && n <= 9_007_199_254_740_991.0 => {
            Ok(Some(n as u64))
        }
        _ => Err(invalid(format!("{what} must be a whole number ≥ 0"))),
    }
}
