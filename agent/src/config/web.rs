//! The `/metrics` endpoint's protection, configured like Prometheus exporters
//! (exporter-toolkit's web configuration file): TLS with a certificate and key, and HTTP basic
//! authentication against bcrypt hashes. Plus what every exporter needs on a shared network:
//! a request timeout and a bound on concurrent connections.
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: rocemon.crt      # relative to this file
//!   key_file: rocemon.key
//! basic_auth_users:
//!   prometheus: $2y$10$...      # htpasswd -nBC 10 "" | tr -d ':\n'
//! ```

use crate::error::UsageError;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Open connections at most (idle keep-alive and stalled ones included). When they are all
/// open, the one idle the longest is closed for a new one; with none idle, the new one is
/// answered 503 and closed at once.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Requests served at once; more wait (up to the request timeout) for a turn.
pub const DEFAULT_MAX_CONCURRENT_REQUESTS: usize = 4;
/// Time a client has to send its request headers (and finish a TLS handshake): short, so a
/// client that opens connections and sends nothing holds each only briefly.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(2);
/// Open connections from one client address at most: one client cannot take them all.
pub const DEFAULT_MAX_CONNECTIONS_PER_CLIENT: usize = 16;

/// `[web]` of the agent's configuration.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebSection {
    /// An exporter-toolkit style web configuration file (TLS, basic auth).
    pub config_file: Option<PathBuf>,
    pub request_timeout_seconds: Option<f64>,
    pub max_connections: Option<usize>,
    pub max_concurrent_requests: Option<usize>,
    pub header_timeout_seconds: Option<f64>,
    pub max_connections_per_client: Option<usize>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WebFile {
    tls_server_config: Option<TlsFile>,
    basic_auth_users: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsFile {
    cert_file: PathBuf,
    key_file: PathBuf,
}

/// The validated settings.
#[derive(Clone, Debug, PartialEq)]
pub struct WebSettings {
    /// Certificate chain and key files (absolute).
    pub tls: Option<(PathBuf, PathBuf)>,
    /// User -> bcrypt hash.
    pub users: BTreeMap<String, String>,
    pub request_timeout: Duration,
    pub max_connections: usize,
    pub max_concurrent_requests: usize,
    pub header_timeout: Duration,
    pub max_connections_per_client: usize,
}

impl Default for WebSettings {
    fn default() -> Self {
        WebSettings {
            tls: None,
            users: BTreeMap::new(),
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_concurrent_requests: DEFAULT_MAX_CONCURRENT_REQUESTS,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            max_connections_per_client: DEFAULT_MAX_CONNECTIONS_PER_CLIENT,
        }
    }
}

fn bad(msg: String) -> UsageError {
    UsageError::BadConfig(msg)
}

impl WebSettings {
    /// Reads and checks everything up front: the file, the certificate and key (they must
    /// make a working TLS configuration) and every hash.
    pub fn load(
        section: &WebSection,
        override_file: Option<&Path>,
    ) -> Result<WebSettings, UsageError> {
        let mut w = WebSettings::default();
        if let Some(t) = section.request_timeout_seconds {
            if !(0.1..=300.0).contains(&t) {
                return Err(bad(format!(
                    "web.request_timeout_seconds {t} is out of range; use 0.1 to 300"
                )));
            }
            w.request_timeout = Duration::from_secs_f64(t);
        }
        if let Some(n) = section.max_connections {
            if !(1..=10_000).contains(&n) {
                return Err(bad(format!(
                    "web.max_connections {n} is out of range; use 1 to 10000"
                )));
            }
            w.max_connections = n;
        }
        if let Some(n) = section.max_concurrent_requests {
            if !(1..=1000).contains(&n) {
                return Err(bad(format!(
                    "web.max_concurrent_requests {n} is out of range; use 1 to 1000"
                )));
            }
            w.max_concurrent_requests = n;
        }
        if let Some(t) = section.header_timeout_seconds {
            if !(0.1..=300.0).contains(&t) {
                return Err(bad(format!(
                    "web.header_timeout_seconds {t} is out of range; use 0.1 to 300"
                )));
            }
            w.header_timeout = Duration::from_secs_f64(t);
        }
        w.header_timeout = w.header_timeout.min(w.request_timeout);
        if let Some(n) = section.max_connections_per_client {
            if !(1..=10_000).contains(&n) {
                return Err(bad(format!(
                    "web.max_connections_per_client {n} is out of range; use 1 to 10000"
                )));
            }
            w.max_connections_per_client = n;
        }
        let Some(file) = override_file.or(section.config_file.as_deref()) else {
            return Ok(w);
        };
        let text = std::fs::read_to_string(file).map_err(|e| {
            bad(format!(
                "cannot read web configuration {}: {e}; check --web-config / web.config_file",
                file.display()
            ))
        })?;
        let f: WebFile = serde_yaml_ng::from_str(&text).map_err(|e| {
            bad(format!(
                "web configuration {}: {e}; it takes tls_server_config (cert_file, key_file) and basic_auth_users (user: bcrypt hash)",
                file.display()
            ))
        })?;
        let base = file.parent().unwrap_or(Path::new("."));
        if let Some(t) = f.tls_server_config {
            let (cert, key) = (base.join(t.cert_file), base.join(t.key_file));
            server_config(&cert, &key).map_err(|e| {
                bad(format!(
                    "web configuration {}: tls_server_config: {e}",
                    file.display()
                ))
            })?;
            w.tls = Some((cert, key));
        }
        for (user, hash) in f.basic_auth_users.unwrap_or_default() {
            if bcrypt::verify("", &hash).is_err() {
                return Err(bad(format!(
                    "web configuration {}: basic_auth_users.{user} is not a bcrypt hash; make one with `htpasswd -nBC 10 \"\" | tr -d ':\\n'`",
                    file.display()
                )));
            }
            w.users.insert(user, hash);
        }
        Ok(w)
    }
}

/// A rustls server configuration from PEM files.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| format!("cert_file {}: {e}", cert.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("cert_file {}: {e}", cert.display()))?;
    if chain.is_empty() {
        return Err(format!(
            "cert_file {}: no certificate in it",
            cert.display()
        ));
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| format!("key_file {}: {e}", key.display()))?;
    let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .map_err(|e| format!("certificate and key do not match or are unusable: {e}"))?;
    Ok(Arc::new(cfg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_web_files_name_the_key_and_the_fix() {
        let dir = std::env::temp_dir().join(format!("rocemon-web-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("web.yml");
        std::fs::write(&f, "basic_auth_users:\n  alice: plain\n").unwrap();
        let e = WebSettings::load(&WebSection::default(), Some(&f)).unwrap_err();
        assert!(
            e.to_string()
                .contains("basic_auth_users.alice is not a bcrypt hash"),
            "{e}"
        );
        std::fs::write(
            &f,
            "tls_server_config:\n  cert_file: nope.crt\n  key_file: nope.key\n",
        )
        .unwrap();
        let e = WebSettings::load(&WebSection::default(), Some(&f)).unwrap_err();
        assert!(e.to_string().contains("cert_file"), "{e}");
        std::fs::write(&f, "tls_config: {}\n").unwrap();
        let e = WebSettings::load(&WebSection::default(), Some(&f)).unwrap_err();
        assert!(e.to_string().contains("unknown field"), "{e}");
        let hash = bcrypt::hash("secret", 4).unwrap();
        std::fs::write(&f, format!("basic_auth_users:\n  alice: '{hash}'\n")).unwrap();
        let w = WebSettings::load(&WebSection::default(), Some(&f)).unwrap();
        assert_eq!(w.users.len(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
