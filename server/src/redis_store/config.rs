//! Where the shared state is: `--store redis://…` (one primary, a Cluster's seed nodes, or
//! sentinels and the primary they name), parsed and shown without its password.

use std::time::Duration;

/// Where the shared state is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisConfig {
    /// `redis://` or `rediss://` URLs: one for a single primary, the seed nodes of a Cluster,
    /// or the sentinels of a Sentinel deployment.
    pub urls: Vec<String>,
    /// Whether the address names a Redis Cluster.
    pub cluster: bool,
    /// A primary that Redis Sentinel watches and fails over: the sentinels are `urls`.
    pub sentinel: Option<SentinelConfig>,
    /// Prepended to every Redis key mqstore writes.
    pub prefix: String,
    /// Every write waits until this many replicas have it (Redis `WAIT`) before its answer
    /// goes out; 0: answered once the primary applied it (replication is asynchronous).
    pub wait_replicas: u32,
    /// How long a write waits for [`RedisConfig::wait_replicas`]; a write not confirmed in
    /// time is answered with an error (it may still be applied), never OK.
    pub wait_timeout: Duration,
    /// TLS files for `rediss://` (a private CA, a client certificate); `None`: the system's
    /// trusted CAs and no certificate. Only for `rediss` URLs.
    pub tls: Option<std::sync::Arc<RedisTls>>,
}

/// TLS files for `rediss://` beyond the system's trusted CAs: a private CA, and a certificate
/// this node presents to a Redis that asks for one (Redis's default once TLS is on:
/// `tls-auth-clients yes`). The same for a Cluster's nodes, the sentinels and their primary.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct RedisTls {
    /// PEM certificates of the CAs that sign Redis's certificates, instead of the system's.
    pub ca_pem: Option<Vec<u8>>,
    /// PEM certificate chain and private key (not encrypted) this node presents.
    pub client_auth: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for RedisTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key's bytes.
        f.debug_struct("RedisTls")
            .field("ca", &self.ca_pem.is_some())
            .field("client_certificate", &self.client_auth.is_some())
            .finish()
    }
}

impl RedisTls {
    /// The files as the redis crate takes them.
    pub(super) fn certificates(&self) -> redis::TlsCertificates {
        redis::TlsCertificates {
            client_tls: self
                .client_auth
                .as_ref()
                .map(|(cert, key)| redis::ClientTlsConfig {
                    client_cert: cert.clone(),
                    client_key: key.clone(),
                }),
            root_cert: self.ca_pem.clone(),
        }
    }

    /// The rustls client settings the redis crate makes of `tls` (`None`: the system's
    /// trusted CAs, no client certificate), for a connection of mqstore's own to the same
    /// server ([`super::pipe::Pipe`]): it trusts what the shared client trusts.
    pub(super) fn rustls_config(tls: Option<&RedisTls>) -> std::io::Result<rustls::ClientConfig> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let invalid = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, what);
        let certificates = |pem: &[u8]| {
            CertificateDer::pem_slice_iter(pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| invalid(format!("Redis TLS: a certificate does not read: {e}")))
        };
        let mut roots = rustls::RootCertStore::empty();
        match tls.and_then(|tls| tls.ca_pem.as_deref()) {
            Some(pem) => {
                for cert in certificates(pem)? {
                    roots
                        .add(cert)
                        .map_err(|e| invalid(format!("Redis TLS: the CA: {e}")))?;
                }
            }
            None => {
                let mut system = rustls_native_certs::load_native_certs();
                if let Some(e) = system.errors.pop() {
                    return Err(std::io::Error::other(format!(
                        "Redis TLS: the system's CAs: {e}"
                    )));
                }
                roots.add_parsable_certificates(system.certs);
            }
        }
        let _ = rustls::crypto::ring::default_provider().install_default();
        let builder = rustls::ClientConfig::builder().with_root_certificates(roots);
        match tls.and_then(|tls| tls.client_auth.as_ref()) {
            Some((cert, key)) => {
                let key = PrivateKeyDer::from_pem_slice(key)
                    .map_err(|e| invalid(format!("Redis TLS: the client key: {e}")))?;
                builder
                    .with_client_auth_cert(certificates(cert)?, key)
                    .map_err(|e| invalid(format!("Redis TLS: the client certificate: {e}")))
            }
            None => Ok(builder.with_no_client_auth()),
        }
    }

    /// A client for `url`: with these files when there are any and `url` is `rediss://`.
    pub(super) fn client(tls: Option<&RedisTls>, url: &str) -> redis::RedisResult<redis::Client> {
        match tls {
            Some(tls) if url.starts_with("rediss://") => {
                redis::Client::build_with_tls(url, tls.certificates())
            }
            _ => redis::Client::open(url),
        }
    }
}

