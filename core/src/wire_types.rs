//! The jobs and commands wire types, written once: their JSON Schema (from the serde types,
//! by `schemars`) and the TypeScript and Python types generated from it, with the doc
//! comments. A test compares the committed files with what the types give now; run it with
//! `MQSTORE_UPDATE_WIRE_TYPES=1` to write them again after changing a wire type.
//!
//! Requests are described as the service reads them (fields with a default may be left
//! out), answers as it writes them (every field it always sends is required). A type that is
//! both (a job template) is described as a request: the looser of the two.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use schemars::JsonSchema;
use schemars::generate::{SchemaGenerator, SchemaSettings};
use serde_json::{Map, Value};

use crate::commands::{Record, definitions};
use crate::jobs::wire::{ExecutionAccepted, PendingJobs, Rejected, UpdateAccepted};
use crate::jobs::{self, OperatorRequest};

/// Where the generated files go, from the workspace's root.
const SCHEMA_FILE: &str = "docs/protocol/wire.schema.json";
const TYPESCRIPT_FILE: &str = "bindings-wasm/js/wire.ts";
const PYTHON_FILE: &str = "bindings-python/python/mqstore/wire.py";

/// The definitions of every wire type, by name.
fn definitions() -> BTreeMap<String, Value> {
    fn add<T: JsonSchema>(generator: &mut SchemaGenerator) {
        generator.subschema_for::<T>();
    }
    let mut requests = SchemaSettings::draft2020_12()
        .for_deserialize()
        .into_generator();
    add::<OperatorRequest>(&mut requests);
    add::<definitions::DefinitionsRequest>(&mut requests);
    let mut answers = SchemaSettings::draft2020_12()
        .for_serialize()
        .into_generator();
    add::<jobs::JobDescription>(&mut answers);
    add::<jobs::wire::JobCreated>(&mut answers);
    add::<jobs::JobListing>(&mut answers);
    add::<jobs::ExecutionListing>(&mut answers);
    add::<jobs::ThingGroupDescription>(&mut answers);
    add::<jobs::GroupListing>(&mut answers);
    add::<jobs::TemplateListing>(&mut answers);
    add::<jobs::JobsPage>(&mut answers);
    add::<jobs::ExecutionsPage>(&mut answers);
    add::<jobs::ThingGroupsPage>(&mut answers);
    add::<jobs::ThingsPage>(&mut answers);
    add::<jobs::TemplatesPage>(&mut answers);
    add::<jobs::NamedShadowsPage>(&mut answers);
    add::<jobs::wire::JobExecution>(&mut answers);
    add::<PendingJobs>(&mut answers);
    add::<ExecutionAccepted>(&mut answers);
    add::<UpdateAccepted>(&mut answers);
    add::<Rejected>(&mut answers);
    add::<jobs::wire::Notify>(&mut answers);
    add::<jobs::wire::NotifyNext>(&mut answers);
    add::<Record>(&mut answers);
    add::<definitions::Definition>(&mut answers);
    add::<definitions::DefinitionsAnswer>(&mut answers);
    let mut all: BTreeMap<String, Value> = answers.take_definitions(true).into_iter().collect();
    // A request's reading wins: it is the looser one.
    all.extend(requests.take_definitions(true));
    all
}

fn doc(schema: &Value) -> Option<String> {
    let text = schema.get("description")?.as_str()?;
    // Rust doc links (`[`Type`]`, `[`Type::field`]`) read as code elsewhere.
    Some(text.replace("[`", "`").replace("`]", "`"))
}

fn ref_name(schema: &Value) -> Option<&str> {
    schema.get("$ref")?.as_str()?.strip_prefix("#/$defs/")
}

/// A schema's alternatives when it is a union (`oneOf`, `anyOf`, or a list of types).
fn alternatives(schema: &Value) -> Option<Vec<Value>> {
    if let Some(list) = schema.get("oneOf").or(schema.get("anyOf")) {
        return list.as_array().cloned();
    }
    if let Some(Value::Array(types)) = schema.get("type") {
        let mut one = schema.as_object().cloned().unwrap_or_default();
        return Some(
            types
                .iter()
                .map(|t| {
                    one.insert("type".into(), t.clone());
                    Value::Object(one.clone())
                })
                .collect(),
        );
    }
    None
}

