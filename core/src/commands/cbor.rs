//! The CBOR (RFC 8949) that AWS IoT commands devices may send their updates in
//! (`…/response/cbor`) and get their acknowledgements in: read into JSON values (byte strings
//! become base64 text, as the JSON form of a `bin` result has it), and the flat maps of text
//! that acknowledgements are written as. Small on purpose: what updates hold, nothing more.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Number, Value};

/// How deep arrays and maps may nest (a hostile payload cannot exhaust the stack).
const MAX_DEPTH: usize = 32;

/// Reads one CBOR data item that fills `bytes`.
pub(super) fn to_json(bytes: &[u8]) -> Result<Value, String> {
    let mut reader = Reader { bytes, at: 0 };
    let value = reader.item(0)?;
    match reader.at == bytes.len() {
        true => Ok(value),
        false => Err(format!(
            "{} bytes after the CBOR item",
            bytes.len() - reader.at
        )),
    }
}

/// A CBOR map of text to text, in the given order.
pub(super) fn text_map(entries: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    head(&mut out, 5, entries.len() as u64);
    for (name, value) in entries {
        for text in [name, value] {
            head(&mut out, 3, text.len() as u64);
            out.extend_from_slice(text.as_bytes());
        }
    }
    out
}

fn head(out: &mut Vec<u8>, major: u8, n: u64) {
    let major = major << 5;
    match n {
        0..=23 => out.push(major | n as u8),
        24..=0xff => out.extend_from_slice(&[major | 24, n as u8]),
        0x100..=0xffff => {
            out.push(major | 25);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        0x1_0000..=0xffff_ffff => {
            out.push(major | 26);
            out.extend_from_slice(&(n as u32).to_be_bytes());
        }
        _ => {
            out.push(major | 27);
            out.extend_from_slice(&n.to_be_bytes());
        }
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

/// "Indefinite length" in a head's argument.
const INDEFINITE: u64 = u64::MAX;

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&end| end <= self.bytes.len())
            .ok_or("the CBOR item ends early")?;
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    /// A head: its major type, additional information, and argument.
    fn head(&mut self) -> Result<(u8, u8, u64), String> {
        let first = self.take(1)?[0];
        let (major, info) = (first >> 5, first & 0x1f);
        let argument = match info {
            0..=23 => u64::from(info),
            24 => u64::from(self.take(1)?[0]),
            25 => u64::from(u16::from_be_bytes(self.array()?)),
            26 => u64::from(u32::from_be_bytes(self.array()?)),
            27 => u64::from_be_bytes(self.array()?),
            31 if matches!(major, 2..=5 | 7) => INDEFINITE,
            _ => return Err(format!("a CBOR head with additional information {info}")),
        };
        Ok((major, info, argument))
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let bytes = self.take(N)?;
        let mut array = [0; N];
        array.copy_from_slice(bytes);
        Ok(array)
    }

    fn length(&self, n: u64) -> Result<usize, String> {
        usize::try_from(n)
            .ok()
            .filter(|&n| n <= self.bytes.len() - self.at)
            .ok_or_else(|| "a CBOR length past the end".to_owned())
    }

    /// Whether the next byte is the "break" that ends an indefinite-length item (taken).
    fn at_break(&mut self) -> Result<bool, String> {
        match self.bytes.get(self.at) {
            Some(0xff) => {
                self.at += 1;
                Ok(true)
            }
            Some(_) => Ok(false),
            None => Err("the CBOR item ends early".into()),
        }
    }

    /// A byte or text string's bytes (`major` 2 or 3), chunks of an indefinite one joined.
    fn string(&mut self, major: u8, n: u64) -> Result<Vec<u8>, String> {
        if n != INDEFINITE {
            let len = self.length(n)?;
            return Ok(self.take(len)?.to_vec());
        }
        let mut joined = Vec::new();
        while !self.at_break()? {
            match self.head()? {
                (m, _, n) if m == major && n != INDEFINITE => {
                    let len = self.length(n)?;
                    joined.extend_from_slice(self.take(len)?);
                }
                _ => return Err("a CBOR string chunk of another kind".into()),
            }
        }
        Ok(joined)
    }

    /// Whether an array or map of `n` items (or of indefinite length: until its break) has
    /// another, `left` counting the definite ones down.
    fn another(&mut self, n: u64, left: &mut u64) -> Result<bool, String> {
        if n == INDEFINITE {
            return Ok(!self.at_break()?);
        }
        let more = *left > 0;
        *left = left.saturating_sub(1);
        Ok(more)
    }

    fn item(&mut self, depth: usize) -> Result<Value, String> {
        if depth > MAX_DEPTH {
            return Err(format!("CBOR nested deeper than {MAX_DEPTH}"));
        }
        let (major, info, n) = self.head()?;
        Ok(match major {
            0 => Value::from(n),
            1 => {
                let n = i64::try_from(n).map_err(|_| "a CBOR negative integer out of range")?;
                Value::from(-1 - n)
            }
            2 => Value::String(STANDARD.encode(self.string(2, n)?)),
            3 => Value::String(
                String::from_utf8(self.string(3, n)?).map_err(|_| "CBOR text that is not UTF-8")?,
            ),
            4 => {
                let mut items = Vec::new();
                let mut left = n;
                while self.another(n, &mut left)? {
                    items.push(self.item(depth + 1)?);
                }
                Value::Array(items)
            }
            5 => {
                let mut map = Map::new();
                let mut left = n;
                while self.another(n, &mut left)? {
                    let Value::String(key) = self.item(depth + 1)? else {
                        return Err("a CBOR map key that is not text".into());
                    };
                    let value = self.item(depth + 1)?;
                    map.insert(key, value);
                }
                Value::Object(map)
            }
            6 => self.item(depth + 1)?, // a tag: its content
            _ => match (info, n) {
                (20, _) => Value::Bool(false),
                (21, _) => Value::Bool(true),
                (22 | 23, _) => Value::Null,
                (25, bits) => float(half(bits as u16))?,
                (26, bits) => float(f64::from(f32::from_bits(bits as u32)))?,
                (27, bits) => float(f64::from_bits(bits))?,
                _ => return Err(format!("an unknown CBOR simple value {n}")),
            },
        })
    }
}

fn float(f: f64) -> Result<Value, String> {
    Number::from_f64(f)
        .map(Value::Number)
        .ok_or_else(|| "a CBOR float that JSON cannot hold (NaN or infinite)".into())
}

/// An IEEE 754 half-precision float.
fn half(bits: u16) -> f64 {
    let sign = if bits & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exponent = i32::from((bits >> 10) & 0x1f);
    let fraction = f64::from(bits & 0x3ff);
    sign * match exponent {
        0 => fraction * 2f64.powi(-24),
        31 if fraction == 0.0 => f64::INFINITY,
        31 => f64::NAN,
        e => (1.0 + fraction / 1024.0) * 2f64.powi(e - 15),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc_8949_examples_read_as_json() {
        for (hex, json) in [
            ("00", "0"),
            ("1903e8", "1000"),
            ("3903e7", "-1000"),
            ("f4", "false"),
            ("f5", "true"),
            ("f6", "null"),
            ("f93c00", "1.0"),
            ("fb3ff199999999999a", "1.1"),
            ("6449455446", "\"IETF\""),
            ("4401020304", "\"AQIDBA==\""),
            ("83010203", "[1,2,3]"),
            ("a26161016162820203", "{\"a\":1,\"b\":[2,3]}"),
            ("7f657374726561646d696e67ff", "\"streaming\""),
            ("9f018202039f0405ffff", "[1,[2,3],[4,5]]"),
            ("bf6346756ef563416d7421ff", "{\"Fun\":true,\"Amt\":-2}"),
            ("c11a514b67b0", "1363896240"),
        ] {
            let bytes: Vec<u8> = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect();
            let expected: Value = serde_json::from_str(json).unwrap();
            assert_eq!(to_json(&bytes), Ok(expected), "{hex}");
        }
    }

    #[test]
    fn what_is_not_cbor_is_an_error_not_a_panic() {
        let deep = vec![0x81; 100];
        for bad in [
            &b""[..],
            &[0x18],                                                 // an argument missing
            &[0x62, b'a'],                                           // text shorter than its length
            &[0x7f, 0x61, b'a'], // indefinite text without its break
            &[0xa1, 0x01, 0x02], // a map key that is not text
            &[0x62, 0xff, 0xfe], // text that is not UTF-8
            &[0x1c],             // reserved additional information
            &[0xf9, 0x7e, 0x00], // NaN
            &[0x01, 0x02],       // two items
            &[0x5b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff], // a huge length
            &deep,
        ] {
            assert!(to_json(bad).is_err(), "{bad:02x?}");
        }
    }

    #[test]
    fn text_maps_read_back() {
        let long = "x".repeat(300);
        let written = text_map(&[("executionId", "e-1"), ("errorMessage", &long)]);
        assert_eq!(
            to_json(&written),
            Ok(serde_json::json!({"executionId": "e-1", "errorMessage": long}))
        );
    }
}
