//! The RESP3 subset the state store speaks: a strict reader over `Bytes` and the writers.
//!
//! The reader never copies: every bulk string it returns is a slice of the input. Lengths are
//! authoritative, numbers must be plain decimal that fit, and nothing may follow the message.

use bytes::{BufMut, Bytes};

use super::{Bulk, DecodeError};

const CRLF: &[u8] = b"\r\n";

pub(crate) struct Reader<'a> {
    input: &'a Bytes,
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(input: &'a Bytes) -> Self {
        Self { input, pos: 0 }
    }

    fn fail(&self, reason: &'static str) -> DecodeError {
        DecodeError {
            reason,
            offset: self.pos,
        }
    }

    pub(crate) fn remaining(&self) -> usize {
        self.input.len() - self.pos
    }

    /// The type byte of the next item, without consuming it.
    pub(crate) fn peek(&self) -> Option<u8> {
        self.input.get(self.pos).copied()
    }

    /// Reads `{marker}{line}\r\n` and returns the line.
    fn line(&mut self, marker: u8) -> Result<&'a [u8], DecodeError> {
        let input: &'a [u8] = self.input;
        if input.get(self.pos) != Some(&marker) {
            return Err(self.fail("unexpected type marker"));
        }
        let start = self.pos + 1;
        let Some(cr) = input[start..].iter().position(|&b| b == b'\r') else {
            return Err(self.fail("line without CRLF"));
        };
        let end = start + cr;
        if input.get(end + 1) != Some(&b'\n') {
            return Err(self.fail("CR without LF"));
        }
        self.pos = end + 2;
        Ok(&input[start..end])
    }

    /// Reads a signed decimal line (`:…`, `$…`, `*…`).
    fn number(&mut self, marker: u8) -> Result<i64, DecodeError> {
        let at = self.pos;
        let line = self.line(marker)?;
        parse_i64(line).ok_or(DecodeError {
            reason: "not a decimal number that fits in 64 bits",
            offset: at,
        })
    }

    /// Reads a length (`*n` or `$n`), which must be ≥ 0.
    fn length(&mut self, marker: u8) -> Result<usize, DecodeError> {
        let at = self.pos;
        match self.number(marker)? {
            n if n < 0 => Err(DecodeError {
                reason: "negative length",
                offset: at,
            }),
            n => usize::try_from(n).map_err(|_| DecodeError {
                reason: "length too large",
                offset: at,
            }),
        }
    }

    /// Reads an array header. The count is checked against the bytes left, so a hostile
    /// count can never make a caller reserve memory it will not fill.
    pub(crate) fn array(&mut self) -> Result<usize, DecodeError> {
        let at = self.pos;
        let n = self.length(b'*')?;
        // The smallest item (`$0\r\n\r\n`, `:0\r\n`, `*0\r\n`) takes 4 bytes.
        if n > self.remaining() / 4 {
            return Err(DecodeError {
                reason: "array longer than the input",
                offset: at,
            });
        }
        Ok(n)
    }

    pub(crate) fn integer(&mut self) -> Result<i64, DecodeError> {
        self.number(b':')
    }

    /// Reads `$n\r\n{n bytes}\r\n`, or `$-1\r\n` as `None` when `nullable`.
    fn bulk_inner(&mut self, nullable: bool) -> Result<Option<Bulk>, DecodeError> {
        let start = self.pos;
        let n = self.number(b'$')?;
        if n == -1 && nullable {
            return Ok(None);
        }
        let n = usize::try_from(n).map_err(|_| DecodeError {
            reason: "negative length",
            offset: start,
        })?;
        let header_len = self.pos - start;
        if n > self.remaining() || self.remaining() - n < 2 {
            return Err(self.fail("bulk string shorter than its length"));
        }
        if &self.input[self.pos + n..self.pos + n + 2] != CRLF {
            return Err(self.fail("bulk string longer than its length"));
        }
        self.pos += n + 2;
        Ok(Some(Bulk::framed(
            self.input.slice(start..self.pos),
            header_len,
        )))
    }

    pub(crate) fn bulk(&mut self) -> Result<Bulk, DecodeError> {
        self.bulk_inner(false)
            .map(|b| b.expect("non-nullable bulk"))
    }

    pub(crate) fn nullable_bulk(&mut self) -> Result<Option<Bulk>, DecodeError> {
        self.bulk_inner(true)
    }

    /// Reads `+{text}\r\n`.
    pub(crate) fn simple(&mut self) -> Result<&'a [u8], DecodeError> {
        self.line(b'+')
    }

    /// Reads `-{text}\r\n`.
    pub(crate) fn error(&mut self) -> Result<&'a [u8], DecodeError> {
        self.line(b'-')
    }

    /// Succeeds only if the whole input was read.
    pub(crate) fn finish(self) -> Result<(), DecodeError> {
        if self.remaining() == 0 {
            Ok(())
        } else {
            Err(self.fail("trailing bytes after the message"))
        }
    }
}