fn is_null(schema: &Value) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("null")
}

/// Without its `null` alternative (an optional field is left out rather than null).
fn without_null(schema: &Value) -> Value {
    match alternatives(schema) {
        Some(alternatives) if alternatives.iter().any(is_null) => {
            let rest: Vec<Value> = alternatives.into_iter().filter(|a| !is_null(a)).collect();
            if rest.len() == 1 {
                let mut one = rest[0].clone();
                if let (Some(one), Some(text)) = (one.as_object_mut(), schema.get("description")) {
                    one.entry("description").or_insert(text.clone());
                }
                one
            } else {
                let mut union = schema.as_object().cloned().unwrap_or_default();
                union.remove("type");
                union.remove("anyOf");
                union.insert("oneOf".into(), Value::Array(rest));
                Value::Object(union)
            }
        }
        _ => schema.clone(),
    }
}

/// An object's fields: name, schema, required.
fn fields(schema: &Value) -> Vec<(&str, &Value, bool)> {
    let required: BTreeSet<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let properties = schema.get("properties").and_then(Value::as_object);
    properties
        .into_iter()
        .flatten()
        .map(|(name, field)| (name.as_str(), field, required.contains(name.as_str())))
        .collect()
}

fn has_fields(schema: &Value) -> bool {
    schema.get("properties").is_some()
}

fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

/// A name for the `index`th alternative of union `parent`: by its tag's value when it has one.
fn variant_name(parent: &str, variant: &Value, index: usize) -> String {
    let tag = fields(variant)
        .into_iter()
        .find_map(|(_, field, _)| field.get("const").and_then(Value::as_str));
    match tag {
        Some(tag) => format!("{parent}{}", capitalized(tag)),
        None => format!("{parent}{index}"),
    }
}

// ---- TypeScript ----

fn ts_doc(out: &mut String, indent: &str, text: Option<String>) {
    let Some(text) = text else { return };
    let text = text.replace("*/", "*\\/");
    let lines: Vec<&str> = text.lines().collect();
    if lines.len() == 1 {
        let _ = writeln!(out, "{indent}/** {} */", lines[0]);
    } else {
        let _ = writeln!(out, "{indent}/**");
        for line in lines {
            let _ = writeln!(out, "{indent} * {line}").map(|_| ());
        }
        let _ = writeln!(out, "{indent} */");
    }
}

fn ts_type(schema: &Value, indent: &str) -> String {
    if let Some(name) = ref_name(schema) {
        return match has_fields(schema) {
            true => format!("{name} & {}", ts_object(schema, indent)),
            false => name.to_string(),
        };
    }
    if let Some(value) = schema.get("const") {
        return value.to_string();
    }
    if let Some(Value::Array(values)) = schema.get("enum") {
        return values
            .iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join(" | ");
    }
    if let Some(alternatives) = alternatives(schema) {
        return alternatives
            .iter()
            .map(|a| ts_type(a, indent))
            .collect::<Vec<_>>()
            .join(" | ");
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("string") => "string".into(),
        Some("integer" | "number") => "number".into(),
        Some("boolean") => "boolean".into(),
        Some("null") => "null".into(),
        Some("array") => {
            let items = ts_type(schema.get("items").unwrap_or(&Value::Bool(true)), indent);
            match items.contains(' ') {
                true => format!("({items})[]"),
                false => format!("{items}[]"),
            }
        }
        Some("object") if has_fields(schema) => ts_object(schema, indent),
        // Any JSON object (a job document): `object`, which a caller's own interface fits.
        Some("object") => match schema.get("additionalProperties") {
            None | Some(Value::Bool(true)) => "object".into(),
            Some(values) => format!("Record<string, {}>", ts_type(values, indent)),
        },
        None if schema
            .as_object()
            .is_none_or(|o| o.keys().all(|k| k == "description" || k == "default")) =>
        {
            "unknown".into()
        }
        _ => panic!("a schema the TypeScript generator does not know: {schema}"),
    }
}

