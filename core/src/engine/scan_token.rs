//! SCAN continuation tokens that reveal nothing and cannot be forged.
//!
//! A page that is not the last carries a token telling where the next one starts: the last
//! key the page examined. Sent in the clear, that key could be one the reader may not read,
//! and a made-up token would let a client probe for keys. So the key is sealed with
//! XChaCha20-Poly1305 under a key only the engine knows, bound to the scan's pattern and
//! reader: a token opens only for the same pattern and client, and any other token (altered,
//! forged, another client's, another engine's key) is refused.

use bytes::Bytes;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};

const NONCE: usize = 24;

/// Seals and opens tokens with one engine's secret.
pub(crate) struct ScanTokens {
    cipher: XChaCha20Poly1305,
    /// With `counter`, the nonce: unique per token as long as the seed is unique per engine
    /// (drivers pass random bytes).
    seed: [u8; 16],
    counter: u64,
}

impl std::fmt::Debug for ScanTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ScanTokens { .. }")
    }
}

impl ScanTokens {
    pub(crate) fn new(key: &[u8; 32], seed: [u8; 16]) -> Self {
        Self {
            cipher: XChaCha20Poly1305::new(key.into()),
            seed,
            counter: 0,
        }
    }

    /// A token to continue `reader`'s scan of `pattern` after `last`.
    pub(crate) fn seal(&mut self, last: &[u8], pattern: &[u8], reader: Option<&str>) -> Bytes {
        self.counter = self.counter.wrapping_add(1);
        let mut nonce = [0u8; NONCE];
        nonce[..8].copy_from_slice(&self.counter.to_be_bytes());
        nonce[8..].copy_from_slice(&self.seed);
        let aad = bound_to(pattern, reader);
        let payload = Payload {
            msg: last,
            aad: &aad,
        };
        // Encryption with a valid key and nonce cannot fail (only over 256 GiB messages).
        let sealed = self
            .cipher
            .encrypt(XNonce::from_slice(&nonce), payload)
            .unwrap_or_default();
        let mut token = Vec::with_capacity(NONCE + sealed.len());
        token.extend_from_slice(&nonce);
        token.extend_from_slice(&sealed);
        token.into()
    }

    /// The key to continue after, if `token` was sealed by this engine for this pattern and
    /// reader.
    pub(crate) fn open(&self, token: &[u8], pattern: &[u8], reader: Option<&str>) -> Option<Bytes> {
        if token.len() < NONCE {
            return None;
        }
        let (nonce, sealed) = token.split_at(NONCE);
        let aad = bound_to(pattern, reader);
        let payload = Payload {
            msg: sealed,
            aad: &aad,
        };
        self.cipher
            .decrypt(XNonce::from_slice(nonce), payload)
            .ok()
            .map(Bytes::from)
    }
}

/// What a token is bound to: the pattern and the reader, unambiguously joined.
fn bound_to(pattern: &[u8], reader: Option<&str>) -> Vec<u8> {
    let mut aad = Vec::with_capacity(9 + pattern.len() + reader.map_or(0, str::len));
    aad.extend_from_slice(&(pattern.len() as u64).to_be_bytes());
    aad.extend_from_slice(pattern);
    match reader {
        Some(reader) => {
            aad.push(1);
            aad.extend_from_slice(reader.as_bytes());
        }
        None => aad.push(0),
    }
    aad
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_opens_only_for_its_scan_and_hides_the_key() {
        let mut tokens = ScanTokens::new(&[7; 32], [1; 16]);
        let token = tokens.seal(b"k:secret/user0099/password", b"k:*", Some("c1"));
        assert!(
            !token.windows(6).any(|w| w == b"secret"),
            "the key is not in the clear"
        );
        assert_eq!(
            tokens.open(&token, b"k:*", Some("c1")).as_deref(),
            Some(&b"k:secret/user0099/password"[..])
        );
        // Another pattern, another reader, no reader, another engine: refused.
        assert_eq!(tokens.open(&token, b"k:s*", Some("c1")), None);
        assert_eq!(tokens.open(&token, b"k:*", Some("c2")), None);
        assert_eq!(tokens.open(&token, b"k:*", None), None);
        assert_eq!(
            ScanTokens::new(&[8; 32], [1; 16]).open(&token, b"k:*", Some("c1")),
            None
        );
        // Altered or made up: refused.
        let mut altered = token.to_vec();
        let last = altered.len() - 1;
        altered[last] ^= 1;
        assert_eq!(tokens.open(&altered, b"k:*", Some("c1")), None);
        assert_eq!(tokens.open(b"k:secret", b"k:*", Some("c1")), None);
        assert_eq!(tokens.open(b"", b"k:*", Some("c1")), None);
        // Two tokens for the same place differ.
        assert_ne!(
            token,
            tokens.seal(b"k:secret/user0099/password", b"k:*", Some("c1"))
        );
    }
}
