//! The HTTP endpoint: `/metrics` (Prometheus text format), `/api/v1/flows`, `/api/v1/ecmp`
//! `/api/v1/lossless`, `/api/v1/sflow` and `/api/v1/training`
//! (JSON), and `/` with pointers to them; optional TLS and basic authentication
//! ([`crate::config::web`]), a request timeout and bounds on connections and concurrent requests.

use crate::config::web::WebSettings;
use crate::export::api::ApiView;
use crate::export::metrics::Metrics;
use axum::extract::{Query, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::get;
use axum::Router;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Semaphore;

#[derive(Clone)]
pub struct Shared {
    pub metrics: Arc<Mutex<Metrics>>,
    pub api: Arc<Mutex<ApiView>>,
}

fn internal(msg: &str) -> Response {
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!("rocemon: {msg}\n"),
    )
        .into_response()
}

async fn metrics(State(s): State<Shared>) -> Response {
    let text = match s.metrics.lock() {
        Ok(m) => m.encode(),
        Err(_) => return internal("metrics lock poisoned"),
    };
    match text {
        Ok(t) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            t,
        )
            .into_response(),
        Err(e) => internal(&format!("cannot encode metrics: {e}")),
    }
}

async fn flows(State(s): State<Shared>, Query(q): Query<HashMap<String, String>>) -> Response {
    let limit = match q.get("limit").map(|v| v.parse::<usize>()) {
        None => usize::MAX,
        Some(Ok(n)) => n,
        Some(Err(_)) => {
            return (
                StatusCode::BAD_REQUEST,
                "rocemon: limit must be a whole number, e.g. ?limit=20\n",
            )
                .into_response()
        }
    };
    let Ok(api) = s.api.lock() else {
        return internal("api lock poisoned");
    };
    let mut doc = api.flows.clone();
    doc.flows.truncate(limit);
    Json(doc).into_response()
}

async fn ecmp(State(s): State<Shared>) -> Response {
    match s.api.lock() {
        Ok(api) => Json(api.ecmp.clone()).into_response(),
        Err(_) => internal("api lock poisoned"),
    }
}

async fn lossless(State(s): State<Shared>) -> Response {
    match s.api.lock() {
        Ok(api) => Json(api.lossless.clone()).into_response(),
        Err(_) => internal("api lock poisoned"),
    }
}

async fn sflow(State(s): State<Shared>) -> Response {
    match s.api.lock() {
        Ok(api) => match &api.sflow {
            Some(r) => Json(r.clone()).into_response(),
            None => (
                axum::http::StatusCode::NOT_FOUND,
                "the sFlow collector is off (rocemon run --sflow-listen ADDR)\n",
            )
                .into_response(),
        },
        Err(_) => internal("api lock poisoned"),
    }
}

async fn training(State(s): State<Shared>) -> Response {
    match s.api.lock() {
        Ok(api) => Json(api.training.clone()).into_response(),
        Err(_) => internal("api lock poisoned"),
    }
}

async fn findings(State(s): State<Shared>) -> Response {
    match s.api.lock() {
        Ok(api) => Json(api.findings.clone()).into_response(),
        Err(_) => internal("api lock poisoned"),
    }
}

async fn summary(State(s): State<Shared>) -> Response {
    match s.api.lock() {
        Ok(api) => Json(api.summary.clone()).into_response(),
        Err(_) => internal("api lock poisoned"),
    }
}

/// Liveness: the agent serves, and its state is not poisoned by a panic.
async fn healthz(State(s): State<Shared>) -> Response {
    match (s.metrics.lock(), s.api.lock()) {
        (Ok(_), Ok(_)) => (StatusCode::OK, "ok\n").into_response(),
        _ => internal("a lock is poisoned; restart the agent"),
    }
}

