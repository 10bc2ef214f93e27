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

    /// Reads a signed decimal line (`:…`, `$…`, `*…`) in one pass over its bytes.
    fn number(&mut self, marker: u8) -> Result<i64, DecodeError> {
        let input: &[u8] = self.input;
        let at = self.pos;
        let bad = |reason| DecodeError { reason, offset: at };
        if input.get(at) != Some(&marker) {
            return Err(bad("unexpected type marker"));
        }
        let mut i = at + 1;
        let negative = input.get(i) == Some(&b'-');
        i += usize::from(negative);
        let digits_start = i;
        let mut magnitude: u64 = 0;
        while let Some(&d) = input.get(i) {
            if !d.is_ascii_digit() {
                break;
            }
            magnitude = magnitude
                .checked_mul(10)
                .and_then(|m| m.checked_add(u64::from(d - b'0')))
                .ok_or(bad("number does not fit in 64 bits"))?;
            i += 1;
        }
        if i == digits_start {
            return Err(bad("not a decimal number"));
        }
        if input.get(i..i + 2) != Some(CRLF) {
            return Err(bad("number not followed by CRLF"));
        }
        self.pos = i + 2;
        if negative {
            0i64.checked_sub_unsigned(magnitude)
        } else {
            i64::try_from(magnitude).ok()
        }
        .ok_or(bad("number does not fit in 64 bits"))
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

    /// Reads `$n\r\n{n bytes}\r\n`, or `$-1\r\n` as `None` when `nullable`, returning where
    /// it stands in the input (no `Bytes` is made, so no reference count is touched).
    fn bulk_span(&mut self, nullable: bool) -> Result<Option<Span>, DecodeError> {
        let start = self.pos;
        let n = self.number(b'$')?;
        if n == -1 && nullable {
            return Ok(None);
        }
        let n = usize::try_from(n).map_err(|_| DecodeError {
            reason: "negative length",
            offset: start,
        })?;
        let value_start = self.pos;
        if n > self.remaining() || self.remaining() - n < 2 {
            return Err(self.fail("bulk string shorter than its length"));
        }
        if &self.input[value_start + n..value_start + n + 2] != CRLF {
            return Err(self.fail("bulk string longer than its length"));
        }
        self.pos += n + 2;
        Ok(Some(Span {
            start,
            value_start,
            end: self.pos,
        }))
    }

    /// Reads a bulk string, returning its span.
    pub(crate) fn bulk_range(&mut self) -> Result<Span, DecodeError> {
        let at = self.pos;
        self.bulk_span(false)?.ok_or(DecodeError {
            reason: "null bulk string",
            offset: at,
        })
    }

    pub(crate) fn bulk(&mut self) -> Result<Bulk, DecodeError> {
        let span = self.bulk_range()?;
        Ok(span.bulk(self.input))
    }

    pub(crate) fn nullable_bulk(&mut self) -> Result<Option<Bulk>, DecodeError> {
        Ok(self.bulk_span(true)?.map(|span| span.bulk(self.input)))
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

/// Where a bulk string stands in its input: `$n\r\n` from `start`, the value from
/// `value_start`, and `\r\n` ending at `end`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Span {
    pub(crate) start: usize,
    pub(crate) value_start: usize,
    pub(crate) end: usize,
}

impl Span {
    /// The value's bytes, borrowed.
    pub(crate) fn value<'a>(&self, input: &'a [u8]) -> &'a [u8] {
        &input[self.value_start..self.end - 2]
    }

    /// The value as a `Bytes` slice of `input`.
    pub(crate) fn value_bytes(&self, input: &Bytes) -> Bytes {
        input.slice(self.value_start..self.end - 2)
    }

    /// The framed bulk string as a slice of `input`.
    pub(crate) fn bulk(&self, input: &Bytes) -> Bulk {
        Bulk::framed(
            input.slice(self.start..self.end),
            self.value_start - self.start,
        )
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
    // One write of the marker, the digits and CRLF; counts and lengths below 100 (nearly all
    // of them) skip the general digit loop.
    if n < 10 {
        out.put_slice(&[marker, b'0' + n as u8, b'\r', b'\n']);
    } else if n < 100 {
        out.put_slice(&[
            marker,
            b'0' + (n / 10) as u8,
            b'0' + (n % 10) as u8,
            b'\r',
            b'\n',
        ]);
    } else {
        let digits = Decimal::new(n as u64);
        let digits = digits.as_bytes();
        let mut line = [0u8; 23];
        line[0] = marker;
        line[1..1 + digits.len()].copy_from_slice(digits);
        line[1 + digits.len()..3 + digits.len()].copy_from_slice(CRLF);
        out.put_slice(&line[..3 + digits.len()]);
    }
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
        let integer = |text: &[u8]| {
            let line = Bytes::from([b":", text, b"\r\n"].concat());
            let mut reader = Reader::new(&line);
            let n = reader.integer().ok()?;
            reader.finish().ok()?;
            Some(n)
        };
        assert_eq!(integer(b"0"), Some(0));
        assert_eq!(integer(b"-1"), Some(-1));
        assert_eq!(integer(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(integer(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [
            &b""[..],
            b"-",
            b"+1",
            b" 1",
            b"1 ",
            b"1a",
            b"1\r",
            b"9223372036854775808",
            b"-9223372036854775809",
            b"99999999999999999999",
        ] {
            assert_eq!(integer(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64(b"18446744073709551616"), None);
        assert_eq!(parse_u64(b""), None);
    }

    #[test]
    fn decimal_digits() {
        for n in [0u64, 7, 10, 99, 100, 12345, u64::MAX] {
            assert_eq!(Decimal::new(n).as_bytes(), n.to_string().as_bytes());
            assert_eq!(digits(n), n.to_string().len());
        }
    }
}