fn ts_object(schema: &Value, indent: &str) -> String {
    let inner = format!("{indent}  ");
    let mut out = String::from("{\n");
    for (name, field, required) in fields(schema) {
        ts_doc(&mut out, &inner, doc(field));
        let (mark, field) = match required {
            true => ("", field.clone()),
            false => ("?", without_null(field)),
        };
        let _ = writeln!(out, "{inner}{name}{mark}: {};", ts_type(&field, &inner));
    }
    out.push_str(indent);
    out.push('}');
    out
}

fn typescript(definitions: &BTreeMap<String, Value>) -> String {
    let mut out = String::from(
        "// The jobs and commands wire types, generated from the Rust types in mqstore-core\n\
         // (core/src/wire_types.rs): do not edit. Change the Rust type and run\n\
         // `MQSTORE_UPDATE_WIRE_TYPES=1 cargo test -p mqstore-core --lib wire_types`.\n",
    );
    for (name, schema) in definitions {
        out.push('\n');
        ts_doc(&mut out, "", doc(schema));
        if has_fields(schema) && ref_name(schema).is_none() {
            let _ = writeln!(out, "export interface {name} {}", ts_object(schema, ""));
        } else if let Some(alternatives) = alternatives(schema).filter(|a| a.len() > 1) {
            let _ = writeln!(out, "export type {name} =");
            for alternative in &alternatives {
                ts_doc(&mut out, "  ", doc(alternative));
                let _ = writeln!(out, "  | {}", ts_type(alternative, "  "));
            }
            out.pop();
            out.push_str(";\n");
        } else {
            let _ = writeln!(out, "export type {name} = {};", ts_type(schema, ""));
        }
    }
    out
}

// ---- Python ----

/// Python's TypedDicts: each object (and each object alternative of a union) a class.
struct Python {
    classes: String,
    /// Every name it defines (its `__all__`).
    names: Vec<String>,
}

fn py_doc(out: &mut String, indent: &str, text: Option<String>) {
    let Some(text) = text else { return };
    let text = text.replace('\\', "\\\\").replace("\"\"\"", "\\\"\\\"\\\"");
    match text.contains('\n') {
        false => {
            let _ = writeln!(out, "{indent}\"\"\"{text}\"\"\"");
        }
        true => {
            let _ = writeln!(
                out,
                "{indent}\"\"\"{}",
                text.lines().next().unwrap_or_default()
            );
            for line in text.lines().skip(1) {
                let _ = writeln!(out, "{indent}{line}");
            }
            let _ = writeln!(out, "{indent}\"\"\"");
        }
    }
}

/// The values of a schema that is one of a few JSON values (`const`, `enum`, or a union of
/// them), as Python literals.
fn literals(schema: &Value) -> Option<Vec<String>> {
    if let Some(value) = schema.get("const") {
        return Some(vec![value.to_string()]);
    }
    if let Some(Value::Array(values)) = schema.get("enum") {
        return Some(values.iter().map(Value::to_string).collect());
    }
    alternatives(schema)?
        .iter()
        .map(|a| a.get("const").map(Value::to_string))
        .collect()
}

/// `open` + `items` + `close` as ruff formats it: on one line when it fits in 100 columns,
/// else the items on one indented line, else one per line with a trailing comma.
fn wrapped(open: &str, items: &[String], close: &str) -> String {
    let one_line = format!("{open}{}{close}", items.join(", "));
    if one_line.len() <= 100 && !one_line.contains('\n') {
        return one_line;
    }
    let inner = items.join(", ");
    if inner.len() + 4 <= 100 && !inner.contains('\n') {
        return format!("{open}\n    {inner}\n{close}");
    }
    let lines: Vec<String> = items
        .iter()
        .map(|i| format!("    {},\n", i.replace('\n', "\n    ")))
        .collect();
    format!("{open}\n{}{close}", lines.concat())
}

