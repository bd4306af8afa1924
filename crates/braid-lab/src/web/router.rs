//! The routes, the authentication middleware in front of all of them, and
//! the headers every response carries.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{header, HeaderValue};
use axum::middleware;
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;

use super::pages::{analysis, experiment, new_study, studies, study};
use super::{api, auth, sse, App, WebError};
use crate::analysis::ExportFormat;

/// Every route of the web interface over `app`, behind the token check of
/// [`auth`](super::auth).
pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/", get(studies::page_studies))
        .route("/events", get(sse::events))
        .route("/new", get(new_study::page_new))
        .route("/studies/{name}", get(study::page_study))
        .route("/studies/{name}/analysis", get(analysis::page_analysis))
        .route("/studies/{name}/analysis/export", get(analysis::export_analysis))
        .route("/studies/{name}/export.csv", get(export_csv))
        .route("/studies/{name}/export.jsonl", get(export_jsonl))
        .route("/experiments/{id}", get(experiment::page_experiment))
        .route("/api/studies", get(api::studies).post(api::create_study))
        .route("/api/studies/{id}", get(api::study))
        .route("/api/studies/{id}/experiments", get(api::experiments))
        .route("/api/studies/{id}/values", post(api::add_values))
        .route("/api/experiments/{id}", get(api::experiment))
        .route("/api/plan", post(api::plan))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(app.clone(), auth::check))
        .layer(middleware::map_response(headers))
        .with_state(app)
}

async fn export_csv(State(app): State<Arc<App>>, Path(name): Path<String>) -> Result<Response, WebError> {
    api::export_study(app, name, ExportFormat::Csv).await
}

async fn export_jsonl(State(app): State<Arc<App>>, Path(name): Path<String>) -> Result<Response, WebError> {
    api::export_study(app, name, ExportFormat::Jsonl).await
}

async fn not_found(uri: axum::http::Uri) -> WebError {
    WebError::NotFound(format!("no page at {}", uri.path()))
}

/// No caching of data that changes while a study runs, no sniffing, no
/// framing by other sites, no referrer (a login URL carries the token).
async fn headers(mut resp: Response) -> Response {
    let h = resp.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    resp
}
