//! How a trace's expectation is compared with what came out: shared by the session traces
//! (`conformance.rs`) and the server traces (`server_traces.rs`).

use serde_json::Value;

/// Whether `actual` has every field `expected` states, with equal values (objects compared
/// field by field and lists item by item, recursively; anything else exactly).
pub fn matches(expected: &Value, actual: &Value) -> bool {
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => e
            .iter()
            .all(|(k, v)| a.get(k).is_some_and(|actual| matches(v, actual))),
        (Value::Array(e), Value::Array(a)) => {
            e.len() == a.len() && e.iter().zip(a).all(|(e, a)| matches(e, a))
        }
        _ => expected == actual,
    }
}
