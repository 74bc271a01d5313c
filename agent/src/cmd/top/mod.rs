//! `rocemon top`: a live view of a running agent, read from its JSON API: the host's totals,
//! the active findings, top flows by rate (elephants highlighted), ECMP groups with their
//! collisions, shared 5-tuples, the lossless fabric (PFC, PAUSE, lossy RoCE, the NIC's pause
//! counters), the switches (sFlow) and the training rhythm. A terminal UI on a terminal
//! ([`tui`]); plain text with `--once` or into a pipe ([`plain`]). It
//! speaks https (trusting `--ca-file`) and basic auth when the agent's web configuration asks.

pub mod plain;
pub mod rows;
pub mod tui;

use crate::config::cli::TopArgs;
use crate::error::UsageError;
use anyhow::{Context, Result};
use plain::render;
use rows::Docs;
use serde_json::Value;
use std::io::{IsTerminal, Write};
use std::time::Duration;

fn get(agent: &ureq::Agent, url: &str, auth: Option<&str>) -> Result<Value> {
    let mut req = agent.get(url);
    if let Some(a) = auth {
        req = req.set("Authorization", a);
    }
    match req.call() {
        Ok(r) => r
            .into_json()
            .map(rows::sanitized)
            .with_context(|| format!("{url} did not return JSON")),
        Err(ureq::Error::Status(401, _)) => Err(UsageError::BadConfig(format!(
            "{url} wants credentials: pass --user and --password-file (or ROCEMON_PASSWORD)"
        ))
        .into()),
        // Nobody there is the user's to fix (the address): exit 2 like every usage error.
        Err(e) => Err(UsageError::Unreachable {
            url: url.to_string(),
            reason: e.to_string(),
        }
        .into()),
    }
}

/// `host` with rocemon's port (9442) where it names none (`localhost`, `[::1]`): not the
/// URL's default port 80, where no rocemon listens.
fn with_port(host: &str) -> String {
    let named = match host.rsplit_once(':') {
        Some((h, p)) => {
            !p.is_empty()
                && p.bytes().all(|b| b.is_ascii_digit())
                && (!h.contains(':') || h.ends_with(']'))
        }
        None => false,
    };
    if named {
        host.to_string()
    } else {
        format!("{host}:9442")
    }
}

/// How to reach the agent: the base URL, the HTTP client (with the CA to trust for https)
/// and the Authorization header.
pub struct Client {
    base: String,
    agent: ureq::Agent,
    auth: Option<String>,
}

/// The client the flags describe.
fn client(args: &TopArgs) -> Result<Client> {
    let https = args.ca_file.is_some() || args.addr.starts_with("https://");
    let host = args
        .addr
        .trim_start_matches("https://")
        .trim_start_matches("http://")
        .trim_end_matches('/');
    let base = format!(
        "{}://{}",
        if https { "https" } else { "http" },
        with_port(host)
    );
    let mut b = ureq::AgentBuilder::new().timeout(Duration::from_secs(5));
    if let Some(ca) = &args.ca_file {
        use rustls_pki_types::pem::PemObject;
        let mut roots = rustls::RootCertStore::empty();
        let certs = rustls_pki_types::CertificateDer::pem_file_iter(ca)
            .and_then(|i| i.collect::<Result<Vec<_>, _>>())
            .map_err(|e| UsageError::BadConfig(format!("--ca-file {}: {e}", ca.display())))?;
        for c in certs {
            roots
                .add(c)
                .map_err(|e| UsageError::BadConfig(format!("--ca-file {}: {e}", ca.display())))?;
        }
        let cfg = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
        b = b.tls_config(std::sync::Arc::new(cfg));
    }
    let auth = match &args.user {
        Some(u) => {
            let pass = match &args.password_file {
                Some(f) => std::fs::read_to_string(f)
                    .map_err(|e| {
                        UsageError::BadConfig(format!("--password-file {}: {e}", f.display()))
                    })?
                    .trim_end_matches(['\n', '\r'])
                    .to_string(),
                None => std::env::var("ROCEMON_PASSWORD").map_err(|_| {
                    UsageError::BadConfig(
                        "--user needs a password: --password-file FILE or ROCEMON_PASSWORD".into(),
                    )
                })?,
            };
            use base64::Engine;
            let token = base64::engine::general_purpose::STANDARD.encode(format!("{u}:{pass}"));
            Some(format!("Basic {token}"))
        }
        None => None,
    };
    Ok(Client {
        base,
        agent: b.build(),
        auth,
    })
}

/// The agent's documents of one refresh. The flows and ECMP documents every agent serves;
/// the others are left Null where an agent has none (an older agent; sFlow without a
/// collector).
pub fn fetch(c: &Client, limit: usize) -> Result<Docs> {
    let get = |path: &str| get(&c.agent, &format!("{}{path}", c.base), c.auth.as_deref());
    Ok(Docs {
        flows: get(&format!("/api/v1/flows?limit={limit}"))?,
        ecmp: get("/api/v1/ecmp")?,
        lossless: get("/api/v1/lossless").unwrap_or(Value::Null),
        sflow: get("/api/v1/sflow").unwrap_or(Value::Null),
        training: get("/api/v1/training").unwrap_or(Value::Null),
        summary: get("/api/v1/summary").unwrap_or(Value::Null),
        findings: get("/api/v1/findings").unwrap_or(Value::Null),
        now_s: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0),
    })
}

/// The terminal UI where stdout is a terminal; plain screens (one per refresh) with `--once`
/// or when piped.
pub fn run(args: TopArgs) -> Result<()> {
    let c = client(&args)?;
    // The first refresh before the terminal is taken: an agent that is not there is a
    // usage error (exit 2) said on a normal terminal.
    let first = fetch(&c, args.limit)?;
    let interval = Duration::from_secs_f64(args.interval.max(0.1));
    if !args.once && std::io::stdout().is_terminal() {
        let limit = args.limit;
        return tui::run(move || fetch(&c, limit), interval, first, &args.addr);
    }
    let iterations = if args.once { 1 } else { args.iterations };
    let mut docs = first;
    let mut i = 0u64;
    loop {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", render(&docs, false))?;
        out.flush()?;
        i += 1;
        if iterations > 0 && i >= iterations {
            return Ok(());
        }
        std::thread::sleep(interval);
        docs = fetch(&c, args.limit)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_without_a_port_gets_rocemons() {
        for (addr, want) in [
            ("localhost", "localhost:9442"),
            ("localhost:9500", "localhost:9500"),
            ("10.0.0.1", "10.0.0.1:9442"),
            ("10.0.0.1:80", "10.0.0.1:80"),
            ("[::1]", "[::1]:9442"),
            ("[::1]:9443", "[::1]:9443"),
        ] {
            assert_eq!(with_port(addr), want, "{addr}");
        }
    }
}