/// The primary of a Sentinel deployment: its name, and how to reach it once the sentinels
/// say where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentinelConfig {
    /// The name the sentinels monitor it under (`sentinel monitor NAME …`).
    pub primary: String,
    /// `redis` or `rediss` (TLS, for the sentinels and the primary alike).
    pub scheme: String,
    /// `user:password@` for the primary (empty: none).
    pub credentials: String,
    /// `/db` (empty: database 0).
    pub database: String,
}

impl SentinelConfig {
    /// The URL of the primary at `host:port`.
    pub(super) fn url(&self, host: &str, port: u16) -> String {
        format!(
            "{}://{}{host}:{port}{}",
            self.scheme, self.credentials, self.database
        )
    }
}

/// How long a write waits for its replicas unless told ([`RedisConfig::wait_timeout`]).
pub const DEFAULT_WAIT_TIMEOUT: Duration = Duration::from_millis(500);

/// The prefix of every Redis key unless configured otherwise.
pub const DEFAULT_PREFIX: &str = "mqstore:";

impl RedisConfig {
    /// Parses `redis://[user:pass@]host:port[/db]`, `rediss://…` (TLS), a Cluster as
    /// `redis-cluster://[user:pass@]host:port,host:port,…` (`rediss-cluster://` for TLS), or a
    /// Sentinel deployment as `redis-sentinel://[user:pass@]host:port,host:port,…/PRIMARY[/db]`
    /// (`rediss-sentinel://` for TLS; the sentinels' addresses, the name they monitor the
    /// primary under; the credentials are the primary's).
    pub fn parse(text: &str) -> std::result::Result<Self, String> {
        let (scheme, rest) = text
            .split_once("://")
            .ok_or_else(|| format!("{text:?} is not a Redis URL (redis://host:port)"))?;
        let (base, cluster, sentinel) = match scheme {
            "redis" | "rediss" => (scheme, false, false),
            "redis-cluster" => ("redis", true, false),
            "rediss-cluster" => ("rediss", true, false),
            "redis-sentinel" => ("redis", false, true),
            "rediss-sentinel" => ("rediss", false, true),
            _ => {
                return Err(format!(
                    "unknown store scheme {scheme:?}: use redis://, rediss://, redis-cluster://, \
                     rediss-cluster://, redis-sentinel:// or rediss-sentinel://"
                ));
            }
        };
        let (credentials, hosts) = match rest.rsplit_once('@') {
            Some((credentials, hosts)) => (format!("{credentials}@"), hosts),
            None => (String::new(), rest),
        };
        let mut sentinel_config = None;
        let urls = if cluster {
            hosts
                .split(',')
                .map(|host| format!("{base}://{credentials}{}", host.trim()))
                .collect()
        } else if sentinel {
            let mut parts = hosts.split('/');
            let hosts = parts.next().unwrap_or_default();
            let primary = parts.next().unwrap_or_default();
            let database = parts.next().map(|db| format!("/{db}")).unwrap_or_default();
            if primary.is_empty() || parts.next().is_some() || hosts.is_empty() {
                return Err(format!(
                    "{:?} is not a Sentinel URL: redis-sentinel://host:port,host:port/PRIMARY[/db]",
                    redact(text)
                ));
            }
            sentinel_config = Some(SentinelConfig {
                primary: primary.to_owned(),
                scheme: base.to_owned(),
                credentials,
                database,
            });
            hosts
                .split(',')
                .map(|host| format!("{base}://{}", host.trim()))
                .collect()
        } else {
            vec![text.to_owned()]
        };
        for url in &urls {
            redis::IntoConnectionInfo::into_connection_info(url.as_str())
                .map_err(|e| format!("bad Redis URL {}: {e}", redact(url)))?;
        }
        Ok(Self {
            urls,
            cluster,
            sentinel: sentinel_config,
            prefix: DEFAULT_PREFIX.to_owned(),
            wait_replicas: 0,
            wait_timeout: DEFAULT_WAIT_TIMEOUT,
            tls: None,
        })
    }

