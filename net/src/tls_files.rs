//! TLS files (of a broker connection, or of Redis's), read once and checked before anything
//! connects: a file rustls could not use is an error that names it (`InvalidInput`) when the
//! client is made, not a failed connection later (which `mqstore serve` would retry for ever).
//!
//! A client key encrypted with a password (the `ENCRYPTED PRIVATE KEY` that
//! `openssl pkcs8 -topk8` and `openssl genpkey -aes256` write: PBES2, PBKDF2 with HMAC-SHA-1,
//! -256, -384 or -512, AES-128/192/256-CBC) is decrypted here, since rustls reads plain keys
//! only. The key is derived with ring's PBKDF2 (ring is rustls's provider already) and
//! decrypted with RustCrypto's AES-CBC: the wheel and the C library carry no second SHA-2 or
//! HMAC. scrypt-derived keys (`-scrypt`) are refused with how to re-encrypt them. A password
//! given for a key that is not encrypted is not needed and not used, as OpenSSL, Node and the
//! Azure IoT Operations SDKs treat it.

use std::io::{Error, ErrorKind};
use std::num::NonZeroU32;
use std::path::Path;

use aes::cipher::{BlockDecryptMut, KeyIvInit, block_padding::Pkcs7};
use base64::Engine;
use pkcs8::pkcs5::EncryptionScheme;
use pkcs8::pkcs5::pbes2::{self, Kdf, Pbkdf2Prf};
use pkcs8::{EncryptedPrivateKeyInfo, PrivateKeyInfo};
use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

fn invalid(what: String) -> Error {
    Error::new(ErrorKind::InvalidInput, what)
}

const ENCRYPTED: &str = "-----BEGIN ENCRYPTED PRIVATE KEY-----";
const ENCRYPTED_END: &str = "-----END ENCRYPTED PRIVATE KEY-----";
/// OpenSSL's legacy encryption of a key in its own format (`openssl rsa -aes256 -traditional`).
const LEGACY: &str = "Proc-Type: 4,ENCRYPTED";
/// What to do with a key encrypted in a way not read here.
const REENCRYPT: &str = "re-encrypt it with `openssl pkcs8 -topk8 -v2 aes-256-cbc -in KEY -out NEW.key` \
                         (it asks for the password, and a new one)";

/// The key file's PEM `pem` (read from `path`) as a plain key, decrypted with `password` when
/// it is encrypted.
pub(crate) fn plain(pem: Vec<u8>, password: Option<&str>, path: &Path) -> std::io::Result<Vec<u8>> {
    let path = path.display();
    let text = String::from_utf8_lossy(&pem);
    if text.contains(LEGACY) {
        return Err(invalid(format!(
            "{path} is encrypted in OpenSSL's legacy format, which mqstore does not read: \
             convert it with `openssl pkcs8 -topk8 -in {path} -out NEW.key` (it asks for the \
             old password and a new one)"
        )));
    }
    let Some(start) = text.find(ENCRYPTED) else {
        return Ok(pem);
    };
    let Some(password) = password else {
        return Err(invalid(format!(
            "{path} is encrypted: give its password (the key password)"
        )));
    };
    let body = &text[start + ENCRYPTED.len()..];
    let end = body
        .find(ENCRYPTED_END)
        .ok_or_else(|| invalid(format!("{path}: its encrypted key has no END line")))?;
    let unreadable =
        |e: &dyn std::fmt::Display| invalid(format!("{path}: not a readable encrypted key ({e})"));
    let base64: String = body[..end].split_whitespace().collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(base64)
        .map_err(|e| unreadable(&e))?;
    let encrypted = EncryptedPrivateKeyInfo::try_from(der.as_slice()).map_err(|e| match e {
        // A cipher or key derivation pkcs5 does not know (3DES, RC2, ...).
        pkcs8::Error::Asn1(asn1)
            if matches!(asn1.kind(), pkcs8::der::ErrorKind::OidUnknown { .. }) =>
        {
            invalid(format!(
                "{path}: encrypted in a way mqstore does not read ({asn1}): {REENCRYPT}"
            ))
        }
        e => unreadable(&e),
    })?;
    let key = decrypt(&encrypted, password).map_err(|why| invalid(format!("{path}: {why}")))?;
    // PEM again, as rustls reads a key file.
    let mut pem = String::new();
    pem_block(&mut pem, "PRIVATE KEY", &key);
    Ok(pem.into_bytes())
}