/// Readiness: the first poll of the counters has been made (its figures are being served).
async fn readyz(State(s): State<Shared>) -> Response {
    match s.api.lock() {
        Ok(api) if api.ready => (StatusCode::OK, "ready\n").into_response(),
        Ok(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "starting: no poll of the counters yet\n",
        )
            .into_response(),
        Err(_) => internal("api lock poisoned"),
    }
}

async fn index() -> &'static str {
    "rocemon: RoCEv2 telemetry.\n/metrics       Prometheus metrics\n/api/v1/flows  top flows (JSON; ?limit=N)\n/api/v1/ecmp   ECMP groups, predicted paths, shared 5-tuples (JSON)\n/api/v1/lossless  PFC, PAUSE, RoCE by DSCP and priority, lossy RoCE, NIC pause counters (JSON)\n/api/v1/sflow  the sFlow collector: agents, samples, estimates, switch ports, flows (JSON)\n/api/v1/training  the training rhythm per interface: step period, duty, slow steps, last steps (JSON)\n/api/v1/findings  what the counts mean: active and recently closed findings (JSON)\n/api/v1/summary  the host at a glance: RoCE bits/s, CE share, CNPs/s, paused share, findings (JSON)\n/healthz       200 while the agent serves\n/readyz        200 once the first poll is made, 503 before\n"
}

/// Basic authentication state: the users, the `Authorization` values already verified and
/// those already refused (bcrypt is slow on purpose; a scraper sends the same header every
/// time, and so does an attacker), the dummy hash an unknown user is checked against, and a
/// pool of one bcrypt check at a time.
struct Auth {
    users: BTreeMap<String, String>,
    verified: Mutex<HashSet<String>>,
    refused: Mutex<HashSet<String>>,
    dummy: String,
    /// One bcrypt check runs at a time (one core at most, whatever the load)...
    checks: Arc<Semaphore>,
    /// ...and this many wait for it at most; more are answered 503 at once.
    queue: Arc<Semaphore>,
    timeout: Duration,
}

/// Password checks that may wait for the bcrypt pool at once.
const AUTH_QUEUE: usize = 8;

/// Each cache of credentials holds this many entries at most.
const AUTH_CACHE: usize = 64;

impl Auth {
    fn new(users: BTreeMap<String, String>, timeout: Duration) -> Auth {
        Auth {
            // No users, no checks: no hash (a bcrypt hash at the default cost is about 0.3 s
            // of CPU at every start).
            dummy: if users.is_empty() {
                String::new()
            } else {
                dummy_hash(&users)
            },
            users,
            verified: Mutex::new(HashSet::new()),
            refused: Mutex::new(HashSet::new()),
            checks: Arc::new(Semaphore::new(1)),
            queue: Arc::new(Semaphore::new(AUTH_QUEUE)),
            timeout,
        }
    }

    fn cached(set: &Mutex<HashSet<String>>, header: &str) -> bool {
        set.lock().map(|v| v.contains(header)).unwrap_or(false)
    }

    fn remember(set: &Mutex<HashSet<String>>, header: String) {
        if let Ok(mut v) = set.lock() {
            if v.len() >= AUTH_CACHE {
                v.clear();
            }
            v.insert(header);
        }
    }

    /// Whether `header` authenticates: from the caches, else by one bcrypt check on the
    /// blocking pool, one at a time (None: the queue is full or no turn came in time).
    async fn check(self: &Arc<Self>, header: String) -> Option<bool> {
        if Self::cached(&self.verified, &header) {
            return Some(true);
        }
        if Self::cached(&self.refused, &header) {
            return Some(false);
        }
        let _queued = self.queue.clone().try_acquire_owned().ok()?;
        let turn = tokio::time::timeout(self.timeout, self.checks.clone().acquire_owned())
            .await
            .ok()?
            .ok()?;
        let me = self.clone();
        let h = header.clone();
        let ok = tokio::task::spawn_blocking(move || {
            let _turn = turn;
            check_basic(&me.users, &me.dummy, &h)
        })
        .await
        .unwrap_or(false);
        Self::remember(if ok { &self.verified } else { &self.refused }, header);
        Some(ok)
    }
}

