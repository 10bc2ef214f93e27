//! SCAN patterns: the POSIX fnmatch dialect of spec §2, over bytes.
//!
//! `*` any run, `?` one byte, `[abc]` a set, `[a-z]` a range, `[!a-z]` a negated set, `^`
//! inside brackets is an ordinary byte, `\x` is a literal `x`. A `[` without its `]` is a
//! literal `[`, as in fnmatch.

/// A compiled pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    tokens: Vec<Token>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Byte(u8),
    AnyByte,
    AnyRun,
    Set {
        negated: bool,
        ranges: Vec<(u8, u8)>,
    },
}

impl Pattern {
    /// Compiles a pattern; every byte string is a valid pattern.
    pub fn new(pattern: &[u8]) -> Self {
        let mut tokens = Vec::with_capacity(pattern.len());
        let mut i = 0;
        while i < pattern.len() {
            let token = match pattern[i] {
                b'*' => {
                    // Runs of `*` match what one does.
                    if tokens.last() != Some(&Token::AnyRun) {
                        tokens.push(Token::AnyRun);
                    }
                    i += 1;
                    continue;
                }
                b'?' => Token::AnyByte,
                b'\\' if i + 1 < pattern.len() => {
                    i += 1;
                    Token::Byte(pattern[i])
                }
                b'[' => match parse_set(&pattern[i + 1..]) {
                    Some((token, used)) => {
                        i += used;
                        token
                    }
                    None => Token::Byte(b'['),
                },
                b => Token::Byte(b),
            };
            tokens.push(token);
            i += 1;
        }
        Self { tokens }
    }

    /// Whether `text` matches the whole pattern.
    pub fn matches(&self, text: &[u8]) -> bool {
        // Iterative matching with one backtrack point (the last `*`): linear in practice,
        // never exponential.
        let (mut t, mut p) = (0, 0);
        let mut star: Option<(usize, usize)> = None;
        while t < text.len() {
            match self.tokens.get(p) {
                Some(Token::AnyRun) => {
                    star = Some((p, t));
                    p += 1;
                    continue;
                }
                Some(token) if token.matches(text[t]) => {
                    p += 1;
                    t += 1;
                    continue;
                }
                _ => {}
            }
            match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            }
        }
        self.tokens[p..].iter().all(|token| *token == Token::AnyRun)
    }

    /// The literal prefix every match starts with (lets a sorted store skip ahead).
    pub fn literal_prefix(&self) -> Vec<u8> {
        self.tokens
            .iter()
            .map_while(|t| match t {
                Token::Byte(b) => Some(*b),
                _ => None,
            })
            .collect()
    }
}

impl Token {
    fn matches(&self, b: u8) -> bool {
        match self {
            Token::Byte(c) => *c == b,
            Token::AnyByte => true,
            Token::AnyRun => true,
            Token::Set { negated, ranges } => {
                ranges.iter().any(|(lo, hi)| (*lo..=*hi).contains(&b)) != *negated
            }
        }
    }
}

/// Parses the inside of `[...]` (the input starts after `[`). Returns the token and how many
/// bytes it used, the closing `]` included; `None` when there is no closing `]`.
fn parse_set(input: &[u8]) -> Option<(Token, usize)> {
    let mut i = 0;
    let negated = input.first() == Some(&b'!');
    if negated {
        i += 1;
    }
    let mut ranges = Vec::new();
    let mut first = true;
    loop {
        let mut lo = *input.get(i)?;
        // A `]` right after `[` or `[!` is a member, not the end.
        if lo == b']' && !first {
            return Some((Token::Set { negated, ranges }, i + 1));
        }
        first = false;
        if lo == b'\\' {
            i += 1;
            lo = *input.get(i)?;
        }
        i += 1;
        let mut hi = lo;
        if input.get(i) == Some(&b'-') && input.get(i + 1).is_some_and(|&c| c != b']') {
            i += 1;
            hi = input[i];
            if hi == b'\\' {
                i += 1;
                hi = *input.get(i)?;
            }
            i += 1;
        }
        if lo <= hi {
            ranges.push((lo, hi));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pattern: &str, text: &str) -> bool {
        Pattern::new(pattern.as_bytes()).matches(text.as_bytes())
    }

    #[test]
    fn spec_dialect() {
        assert!(m("user:*", "user:1"));
        assert!(m("user:*", "user:"));
        assert!(!m("user:*", "users:1"));
        assert!(m("a?c", "abc"));
        assert!(!m("a?c", "ac"));
        assert!(m("[abc]x", "bx"));
        assert!(!m("[abc]x", "dx"));
        assert!(m("[a-z]1", "q1"));
        assert!(!m("[a-z]1", "Q1"));
        assert!(m("[!a-z]1", "Q1"));
        assert!(!m("[!a-z]1", "q1"));
        // `^` inside brackets is ordinary.
        assert!(m("[^0-9]", "^"));
        assert!(m("[^0-9]", "5"));
        assert!(!m("[^0-9]", "a"));
        // Literal `*`.
        assert!(m("a[*]", "a*"));
        assert!(!m("a[*]", "ab"));
        assert!(m("a\\*", "a*"));
        assert!(!m("a\\*", "ab"));
    }

    #[test]
    fn edges() {
        assert!(m("*", ""));
        assert!(m("", ""));
        assert!(!m("", "a"));
        assert!(m("**a**", "xxa"));
        assert!(m("*a*b*c", "aXbXbYc"));
        assert!(!m("*a*b*c", "aXbXbYd"));
        assert!(m("[", "["), "unclosed bracket is literal");
        assert!(m("[ab", "[ab"));
        assert!(m("[]]", "]"), "] first in a set is a member");
        assert!(m("[!]]", "a"));
        assert!(m("[a-]", "-"), "- last in a set is a member");
        assert!(m("a\\", "a\\"), "trailing backslash is literal");
        assert!(m("\u{0}?", "\u{0}\u{1}"));
    }

    #[test]
    fn no_exponential_blowup() {
        let text = "a".repeat(10_000);
        assert!(!m(&("*a".repeat(30) + "b"), &text));
    }

    #[test]
    fn literal_prefix() {
        assert_eq!(Pattern::new(b"user:*").literal_prefix(), b"user:");
        assert_eq!(Pattern::new(b"a\\*b?").literal_prefix(), b"a*b");
        assert_eq!(Pattern::new(b"*x").literal_prefix(), b"");
    }
}