/// Appends `der` to `pem` as a PEM block labelled `label`.
fn pem_block(pem: &mut String, label: &str, der: &[u8]) {
    let encoded = base64::engine::general_purpose::STANDARD.encode(der);
    pem.push_str(&format!("-----BEGIN {label}-----\n"));
    for line in encoded.as_bytes().chunks(64) {
        pem.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
        pem.push('\n');
    }
    pem.push_str(&format!("-----END {label}-----\n"));
}

/// The PKCS#8 key (DER) `encrypted` holds, or why it cannot be had.
fn decrypt(encrypted: &EncryptedPrivateKeyInfo<'_>, password: &str) -> Result<Vec<u8>, String> {
    let EncryptionScheme::Pbes2(pbes2::Parameters { kdf, encryption }) =
        &encrypted.encryption_algorithm
    else {
        return Err(format!(
            "encrypted with PBES1, which mqstore does not read: {REENCRYPT}"
        ));
    };
    let Kdf::Pbkdf2(pbkdf2) = kdf else {
        return Err(format!(
            "its key is derived with scrypt, which mqstore does not read: {REENCRYPT}"
        ));
    };
    let prf = match pbkdf2.prf {
        Pbkdf2Prf::HmacWithSha1 => ring::pbkdf2::PBKDF2_HMAC_SHA1,
        Pbkdf2Prf::HmacWithSha256 => ring::pbkdf2::PBKDF2_HMAC_SHA256,
        Pbkdf2Prf::HmacWithSha384 => ring::pbkdf2::PBKDF2_HMAC_SHA384,
        Pbkdf2Prf::HmacWithSha512 => ring::pbkdf2::PBKDF2_HMAC_SHA512,
        other => {
            return Err(format!(
                "its key is derived with {other:?}, which mqstore does not read: {REENCRYPT}"
            ));
        }
    };
    let iterations = NonZeroU32::new(pbkdf2.iteration_count)
        .ok_or_else(|| "its key derivation has no iterations".to_owned())?;
    let key_len = encryption.key_size();
    if pbkdf2
        .key_length
        .is_some_and(|length| usize::from(length) != key_len)
    {
        return Err("its key length does not fit its cipher".to_owned());
    }
    let mut key = [0u8; 32];
    let key = &mut key[..key_len];
    ring::pbkdf2::derive(prf, iterations, pbkdf2.salt, password.as_bytes(), key);
    let mut data = encrypted.encrypted_data.to_vec();
    let decrypted = match encryption {
        pbes2::EncryptionScheme::Aes128Cbc { iv } => {
            cbc::Decryptor::<aes::Aes128>::new_from_slices(key, *iv)
                .ok()
                .and_then(|d| d.decrypt_padded_mut::<Pkcs7>(&mut data).ok())
        }
        pbes2::EncryptionScheme::Aes192Cbc { iv } => {
            cbc::Decryptor::<aes::Aes192>::new_from_slices(key, *iv)
                .ok()
                .and_then(|d| d.decrypt_padded_mut::<Pkcs7>(&mut data).ok())
        }
        pbes2::EncryptionScheme::Aes256Cbc { iv } => {
            cbc::Decryptor::<aes::Aes256>::new_from_slices(key, *iv)
                .ok()
                .and_then(|d| d.decrypt_padded_mut::<Pkcs7>(&mut data).ok())
        }
        other => {
            return Err(format!(
                "encrypted with {:?}, which mqstore does not read: {REENCRYPT}",
                other.oid()
            ));
        }
    }
    .map(<[u8]>::len);
    key.fill(0);
    // A wrong password shows as bad padding or, rarely, as padding that happens to fit and
    // bytes that are not a PKCS#8 key.
    let wrong = || "the key password is wrong".to_owned();
    let length = decrypted.ok_or_else(wrong)?;
    data.truncate(length);
    PrivateKeyInfo::try_from(data.as_slice()).map_err(|_| wrong())?;
    Ok(data)
}