impl Python {
    /// A type expression; objects inside become classes named from `context`.
    fn type_of(&mut self, schema: &Value, context: &str) -> String {
        if let Some(name) = ref_name(schema) {
            assert!(
                !has_fields(schema),
                "{context}: a reference with fields inside a field"
            );
            return name.to_string();
        }
        if let Some(values) = literals(schema) {
            return wrapped("Literal[", &values, "]");
        }
        if let Some(alternatives) = alternatives(schema) {
            let types: Vec<String> = alternatives
                .iter()
                .enumerate()
                .map(|(i, a)| self.type_of(a, &variant_name(context, a, i)))
                .collect();
            return wrapped("Union[", &types, "]");
        }
        match schema.get("type").and_then(Value::as_str) {
            Some("string") => "str".into(),
            Some("integer") => "int".into(),
            Some("number") => "float".into(),
            Some("boolean") => "bool".into(),
            Some("null") => "None".into(),
            Some("array") => {
                let items = schema.get("items").unwrap_or(&Value::Bool(true));
                format!("list[{}]", self.type_of(items, context))
            }
            Some("object") if has_fields(schema) => {
                self.class(context, schema, None);
                context.to_string()
            }
            Some("object") => {
                let values = schema
                    .get("additionalProperties")
                    .unwrap_or(&Value::Bool(true));
                format!("dict[str, {}]", self.type_of(values, context))
            }
            None if schema
                .as_object()
                .is_none_or(|o| o.keys().all(|k| k == "description" || k == "default")) =>
            {
                "Any".into()
            }
            _ => panic!("a schema the Python generator does not know: {schema}"),
        }
    }

    /// A TypedDict (on 3.9: required fields in a base class, the others with `total=False`).
    fn class(&mut self, name: &str, schema: &Value, base: Option<&str>) {
        let mut required = Vec::new();
        let mut optional = Vec::new();
        for (field, field_schema, is_required) in fields(schema) {
            assert!(
                ![
                    "from", "in", "is", "class", "def", "lambda", "global", "async"
                ]
                .contains(&field),
                "{name}.{field}: a Python keyword"
            );
            let context = format!("{name}{}", capitalized(field));
            let (list, field_schema) = match is_required {
                true => (&mut required, field_schema.clone()),
                false => (&mut optional, without_null(field_schema)),
            };
            let annotation = self.type_of(&field_schema, &context);
            list.push((field.to_string(), annotation, doc(&field_schema)));
        }
        self.names.push(name.to_string());
        let base = base.unwrap_or("TypedDict");
        let mut out = String::new();
        let body = |out: &mut String, fields: &[(String, String, Option<String>)]| {
            for (field, annotation, text) in fields {
                let _ = writeln!(out, "    {field}: {annotation}");
                py_doc(out, "    ", text.clone());
            }
        };
        let head = match (required.is_empty(), optional.is_empty()) {
            (false, false) => {
                let _ = writeln!(out, "\n\nclass _{name}Required({base}):");
                body(&mut out, &required);
                let args = [format!("_{name}Required"), "total=False".into()];
                wrapped(&format!("class {name}("), &args, "):")
            }
            (false, true) => format!("class {name}({base}):"),
            (true, _) => wrapped(
                &format!("class {name}("),
                &[base.into(), "total=False".into()],
                "):",
            ),
        };
        let _ = writeln!(out, "\n\n{head}");
        if doc(schema).is_some() {
            py_doc(&mut out, "    ", doc(schema));
            out.push('\n');
        }
        let fields = match optional.is_empty() {
            true => &required,
            false => &optional,
        };
        body(&mut out, fields);
        if fields.is_empty() && doc(schema).is_none() {
            out.push_str("    pass\n");
        }
        self.classes.push_str(&out);
    }

