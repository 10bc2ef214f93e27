//! Throwaway TLS files for tests: a certificate authority, and a broker certificate it signed
//! for 127.0.0.1 and localhost.

#![allow(dead_code)]

use std::path::PathBuf;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};

/// The PEM files, in a directory of their own (removed on drop).
pub struct TlsFiles {
    pub dir: PathBuf,
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl TlsFiles {
    /// A new authority and broker certificate, under a directory named after `name`.
    pub fn new(name: &str) -> TlsFiles {
        let dir = std::env::temp_dir().join(format!("mqstore-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
        let broker_key = KeyPair::generate().unwrap();
        let broker_cert =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
                .unwrap()
                .signed_by(&broker_key, &ca)
                .unwrap();
        let files = TlsFiles {
            ca: dir.join("ca.pem"),
            cert: dir.join("broker.pem"),
            key: dir.join("broker.key"),
            dir,
        };
        std::fs::write(&files.ca, ca.pem()).unwrap();
        std::fs::write(&files.cert, broker_cert.pem()).unwrap();
        std::fs::write(&files.key, broker_key.serialize_pem()).unwrap();
        files
    }
}

impl Drop for TlsFiles {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The PEM certificate of an authority nobody trusts.
pub fn untrusted_ca_pem() -> Vec<u8> {
    CertifiedIssuer::self_signed(
        CertificateParams::new(Vec::<String>::new()).unwrap(),
        KeyPair::generate().unwrap(),
    )
    .unwrap()
    .pem()
    .into_bytes()
}