/// The file at `path`, or an error that names it.
pub(crate) fn read(path: &Path) -> std::io::Result<Vec<u8>> {
    std::fs::read(path)
        .map_err(|e| Error::new(e.kind(), format!("cannot read {}: {e}", path.display())))
}

/// The CA file at `path`, checked as rustls will take it: PEM certificates it can read.
pub(crate) fn ca(path: &Path) -> std::io::Result<Vec<u8>> {
    let pem = read(path)?;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert =
            cert.map_err(|e| invalid(format!("{}: not PEM certificates ({e})", path.display())))?;
        roots.add(cert).map_err(|e| {
            invalid(format!(
                "{}: a certificate that cannot be read ({e})",
                path.display()
            ))
        })?;
    }
    if roots.is_empty() {
        return Err(invalid(format!(
            "{}: no certificate in it (a PEM file of BEGIN CERTIFICATE blocks)",
            path.display()
        )));
    }
    Ok(pem)
}

/// Where the system's trusted CA certificates are, as OpenSSL finds them: `SSL_CERT_FILE`, or
/// the bundle each family of Linux keeps (Debian, Ubuntu and Alpine; Fedora and RHEL; SUSE;
/// Alpine's and the BSDs' other name).
const SYSTEM_BUNDLES: [&str; 4] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// The system's trusted CA certificates (see [`SYSTEM_BUNDLES`]): those of its bundle that
/// rustls can use, as PEM (a system bundle may hold an old certificate it cannot read, which
/// is left out rather than failing the rest, as rustls-native-certs does).
pub(crate) fn system_cas() -> std::io::Result<Vec<u8>> {
    let bundle = match std::env::var_os("SSL_CERT_FILE") {
        Some(file) => Some(std::path::PathBuf::from(file)),
        None => SYSTEM_BUNDLES
            .iter()
            .map(std::path::PathBuf::from)
            .find(|path| path.exists()),
    };
    match bundle {
        Some(path) => {
            let pem = read(&path)?;
            let mut usable = String::new();
            for cert in CertificateDer::pem_slice_iter(&pem).flatten() {
                if RootCertStore::empty().add(cert.clone()).is_ok() {
                    pem_block(&mut usable, "CERTIFICATE", &cert);
                }
            }
            if usable.is_empty() {
                return Err(invalid(format!(
                    "{}: no certificate in it that can be used (the system's CA bundle)",
                    path.display()
                )));
            }
            Ok(usable.into_bytes())
        }
        None => Err(Error::new(
            ErrorKind::NotFound,
            format!(
                "no system CA certificates (none of SSL_CERT_FILE, {}): give the CA file of \
                 the broker's certificate",
                SYSTEM_BUNDLES.join(", ")
            ),
        )),
    }
}