/// A bcrypt hash of the highest cost the configured users have, for unknown users: checking
/// one costs what checking a configured user costs, so timing does not tell which names exist.
fn dummy_hash(users: &BTreeMap<String, String>) -> String {
    let cost = users
        .values()
        .filter_map(|h| h.split('$').nth(2)?.parse::<u32>().ok())
        .max()
        .unwrap_or(bcrypt::DEFAULT_COST);
    bcrypt::hash("rocemon: no such user", cost.clamp(4, 31))
        .unwrap_or_else(|_| "$2b$10$mpRa4Dk6jZcWX61slrTKH.prA0g9kA1QYvI59NRMpvbsICPQzAXmy".into())
}

async fn basic_auth(State(a): State<Arc<Auth>>, req: Request, next: Next) -> Response {
    if a.users.is_empty() {
        return next.run(req).await;
    }
    let header = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    match a.check(header).await {
        Some(true) => next.run(req).await,
        Some(false) => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Basic realm=\"rocemon\"")],
            "rocemon: authentication required\n",
        )
            .into_response(),
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, "1")],
            "rocemon: too many password checks\n",
        )
            .into_response(),
    }
}

/// Checks `Basic base64(user:password)` against the bcrypt hashes. An unknown user costs a
/// bcrypt run of the same cost, so timing does not tell which users exist.
fn check_basic(users: &BTreeMap<String, String>, dummy: &str, header: &str) -> bool {
    use base64::Engine;
    let Some(b64) = header.strip_prefix("Basic ") else {
        return false;
    };
    let Ok(raw) = base64::engine::general_purpose::STANDARD.decode(b64.trim()) else {
        return false;
    };
    let Ok(text) = String::from_utf8(raw) else {
        return false;
    };
    let Some((user, pass)) = text.split_once(':') else {
        return false;
    };
    match users.get(user) {
        Some(hash) => bcrypt::verify(pass, hash).unwrap_or(false),
        None => {
            let _ = bcrypt::verify(pass, dummy);
            false
        }
    }
}

/// Limits: requests wait for one of `max_concurrent_requests` turns (503 when none comes
/// within the timeout), and each is answered within the timeout (else 503).
#[derive(Clone)]
struct Limits {
    turns: Arc<Semaphore>,
    timeout: Duration,
}

async fn limit(State(l): State<Limits>, req: Request, next: Next) -> Response {
    let unavailable = |why: &str| {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, "1")],
            format!("rocemon: {why}\n"),
        )
            .into_response()
    };
    let Ok(Ok(_turn)) = tokio::time::timeout(l.timeout, l.turns.clone().acquire_owned()).await
    else {
        return unavailable("too many concurrent requests");
    };
    match tokio::time::timeout(l.timeout, next.run(req)).await {
        Ok(r) => r,
        Err(_) => unavailable("request timed out"),
    }
}

/// The routes with authentication and limits.
fn app(shared: Shared, web: &WebSettings) -> Router {
    let auth = Arc::new(Auth::new(web.users.clone(), web.request_timeout));
    let limits = Limits {
        turns: Arc::new(Semaphore::new(web.max_concurrent_requests)),
        timeout: web.request_timeout,
    };
    Router::new()
        .route("/metrics", get(metrics))
        .route("/api/v1/flows", get(flows))
        .route("/api/v1/ecmp", get(ecmp))
        .route("/api/v1/lossless", get(lossless))
        .route("/api/v1/sflow", get(sflow))
        .route("/api/v1/training", get(training))
        .route("/api/v1/findings", get(findings))
        .route("/api/v1/summary", get(summary))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/", get(index))
        .with_state(shared)
        // The last layer runs first: credentials are checked before a request takes one of
        // the turns, so requests that fail them never crowd out a scraper's; a remembered
        // header costs nothing, and new ones queue for the bounded bcrypt pool.
        .layer(middleware::from_fn_with_state(limits, limit))
        .layer(middleware::from_fn_with_state(auth, basic_auth))
}