/// Strict decimal: an optional `-`, then one or more ASCII digits, no overflow.
fn parse_i64(digits: &[u8]) -> Option<i64> {
    let (negative, digits) = match digits.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, digits),
    };
    let magnitude = parse_u64(digits)?;
    if negative {
        0i64.checked_sub_unsigned(magnitude)
    } else {
        i64::try_from(magnitude).ok()
    }
}

/// Strict unsigned decimal: one or more ASCII digits, no sign, no overflow.
pub(crate) fn parse_u64(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |acc, &d| {
        if d.is_ascii_digit() {
            acc.checked_mul(10)?.checked_add(u64::from(d - b'0'))
        } else {
            None
        }
    })
}

/// Decimal digits of `n` without allocating.
pub(crate) struct Decimal {
    buf: [u8; 20],
    start: u8,
}

impl Decimal {
    pub(crate) fn new(mut n: u64) -> Self {
        let mut buf = [0u8; 20];
        let mut i = buf.len();
        loop {
            i -= 1;
            buf[i] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        Self {
            buf,
            start: i as u8,
        }
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.buf[self.start as usize..]
    }
}

pub(crate) fn digits(n: u64) -> usize {
    Decimal::new(n).as_bytes().len()
}

/// Bytes taken by `{marker}{n}\r\n`.
pub(crate) fn header_len(n: usize) -> usize {
    1 + digits(n as u64) + 2
}

/// Bytes taken by a bulk string of `len` bytes.
pub(crate) fn bulk_len(len: usize) -> usize {
    header_len(len) + len + 2
}

pub(crate) fn put_header(out: &mut impl BufMut, marker: u8, n: usize) {
    out.put_u8(marker);
    out.put_slice(Decimal::new(n as u64).as_bytes());
    out.put_slice(CRLF);
}

pub(crate) fn put_bulk(out: &mut impl BufMut, data: &[u8]) {
    put_header(out, b'$', data.len());
    out.put_slice(data);
    out.put_slice(CRLF);
}

pub(crate) fn put_integer(out: &mut impl BufMut, n: i64) {
    out.put_u8(b':');
    if n < 0 {
        out.put_u8(b'-');
    }
    out.put_slice(Decimal::new(n.unsigned_abs()).as_bytes());
    out.put_slice(CRLF);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_numbers() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"-1"), Some(-1));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [
            &b""[..],
            b"-",
            b"+1",
            b" 1",
            b"1 ",
            b"1a",
            b"9223372036854775808",
            b"99999999999999999999",
        ] {
            assert_eq!(parse_i64(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn decimal_digits() {
        for n in [0u64, 7, 10, 99, 100, 12345, u64::MAX] {
            assert_eq!(Decimal::new(n).as_bytes(), n.to_string().as_bytes());
            assert_eq!(digits(n), n.to_string().len());
        }
    }
}