    fn definition(&mut self, name: &str, schema: &Value) {
        if has_fields(schema) && ref_name(schema).is_none() {
            return self.class(name, schema, None);
        }
        if let Some(alternatives) = alternatives(schema).filter(|a| a.len() > 1) {
            let objects = alternatives
                .iter()
                .all(|a| has_fields(a) || ref_name(a).is_some());
            if objects {
                let mut names = Vec::new();
                for (i, alternative) in alternatives.iter().enumerate() {
                    let variant = variant_name(name, alternative, i);
                    match ref_name(alternative) {
                        Some(base) => self.class(&variant, alternative, Some(base)),
                        None => self.class(&variant, alternative, None),
                    }
                    names.push(format!("\"{variant}\""));
                }
                self.names.push(name.to_string());
                let union = wrapped(&format!("{name} = Union["), &names, "]");
                let _ = writeln!(self.classes, "\n\n{union}");
                py_doc(&mut self.classes, "", doc(schema));
                return;
            }
        }
        let expression = match literals(schema) {
            Some(values) => wrapped(&format!("{name} = Literal["), &values, "]"),
            None => format!("{name} = {}", self.type_of(schema, name)),
        };
        self.names.push(name.to_string());
        let _ = writeln!(self.classes, "\n\n{expression}");
        py_doc(&mut self.classes, "", doc(schema));
    }
}

fn python(definitions: &BTreeMap<String, Value>) -> String {
    let mut python = Python {
        classes: String::new(),
        names: Vec::new(),
    };
    // A class is defined before the classes built on it (a tagged variant on its payload's).
    let bases: BTreeSet<&str> = definitions
        .values()
        .filter_map(alternatives)
        .flatten()
        .filter(has_fields)
        .filter_map(|a| ref_name(&a).map(str::to_string))
        .filter_map(|name| definitions.get_key_value(&name).map(|(k, _)| k.as_str()))
        .collect();
    let (first, then): (Vec<_>, Vec<_>) = definitions
        .iter()
        .partition(|(name, _)| bases.contains(name.as_str()));
    for (name, schema) in first.into_iter().chain(then) {
        python.definition(name, schema);
    }
    let mut names = python.names;
    names.sort_unstable();
    names.dedup();
    let mut out = String::from(
        "\"\"\"The jobs and commands wire types, as TypedDicts (what the calls take and answer).\n\n\
         Generated from the Rust types in mqstore-core (core/src/wire_types.rs): do not edit.\n\
         Change the Rust type and run\n\
         ``MQSTORE_UPDATE_WIRE_TYPES=1 cargo test -p mqstore-core --lib wire_types``.\n\
         \"\"\"\n\n\
         # The docs are the Rust doc comments, en dashes and all.\n\
         # ruff: noqa: E501, RUF001\n\n\
         from __future__ import annotations\n\n\
         from typing import Any, Literal, TypedDict, Union\n\n__all__ = [\n",
    );
    for name in &names {
        let _ = writeln!(out, "    \"{name}\",");
    }
    out.push_str("]\n");
    out.push_str(&python.classes);
    out
}

fn schema_file(definitions: &BTreeMap<String, Value>) -> String {
    let mut schema = Map::new();
    schema.insert(
        "$schema".into(),
        "https://json-schema.org/draft/2020-12/schema".into(),
    );
    schema.insert(
        "$comment".into(),
        "mqstore's jobs and commands wire types, generated from core/src/wire_types.rs: do not edit"
            .into(),
    );
    schema.insert(
        "$defs".into(),
        Value::Object(definitions.clone().into_iter().collect()),
    );
    serde_json::to_string_pretty(&schema).expect("a schema serializes") + "\n"
}

#[test]
fn generated_wire_types_are_current() {
    let definitions = definitions();
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let update = std::env::var_os("MQSTORE_UPDATE_WIRE_TYPES").is_some();
    let mut stale = Vec::new();
    for (file, text) in [
        (SCHEMA_FILE, schema_file(&definitions)),
        (TYPESCRIPT_FILE, typescript(&definitions)),
        (PYTHON_FILE, python(&definitions)),
    ] {
        let path = format!("{root}/{file}");
        if update {
            std::fs::write(&path, &text).expect("writing a generated file");
        } else if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
            stale.push(file);
        }
    }
    assert!(
        stale.is_empty(),
        "{stale:?} no longer match the Rust wire types: run \
         `MQSTORE_UPDATE_WIRE_TYPES=1 cargo test -p mqstore-core --lib wire_types` and commit them"
    );
}