/// One open connection of a client address, counted in the per-client table while it lives.
struct ClientSlot {
    table: Arc<Mutex<HashMap<std::net::IpAddr, usize>>>,
    ip: std::net::IpAddr,
}

impl ClientSlot {
    /// A slot for `ip`, or None when it already has `max` connections open.
    fn take(
        table: &Arc<Mutex<HashMap<std::net::IpAddr, usize>>>,
        ip: std::net::IpAddr,
        max: usize,
    ) -> Option<ClientSlot> {
        let mut t = table.lock().ok()?;
        let n = t.entry(ip).or_insert(0);
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(ClientSlot {
            table: table.clone(),
            ip,
        })
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        if let Ok(mut t) = self.table.lock() {
            if let Some(n) = t.get_mut(&self.ip) {
                *n -= 1;
                if *n == 0 {
                    t.remove(&self.ip);
                }
            }
        }
    }
}

/// Serves until `shutdown` completes: our own accept loop over hyper, so that a client that
/// stalls while sending its headers is cut off after the request timeout, open connections are
/// bounded, and TLS can sit in between.
pub async fn serve(
    listener: tokio::net::TcpListener,
    shared: Shared,
    web: WebSettings,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let tls = match &web.tls {
        Some((cert, key)) => Some(tokio_rustls::TlsAcceptor::from(
            crate::config::web::server_config(cert, key).map_err(std::io::Error::other)?,
        )),
        None => None,
    };
    let service = hyper_util::service::TowerToHyperService::new(app(shared, &web));
    let conns = Arc::new(Semaphore::new(web.max_connections));
    let registry = super::conns::Registry::default();
    let per_client = Arc::new(Mutex::new(HashMap::<std::net::IpAddr, usize>::new()));
    let header_timeout = web.header_timeout;
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => break,
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    // Out of file descriptors and the like: back off, keep serving.
                    log::warn!("accept: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let Some(client) = ClientSlot::take(&per_client, peer.ip(), web.max_connections_per_client)
        else {
            refuse(stream, tls.is_none(), header_timeout);
            continue;
        };
        // Full: the connection idle the longest is asked to close, and this one waits (at
        // most the header timeout) for its place; with none idle, it is refused at once.
        let permit = match conns.clone().try_acquire_owned() {
            Ok(p) => Some(p),
            Err(_) if registry.close_oldest_idle() => None,
            Err(_) => {
                refuse(stream, tls.is_none(), header_timeout);
                continue;
            }
        };
        let (service, tls, conns) = (service.clone(), tls.clone(), conns.clone());
        let entry = registry.open();
        let registry = registry.clone();
        tokio::spawn(async move {
            let _client = client;
            let _permit = match permit {
                Some(p) => p,
                None => match tokio::time::timeout(header_timeout, conns.acquire_owned()).await {
                    Ok(Ok(p)) => p,
                    _ => {
                        refuse(stream, tls.is_none(), header_timeout);
                        return;
                    }
                },
            };
            let id = entry.id;
            let tracked = hyper::service::service_fn(move |req| {
                registry.begin(id);
                let answer = hyper::service::Service::call(&service, req);
                let registry = registry.clone();
                async move {
                    let r = answer.await;
                    registry.end(id);
                    r
                }
            });
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(header_timeout);
            match tls {
                Some(acceptor) => {
                    let s = tokio::select! {
                        r = tokio::time::timeout(header_timeout, acceptor.accept(stream)) => match r {
                            Ok(Ok(s)) => s,
                            _ => return,
                        },
                        _ = entry.close.notified() => return,
                    };
                    let conn = http.serve_connection(hyper_util::rt::TokioIo::new(s), tracked);
                    serve_until_closed(conn, &entry).await;
                }
                None => {
                    let conn = http.serve_connection(hyper_util::rt::TokioIo::new(stream), tracked);
                    serve_until_closed(conn, &entry).await;
                }
            }
        });
    }
    Ok(())
}

