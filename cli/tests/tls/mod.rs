//! Throwaway TLS files for tests: a certificate authority, a broker certificate it signed for
//! 127.0.0.1 and localhost, and a client certificate it signed.

#![allow(dead_code)]

use std::path::PathBuf;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

/// The PEM files, in a directory of their own (removed on drop).
pub struct TlsFiles {
    pub dir: PathBuf,
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    /// A client certificate the authority signed, and its key (not encrypted).
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
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
        let mut broker_params =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
        // Names of their own (see the client's below): Redis Cluster nodes present this one to
        // each other, and OpenSSL checks it there.
        broker_params
            .distinguished_name
            .push(DnType::CommonName, "mqstore test server");
        let broker_cert = broker_params.signed_by(&broker_key, &ca).unwrap();
        let client_key = KeyPair::generate().unwrap();
        let mut client_params =
            CertificateParams::new(vec!["mqstore-test-client".to_owned()]).unwrap();
        // A name of its own: with rcgen's default one, the same as its issuer's, OpenSSL (the
        // broker) takes the certificate for a self-signed one and refuses it as an unknown CA.
        client_params
            .distinguished_name
            .push(DnType::CommonName, "mqstore test client");
        let client_cert = client_params.signed_by(&client_key, &ca).unwrap();
        let files = TlsFiles {
            ca: dir.join("ca.pem"),
            cert: dir.join("broker.pem"),
            key: dir.join("broker.key"),
            client_cert: dir.join("client.pem"),
            client_key: dir.join("client.key"),
            dir,
        };
        std::fs::write(&files.ca, ca.pem()).unwrap();
        std::fs::write(&files.cert, broker_cert.pem()).unwrap();
        std::fs::write(&files.key, broker_key.serialize_pem()).unwrap();
        std::fs::write(&files.client_cert, client_cert.pem()).unwrap();
        std::fs::write(&files.client_key, client_key.serialize_pem()).unwrap();
        files
    }

    /// The client key encrypted with `password` by OpenSSL itself (`openssl pkcs8 -topk8`,
    /// its default PBES2 with AES-256-CBC), as an operator would encrypt it.
    pub fn encrypted_client_key(&self, password: &str) -> PathBuf {
        let out = self.dir.join("client-encrypted.key");
        let status = std::process::Command::new("openssl")
            .args(["pkcs8", "-topk8", "-in"])
            .arg(&self.client_key)
            .arg("-out")
            .arg(&out)
            .args(["-passout", &format!("pass:{password}")])
            .status()
            .expect("openssl runs (apt package openssl)");
        assert!(status.success(), "openssl pkcs8 -topk8 failed");
        out
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
