//! The HTTP endpoint: `/metrics` (Prometheus text format), `/api/v1/flows` and `/api/v1/ecmp`
//! (JSON), and `/` with pointers to them; optional TLS and basic authentication
//! ([`crate::web`]), a request timeout and bounds on connections and concurrent requests.

use crate::api::ApiView;
use crate::metrics::Metrics;
use crate::web::WebSettings;
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

async fn index() -> &'static str {
    "rocemon: RoCEv2 telemetry.\n/metrics       Prometheus metrics\n/api/v1/flows  top flows (JSON; ?limit=N)\n/api/v1/ecmp   ECMP groups, predicted paths, shared 5-tuples (JSON)\n"
}

/// Basic authentication state: the users, and the `Authorization` values already verified
/// (bcrypt is slow on purpose; a scraper sends the same header every time).
struct Auth {
    users: BTreeMap<String, String>,
    verified: Mutex<HashSet<String>>,
}

/// The cache of verified credentials holds this many entries at most.
const AUTH_CACHE: usize = 64;

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
    let cached = a
        .verified
        .lock()
        .map(|v| v.contains(&header))
        .unwrap_or(false);
    let ok = cached || {
        let users = a.users.clone();
        let h = header.clone();
        tokio::task::spawn_blocking(move || check_basic(&users, &h))
            .await
            .unwrap_or(false)
    };
    if !ok {
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Basic realm=\"rocemon\"")],
            "rocemon: authentication required\n",
        )
            .into_response();
    }
    if !cached {
        if let Ok(mut v) = a.verified.lock() {
            if v.len() >= AUTH_CACHE {
                v.clear();
            }
            v.insert(header);
        }
    }
    next.run(req).await
}

/// Checks `Basic base64(user:password)` against the bcrypt hashes. An unknown user costs a
/// bcrypt run too, so timing does not tell which users exist.
fn check_basic(users: &BTreeMap<String, String>, header: &str) -> bool {
    use base64::Engine;
    const DUMMY: &str = "$2b$10$mpRa4Dk6jZcWX61slrTKH.prA0g9kA1QYvI59NRMpvbsICPQzAXmy";
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
            let _ = bcrypt::verify(pass, DUMMY);
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
    let auth = Arc::new(Auth {
        users: web.users.clone(),
        verified: Mutex::new(HashSet::new()),
    });
    let limits = Limits {
        turns: Arc::new(Semaphore::new(web.max_concurrent_requests)),
        timeout: web.request_timeout,
    };
    Router::new()
        .route("/metrics", get(metrics))
        .route("/api/v1/flows", get(flows))
        .route("/api/v1/ecmp", get(ecmp))
        .route("/", get(index))
        .with_state(shared)
        .layer(middleware::from_fn_with_state(limits, limit))
        .layer(middleware::from_fn_with_state(auth, basic_auth))
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
            crate::web::server_config(cert, key).map_err(std::io::Error::other)?,
        )),
        None => None,
    };
    let service = hyper_util::service::TowerToHyperService::new(app(shared, &web));
    let conns = Arc::new(Semaphore::new(web.max_connections));
    let timeout = web.request_timeout;
    tokio::pin!(shutdown);
    loop {
        let (mut stream, _) = tokio::select! {
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
        let Ok(permit) = conns.clone().try_acquire_owned() else {
            if tls.is_none() {
                use tokio::io::AsyncWriteExt;
                let _ = stream
                    .write_all(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\nRetry-After: 1\r\n\r\n")
                    .await;
            }
            continue;
        };
        let (service, tls) = (service.clone(), tls.clone());
        tokio::spawn(async move {
            let _permit = permit;
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(timeout);
            match tls {
                Some(acceptor) => {
                    let Ok(Ok(s)) = tokio::time::timeout(timeout, acceptor.accept(stream)).await
                    else {
                        return;
                    };
                    let _ = http
                        .serve_connection(hyper_util::rt::TokioIo::new(s), service)
                        .await;
                }
                None => {
                    let _ = http
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                }
            }
        });
    }
    Ok(())
}