/// Serves a connection until it ends, or until the server asks it to close (then it ends
/// gracefully: at once when idle, after its response when busy).
async fn serve_until_closed<I, S>(
    conn: hyper::server::conn::http1::Connection<I, S>,
    entry: &super::conns::Entry,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin,
    S: hyper::service::HttpService<hyper::body::Incoming>,
    S::ResBody: 'static,
    <S::ResBody as hyper::body::Body>::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => {}
        _ = entry.close.notified() => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.as_mut().await;
        }
    }
}

/// Answers 503 and closes (plain HTTP; a TLS client is closed without an answer), from a task
/// of its own: a client that never reads cannot stall the accept loop.
fn refuse(mut stream: tokio::net::TcpStream, plain: bool, header_timeout: Duration) {
    if !plain {
        return;
    }
    tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        let _ = tokio::time::timeout(
            header_timeout,
            stream.write_all(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\nRetry-After: 1\r\n\r\n"),
        )
        .await;
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(hash: &str) -> u32 {
        hash.split('$').nth(2).unwrap().parse().unwrap()
    }

    #[test]
    fn an_unknown_user_costs_what_the_configured_users_cost() {
        for c in [4u32, 6] {
            let users = BTreeMap::from([("p".to_string(), bcrypt::hash("pw", c).unwrap())]);
            assert_eq!(cost(&dummy_hash(&users)), c, "c {c:?}");
        }
        let users = BTreeMap::from([
            ("a".to_string(), bcrypt::hash("pw", 4).unwrap()),
            ("b".to_string(), bcrypt::hash("pw", 5).unwrap()),
        ]);
        assert_eq!(cost(&dummy_hash(&users)), 5, "the highest cost");
    }

    #[test]
    fn without_users_no_hash_is_made() {
        let a = Auth::new(BTreeMap::new(), Duration::from_secs(1));
        assert!(a.dummy.is_empty(), "no bcrypt work at start without users");
    }

    #[test]
    fn basic_credentials_are_checked_against_the_hashes() {
        use base64::Engine;
        let users = BTreeMap::from([("p".to_string(), bcrypt::hash("pw", 4).unwrap())]);
        let dummy = dummy_hash(&users);
        let h = |s: &str| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(s)
            )
        };
        assert!(check_basic(&users, &dummy, &h("p:pw")));
        assert!(!check_basic(&users, &dummy, &h("p:no")));
        assert!(!check_basic(&users, &dummy, &h("q:pw")));
        assert!(!check_basic(&users, &dummy, "Bearer x"));
    }

    fn shared() -> Shared {
        Shared {
            metrics: Arc::new(Mutex::new(Metrics::new().unwrap())),
            api: Arc::new(Mutex::new(ApiView::default())),
        }
    }

    #[tokio::test]
    async fn readyz_waits_for_the_first_poll_and_healthz_does_not() {
        let s = shared();
        assert_eq!(healthz(State(s.clone())).await.status(), StatusCode::OK);
        assert_eq!(
            readyz(State(s.clone())).await.status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        s.api.lock().unwrap().ready = true;
        assert_eq!(readyz(State(s)).await.status(), StatusCode::OK);
    }

    #[test]
    fn one_client_holds_at_most_its_share_of_connections() {
        let table = Arc::new(Mutex::new(HashMap::new()));
        let a: std::net::IpAddr = "127.0.0.2".parse().unwrap();
        let b: std::net::IpAddr = "127.0.0.3".parse().unwrap();
        let held: Vec<_> = (0..3)
            .map(|_| ClientSlot::take(&table, a, 3).unwrap())
            .collect();
        assert!(ClientSlot::take(&table, a, 3).is_none());
        assert!(ClientSlot::take(&table, b, 3).is_some());
        drop(held);
        assert!(ClientSlot::take(&table, a, 3).is_some());
    }
}