/// The client certificate (chain) at `cert` and its key at `key` (decrypted with `password`
/// when it is encrypted), checked as rustls will take them: certificates it can parse, a key
/// it reads, and a key and certificate that belong together.
pub(crate) fn client(
    cert: &Path,
    key: &Path,
    password: Option<&str>,
) -> std::io::Result<(Vec<u8>, Vec<u8>)> {
    let chain_pem = read(cert)?;
    let key_pem = plain(read(key)?, password, key)?;
    let (cert_path, key_path) = (cert.display(), key.display());
    let chain = CertificateDer::pem_slice_iter(&chain_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(format!("{cert_path}: not PEM certificates ({e})")))?;
    if chain.is_empty() {
        return Err(invalid(format!(
            "{cert_path}: no certificate in it (a PEM file of BEGIN CERTIFICATE blocks)"
        )));
    }
    let parsed = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
        invalid(format!(
            "{key_path}: no private key in it that can be read ({e})"
        ))
    })?;
    // rustls needs a process-wide crypto provider; installing it twice is harmless.
    let _ = rustls::crypto::ring::default_provider().install_default();
    rustls::ClientConfig::builder()
        .with_root_certificates(RootCertStore::empty())
        .with_client_auth_cert(chain, parsed)
        .map_err(|e| match e {
            rustls::Error::InconsistentKeys(_) => invalid(format!(
                "{key_path} is not the key of the certificate in {cert_path}"
            )),
            // webpki reads X.509 v3 only; `openssl x509 -req` without extensions makes v1.
            e if format!("{e:?}").contains("UnsupportedCertVersion") => invalid(format!(
                "{cert_path} is an X.509 v1 certificate, which mqstore's TLS (rustls) does not \
                 take: have it signed with an extension, e.g. `openssl x509 -req … -extfile \
                 FILE` with `extendedKeyUsage=clientAuth` in FILE"
            )),
            e => invalid(format!("{cert_path} with {key_path}: {e}")),
        })?;
    Ok((chain_pem, key_pem))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One key as OpenSSL writes it, plain and encrypted (see `net/testdata/README.md`).
    fn file(name: &str) -> (Vec<u8>, std::path::PathBuf) {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("testdata")
            .join(name);
        (std::fs::read(&path).unwrap(), path)
    }

    fn error(name: &str, password: Option<&str>) -> String {
        let (pem, path) = file(name);
        let e = plain(pem, password, &path).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        e.to_string()
    }

    #[test]
    fn an_encrypted_key_decrypts_to_the_plain_key_openssl_wrote() {
        let (expected, _) = file("plain.key");
        for name in [
            "pbkdf2-aes256.key",
            "pbkdf2-sha1-aes128.key",
            "pbkdf2-sha512-aes192.key",
        ] {
            let (pem, path) = file(name);
            let key = plain(pem, Some("fleet-key-1"), &path).unwrap();
            assert_eq!(key, expected, "{name}");
            // rustls reads what comes out.
            use rustls::pki_types::{PrivateKeyDer, pem::PemObject};
            assert!(PrivateKeyDer::from_pem_slice(&key).is_ok(), "{name}");
        }
    }

    #[test]
    fn a_plain_key_is_passed_on_untouched_with_or_without_a_password() {
        let (pem, path) = file("plain.key");
        assert_eq!(plain(pem.clone(), None, &path).unwrap(), pem);
        assert_eq!(plain(pem.clone(), Some("fleet-key-1"), &path).unwrap(), pem);
    }

    #[test]
    fn a_wrong_or_missing_password_says_so() {
        for name in ["pbkdf2-aes256.key", "pbkdf2-sha1-aes128.key"] {
            let wrong = error(name, Some("fleet-key-2"));
            assert!(wrong.ends_with("the key password is wrong"), "{wrong}");
            let missing = error(name, None);
            assert!(
                missing.ends_with("is encrypted: give its password (the key password)"),
                "{missing}"
            );
        }
    }

    #[test]
    fn keys_encrypted_in_ways_not_read_are_refused_with_how_to_re_encrypt_them() {
        for (name, why) in [
            ("scrypt-aes128.key", "derived with scrypt"),
            (
                "pbkdf2-des3.key",
                "encrypted in a way mqstore does not read",
            ),
        ] {
            let e = error(name, Some("fleet-key-1"));
            assert!(
                e.contains(why) && e.contains("openssl pkcs8 -topk8 -v2 aes-256-cbc"),
                "{e}"
            );
        }
    }

    #[test]
    fn a_legacy_encrypted_key_is_refused_with_how_to_convert_it() {
        for password in [None, Some("fleet-key-1")] {
            let e = error("legacy.key", password);
            assert!(
                e.contains("legacy format") && e.contains("openssl pkcs8 -topk8 -in"),
                "{e}"
            );
        }
    }

    #[test]
    fn a_damaged_encrypted_key_is_an_error_not_a_panic() {
        let (pem, path) = file("pbkdf2-aes256.key");
        let text = String::from_utf8(pem).unwrap();
        let cut = text.replace(ENCRYPTED_END, "");
        let e = plain(cut.into_bytes(), Some("fleet-key-1"), &path).unwrap_err();
        assert!(e.to_string().contains("no END line"), "{e}");
        let lines: Vec<&str> = text.lines().collect();
        let short = [lines[0], lines[1], lines[lines.len() - 1]].join("\n");
        let e = plain(short.into_bytes(), Some("fleet-key-1"), &path).unwrap_err();
        assert!(
            e.to_string().contains("not a readable encrypted key"),
            "{e}"
        );
    }

    use crate::TlsConfig;

    /// `TlsConfig::from_files` with the test data's files.
    fn from_files(ca: &str, client: Option<(&str, &str)>) -> std::io::Result<TlsConfig> {
        let path = |name: &str| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("testdata")
                .join(name)
        };
        let client = client.map(|(cert, key)| (path(cert), path(key)));
        TlsConfig::from_files(
            Some(&path(ca)),
            client.as_ref().map(|(c, k)| (c.as_path(), k.as_path())),
            client.as_ref().map(|_| "fleet-key-1"),
        )
    }

    fn refused(ca: &str, client: Option<(&str, &str)>) -> String {
        let e = from_files(ca, client).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
        e.to_string()
    }

    #[test]
    fn files_tls_can_use_are_taken() {
        assert!(from_files("ca.pem", None).is_ok());
        let tls = from_files("ca.pem", Some(("client.pem", "pbkdf2-aes256.key"))).unwrap();
        assert_eq!(tls.client_auth.unwrap().1, file("plain.key").0);
    }

    #[test]
    fn a_configuration_shown_in_a_log_does_not_show_the_key() {
        let tls = from_files("ca.pem", Some(("client.pem", "pbkdf2-aes256.key"))).unwrap();
        let shown = format!("{tls:?}");
        let key = &tls.client_auth.as_ref().unwrap().1;
        assert!(shown.contains("<redacted>"), "{shown}");
        // As a derived Debug would show its first bytes ("45, 45, 45, ...": the PEM's dashes).
        let bytes: Vec<String> = key[..8].iter().map(u8::to_string).collect();
        assert!(!shown.contains(&bytes.join(", ")), "{shown}");
    }

    #[test]
    fn files_tls_could_not_use_are_refused_naming_the_file_and_why() {
        // A key as the CA file: no certificate in it.
        let e = refused("plain.key", None);
        assert!(e.contains("plain.key: no certificate in it"), "{e}");
        let e = refused("ca.pem", Some(("plain.key", "plain.key")));
        assert!(e.contains("plain.key: no certificate in it"), "{e}");
        let e = refused("ca.pem", Some(("client.pem", "client.pem")));
        assert!(e.contains("client.pem: no private key in it"), "{e}");
        // The CA's certificate with the client's key: not its key.
        let e = refused("ca.pem", Some(("ca.pem", "plain.key")));
        assert!(
            e.contains("plain.key is not the key of the certificate in"),
            "{e}"
        );
        let e = refused("ca.pem", Some(("client-v1.pem", "plain.key")));
        assert!(
            e.contains("client-v1.pem is an X.509 v1 certificate"),
            "{e}"
        );
    }
}