    /// The URLs with passwords hidden, for logs and errors.
    pub fn display(&self) -> String {
        let urls = self
            .urls
            .iter()
            .map(|u| redact(u))
            .collect::<Vec<_>>()
            .join(",");
        match &self.sentinel {
            Some(sentinel) => format!("sentinels {urls}, primary {:?}", sentinel.primary),
            None => urls,
        }
    }
}

/// `url` without its password.
pub(super) fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(start), Some(at)) if at > start => {
            let credentials = &url[start + 3..at];
            let user = credentials.split(':').next().unwrap_or_default();
            format!("{}{user}:***{}", &url[..start + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_and_passwords_stay_hidden() {
        let single = RedisConfig::parse("redis://:secret@127.0.0.1:6379/2").unwrap();
        assert_eq!(single.urls, ["redis://:secret@127.0.0.1:6379/2"]);
        assert!(!single.cluster);
        assert_eq!(single.display(), "redis://:***@127.0.0.1:6379/2");
        let cluster = RedisConfig::parse("redis-cluster://u:p@h1:7000,h2:7001").unwrap();
        assert!(cluster.cluster);
        assert_eq!(cluster.urls, ["redis://u:p@h1:7000", "redis://u:p@h2:7001"]);
        assert_eq!(
            cluster.display(),
            "redis://u:***@h1:7000,redis://u:***@h2:7001"
        );
        let tls = RedisConfig::parse("rediss-cluster://h1:7000").unwrap();
        assert_eq!(tls.urls, ["rediss://h1:7000"]);
        for bad in ["memcached://x", "localhost:6379", "redis://"] {
            assert!(RedisConfig::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sentinel_urls_name_the_sentinels_and_the_primary() {
        let config =
            RedisConfig::parse("redis-sentinel://u:secret@h1:26379,h2:26380/fleet/2").unwrap();
        assert_eq!(config.urls, ["redis://h1:26379", "redis://h2:26380"]);
        assert!(!config.cluster);
        let sentinel = config.sentinel.clone().unwrap();
        assert_eq!(sentinel.primary, "fleet");
        assert_eq!(
            sentinel.url("10.0.0.7", 6380),
            "redis://u:secret@10.0.0.7:6380/2"
        );
        assert_eq!(
            config.display(),
            "sentinels redis://h1:26379,redis://h2:26380, primary \"fleet\""
        );
        assert!(!config.display().contains("secret"));
        let tls = RedisConfig::parse("rediss-sentinel://h1:26379/fleet").unwrap();
        assert_eq!(tls.urls, ["rediss://h1:26379"]);
        assert_eq!(tls.sentinel.unwrap().url("h", 1), "rediss://h:1");
        for bad in [
            "redis-sentinel://h1:26379",
            "redis-sentinel://h1:26379/",
            "redis-sentinel:///fleet",
            "redis-sentinel://h1:26379/fleet/0/extra",
        ] {
            let error = RedisConfig::parse(bad).unwrap_err();
            assert!(error.contains("PRIMARY"), "{bad}: {error}");
        }
        assert_eq!(config.wait_replicas, 0, "no waiting unless asked");
    }
}
