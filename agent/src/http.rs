//! The HTTP endpoint: `/metrics` (Prometheus text format), `/api/v1/flows` and `/api/v1/ecmp`
//! (JSON), and `/` with pointers to them.

use crate::api::ApiView;
use crate::metrics::Metrics;
use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::get;
use axum::Router;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

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

/// Serves until `shutdown` completes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    shared: Shared,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/api/v1/flows", get(flows))
        .route("/api/v1/ecmp", get(ecmp))
        .route("/", get(index))
        .with_state(shared);
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}
