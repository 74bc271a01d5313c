//! The HTTP endpoint: `/metrics` in the Prometheus text format, `/` with a pointer to it.

use crate::metrics::Metrics;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use std::future::Future;
use std::sync::{Arc, Mutex};

pub type SharedMetrics = Arc<Mutex<Metrics>>;

async fn metrics(State(m): State<SharedMetrics>) -> impl IntoResponse {
    let text = match m.lock() {
        Ok(m) => m.encode(),
        Err(_) => Err(anyhow::anyhow!("metrics lock poisoned")),
    };
    match text {
        Ok(t) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            t,
        ),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("rocemon: cannot encode metrics: {e}\n"),
        ),
    }
}

async fn index() -> &'static str {
    "rocemon: RoCEv2 telemetry. Metrics are at /metrics.\n"
}

/// Serves until `shutdown` completes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics_state: SharedMetrics,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/", get(index))
        .with_state(metrics_state);
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}
