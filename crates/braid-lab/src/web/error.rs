//! Why a request failed, and the status and body it gets: an HTML page for
//! the browser, `{"error": ...}` for the JSON API (the route decides, see
//! [`WebError::json`]).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::analysis::AnalysisError;
use crate::figures::FigureError;
use crate::store::StoreError;

/// A failed request.
#[derive(Debug, thiserror::Error)]
pub enum WebError {
    /// No such study, experiment or page.
    #[error("{0}")]
    NotFound(String),
    /// A query parameter or body the server cannot use.
    #[error("{0}")]
    BadRequest(String),
    /// Form fields that do not validate: `(field, message)` pairs, the
    /// messages the CLI gives for the same study file.
    #[error("invalid fields: {}", .0.iter().map(|(k, m)| format!("{k}: {m}")).collect::<Vec<_>>().join("; "))]
    Fields(Vec<(String, String)>),
    /// The database failed.
    #[error(transparent)]
    Store(Box<StoreError>),
    /// An analysis could not answer (unknown metric, key, filter value).
    #[error(transparent)]
    Analysis(Box<AnalysisError>),
    /// A figure could not be drawn.
    #[error(transparent)]
    Figure(Box<FigureError>),
    /// The server itself failed.
    #[error("internal error: {0}")]
    Internal(String),
}

impl WebError {
    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            WebError::NotFound(_) => StatusCode::NOT_FOUND,
            WebError::BadRequest(_) => StatusCode::BAD_REQUEST,
            WebError::Fields(_) => StatusCode::UNPROCESSABLE_ENTITY,
            WebError::Analysis(e) => match **e {
                AnalysisError::UnknownStudy { .. } | AnalysisError::UnknownExperiment(_) => StatusCode::NOT_FOUND,
                AnalysisError::Store(_) | AnalysisError::Write(_) => StatusCode::INTERNAL_SERVER_ERROR,
                _ => StatusCode::BAD_REQUEST,
            },
            WebError::Figure(e) => match **e {
                FigureError::Analysis(ref a) if matches!(a, AnalysisError::Store(_)) => {
                    StatusCode::INTERNAL_SERVER_ERROR
                }
                FigureError::Store(_) | FigureError::Plot(_) => StatusCode::INTERNAL_SERVER_ERROR,
                _ => StatusCode::BAD_REQUEST,
            },
            WebError::Store(_) | WebError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The error as a JSON API response.
    pub fn json(self) -> Response {
        #[derive(Serialize)]
        struct Body {
            error: String,
            #[serde(skip_serializing_if = "Vec::is_empty")]
            fields: Vec<FieldMessage>,
        }
        #[derive(Serialize)]
        struct FieldMessage {
            field: String,
            message: String,
        }
        let fields = match &self {
            WebError::Fields(f) => f
                .iter()
                .map(|(field, message)| FieldMessage { field: field.clone(), message: message.clone() })
                .collect(),
            _ => Vec::new(),
        };
        (self.status(), axum::Json(Body { error: self.to_string(), fields })).into_response()
    }
}

impl From<StoreError> for WebError {
    fn from(e: StoreError) -> WebError {
        WebError::Store(Box::new(e))
    }
}

impl From<AnalysisError> for WebError {
    fn from(e: AnalysisError) -> WebError {
        WebError::Analysis(Box::new(e))
    }
}

impl From<FigureError> for WebError {
    fn from(e: FigureError) -> WebError {
        WebError::Figure(Box::new(e))
    }
}

/// A page's error: the message on an HTML page.
impl IntoResponse for WebError {
    fn into_response(self) -> Response {
        let status = self.status();
        let body = super::html::page(
            &format!("{} {}", status.as_u16(), status.canonical_reason().unwrap_or("error")),
            &format!("<p class=\"error\">{}</p><p><a href=\"/\">studies</a></p>", super::html::esc(&self.to_string())),
            None,
        );
        (status, axum::response::Html(body)).into_response()
    }
}

/// A JSON API handler's result: errors as `{"error": ...}`.
pub(crate) struct ApiError(pub WebError);

impl From<WebError> for ApiError {
    fn from(e: WebError) -> ApiError {
        ApiError(e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        self.0.json()
    }
}
