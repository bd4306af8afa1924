//! The JSON API behind the pages (documented in the README):
//!
//! - `GET /api/studies`: every study with its progress;
//! - `GET /api/studies/{id}`: one study (by id or name): its record, the
//!   values each parameter takes, its metrics and progress;
//! - `GET /api/studies/{id}/experiments`: its experiments, filtered,
//!   sorted and paginated as the study page's table (`status=`,
//!   `f=KEY=VALUE`, `sort=`, `dir=desc`, `page=`, `per_page=`);
//! - `GET /api/experiments/{id}`: one experiment with its scalars,
//!   warnings and time series;
//! - `POST /api/plan`: validate a new-study form, answer its experiment
//!   count and expected duration, or its field errors;
//! - `POST /api/studies`: validate and launch a new study;
//! - `POST /api/studies/{id}/values`: add values to a study and queue the
//!   new experiments.
//!
//! Errors are `{"error": MESSAGE}` with, for form input,
//! `"fields": [{"field": KEY, "message": ...}]` (HTTP 422).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use serde::Serialize;

use super::error::ApiError;
use super::forms::{check_add, check_new, AddValues, Checked, NewStudy};
use super::html::{clock, url};
use super::pages::study::{find_study, select, TableQuery};
use super::pages::QueryPairs;
use super::progress::{progress, StudyProgress};
use super::{with_store, App, WebError};
use crate::analysis::{write_export, ExportData, ExportFormat};
use crate::store::{ExperimentRow, ParamValues, Store, StudyInfo, StudyRecord};
use crate::study::Study;

type ApiResult<T> = Result<Json<T>, ApiError>;

fn body<T>(b: Result<Json<T>, JsonRejection>) -> Result<T, WebError> {
    b.map(|Json(t)| t).map_err(|e| WebError::BadRequest(format!("request body: {}", e.body_text())))
}

/// A study in the API's list.
#[derive(Debug, Serialize)]
pub struct StudyEntry {
    /// The stored study.
    #[serde(flatten)]
    pub info: StudyInfo,
    /// Its progress.
    pub progress: Option<StudyProgress>,
}

/// `GET /api/studies`.
pub(crate) async fn studies(State(app): State<Arc<App>>) -> ApiResult<Vec<StudyEntry>> {
    Ok(Json(
        with_store(&app, |store, app| {
            let mut progress = progress(store, app)?;
            Ok(store
                .studies()?
                .into_iter()
                .map(|info| {
                    let at = progress.iter().position(|p| p.study == info.name);
                    StudyEntry { progress: at.map(|i| progress.swap_remove(i)), info }
                })
                .collect())
        })
        .await?,
    ))
}

/// One study in detail.
#[derive(Debug, Serialize)]
pub struct StudyDetail {
    /// The stored study.
    #[serde(flatten)]
    pub info: StudyInfo,
    /// The values each parameter takes across stored experiments.
    pub param_values: Vec<ParamValues>,
    /// The metrics its experiments reported.
    pub metrics: Vec<String>,
    /// Its progress.
    pub progress: Option<StudyProgress>,
}

/// `GET /api/studies/{id}`.
pub(crate) async fn study(State(app): State<Arc<App>>, Path(key): Path<String>) -> ApiResult<StudyDetail> {
    Ok(Json(
        with_store(&app, move |store, app| {
            let info = find_study(store, &key)?;
            let progress = progress(store, app)?.into_iter().find(|p| p.study == info.name);
            Ok(StudyDetail {
                param_values: store.param_values(info.id)?,
                metrics: store.metric_names(info.id)?,
                progress,
                info,
            })
        })
        .await?,
    ))
}

/// A page of a study's experiments.
#[derive(Debug, Serialize)]
pub struct ExperimentPage {
    /// Experiments matching the filters.
    pub total: usize,
    /// This page (1-based).
    pub page: usize,
    /// Rows per page.
    pub per_page: usize,
    /// The page's experiments.
    pub experiments: Vec<ExperimentRow>,
}

/// `GET /api/studies/{id}/experiments`.
pub(crate) async fn experiments(
    State(app): State<Arc<App>>,
    Path(key): Path<String>,
    RawQuery(raw): RawQuery,
) -> ApiResult<ExperimentPage> {
    let q = TableQuery::from_query(&QueryPairs::parse(raw.as_deref()))?;
    Ok(Json(
        with_store(&app, move |store, _| {
            let info = find_study(store, &key)?;
            let (total, experiments) = select(store, info.id, &q)?;
            Ok(ExperimentPage { total, page: q.page, per_page: q.per_page, experiments })
        })
        .await?,
    ))
}

/// One experiment in detail.
#[derive(Debug, Serialize)]
pub struct ExperimentDetail {
    /// The stored experiment.
    #[serde(flatten)]
    pub experiment: ExperimentRow,
    /// Its time series: name → `[t, value]` points by time.
    pub series: BTreeMap<String, Vec<(f64, f64)>>,
}

/// `GET /api/experiments/{id}`.
pub(crate) async fn experiment(State(app): State<Arc<App>>, Path(id): Path<String>) -> ApiResult<ExperimentDetail> {
    Ok(Json(
        with_store(&app, move |store, _| {
            let experiment = store
                .experiment(&id)?
                .ok_or_else(|| WebError::NotFound(format!("no experiment `{id}` in the database")))?;
            let mut series = BTreeMap::new();
            for name in store.series_names(&id)? {
                let points = store.series(&id, &name)?;
                series.insert(name, points);
            }
            Ok(ExperimentDetail { experiment, series })
        })
        .await?,
    ))
}

/// What `POST /api/plan` answers.
#[derive(Debug, Serialize)]
pub struct PlanAnswer {
    /// Experiments the study expands to.
    pub count: usize,
    /// Expected wall-clock seconds with the server's jobs.
    pub expected_secs: f64,
    /// The same, as `3m10s`.
    pub expected_human: String,
    /// The server's parallel jobs.
    pub jobs: usize,
    /// The plan's summary (parameters and their values).
    pub summary: crate::plan::PlanSummary,
    /// The study file the form makes.
    pub study_file: String,
}

fn plan_answer(checked: &Checked, jobs: usize) -> PlanAnswer {
    let summary = crate::plan::Plan::new(&checked.study).summary(jobs);
    PlanAnswer {
        count: summary.count,
        expected_secs: summary.expected_secs,
        expected_human: clock(summary.expected_secs),
        jobs,
        study_file: checked.study.text.clone(),
        summary,
    }
}

/// `POST /api/plan`.
pub(crate) async fn plan(
    State(app): State<Arc<App>>,
    form: Result<Json<NewStudy>, JsonRejection>,
) -> ApiResult<PlanAnswer> {
    let form = body(form)?;
    let db = app.db().to_path_buf();
    let jobs = app.launcher().jobs();
    let checked = tokio::task::spawn_blocking(move || check_new(&form, &db))
        .await
        .map_err(|e| WebError::Internal(e.to_string()))??;
    Ok(Json(plan_answer(&checked, jobs)))
}

/// What launching answers.
#[derive(Debug, Serialize)]
pub struct Launched {
    /// The study.
    pub study: String,
    /// Its page.
    pub url: String,
    /// Experiments planned.
    pub planned: usize,
    /// New experiments queued by this request.
    pub added: u64,
}

/// Register `study` (its text, parameters and planned count) so its page
/// exists at once; the runner registers it again when it starts.
fn register(store: &mut Store, study: &Study) -> Result<i64, WebError> {
    let plan = crate::plan::Plan::new(study);
    Ok(store.upsert_study(&StudyRecord {
        name: study.name.clone(),
        file_path: study.path.as_ref().map(|p| p.display().to_string()),
        file_text: study.text.clone(),
        template: study.template.name().to_string(),
        template_version: study.template.version(),
        params: study.params.iter().map(|p| p.decl.clone()).collect(),
        planned: plan.count() as u64,
    })?)
}

/// `POST /api/studies`.
pub(crate) async fn create_study(
    State(app): State<Arc<App>>,
    form: Result<Json<NewStudy>, JsonRejection>,
) -> Result<Response, ApiError> {
    let form = body(form)?;
    let app2 = app.clone();
    let launched = tokio::task::spawn_blocking(move || -> Result<Launched, WebError> {
        let checked = check_new(&form, app2.db())?;
        let mut store = Store::open(app2.db())?;
        let name = checked.study.name.clone();
        if store.study(&name)?.is_some() {
            return Err(WebError::Fields(vec![(
                "name".into(),
                format!("a study called `{name}` exists already: choose another name, or add values on its page"),
            )]));
        }
        register(&mut store, &checked.study)?;
        drop(store);
        app2.launcher().launch(&checked.study, 0);
        Ok(Launched {
            url: format!("/studies/{}", url(&name)),
            study: name,
            planned: checked.summary.count,
            added: checked.summary.count as u64,
        })
    })
    .await
    .map_err(|e| WebError::Internal(e.to_string()))??;
    Ok((StatusCode::CREATED, Json(launched)).into_response())
}

/// `POST /api/studies/{id}/values`.
pub(crate) async fn add_values(
    State(app): State<Arc<App>>,
    Path(key): Path<String>,
    form: Result<Json<AddValues>, JsonRejection>,
) -> ApiResult<Launched> {
    let form = body(form)?;
    let app2 = app.clone();
    let launched = tokio::task::spawn_blocking(move || -> Result<Launched, WebError> {
        let mut store = Store::open(app2.db())?;
        let info = find_study(&store, &key)?;
        let path = info.file_path.as_ref().map(std::path::PathBuf::from);
        let checked = check_add(&info.file_text, path.as_deref(), app2.db(), &form)?;
        register(&mut store, &checked.study)?;
        let stored = info.counts.stored();
        drop(store);
        app2.launcher().launch(&checked.study, stored);
        let planned = checked.summary.count;
        Ok(Launched {
            url: format!("/studies/{}", url(&info.name)),
            study: info.name,
            planned,
            added: (planned as u64).saturating_sub(info.planned),
        })
    })
    .await
    .map_err(|e| WebError::Internal(e.to_string()))??;
    Ok(Json(launched))
}

/// `/studies/{name}/export.csv` and `.jsonl`: every experiment of the
/// study, as `braid lab export` writes it.
pub(crate) async fn export_study(app: Arc<App>, key: String, format: ExportFormat) -> Result<Response, WebError> {
    // Load first, so an unknown study is a 404 and not a cut-off body.
    let data = with_store(&app, move |store, _| {
        let info = find_study(store, &key)?;
        Ok(ExportData::load(store, &info.name)?)
    })
    .await?;
    let name = data.study().to_string();
    // Then stream: rows are written on a blocking thread in 64 KiB chunks
    // while the first ones are already on their way (a 30,720-experiment
    // study is 8 MB of CSV, 16 MB of JSON lines).
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(4);
    tokio::task::spawn_blocking(move || {
        let mut sink = ChunkSender(tx);
        if let Err(e) = write_export(&data, format, &mut sink) {
            // The client sees the body end in an error (a gone client: no one to tell).
            let _ = sink.0.blocking_send(Err(std::io::Error::other(e.to_string())));
        }
    });
    let body = Body::from_stream(futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|chunk| (chunk, rx))
    }));
    let (mime, ext) = match format {
        ExportFormat::Csv => ("text/csv; charset=utf-8", "csv"),
        ExportFormat::Jsonl => ("application/jsonl", "jsonl"),
    };
    let disposition = format!("attachment; filename=\"{}.{ext}\"", name.replace(['"', '\\'], "_"));
    Ok(([(header::CONTENT_TYPE, mime.to_string()), (header::CONTENT_DISPOSITION, disposition)], body).into_response())
}

/// A writer that hands each write to the response body as one chunk (the
/// export's own buffer makes them 64 KiB); a closed body (the client went
/// away) ends the export with a broken pipe.
struct ChunkSender(tokio::sync::mpsc::Sender<std::io::Result<Bytes>>);

impl std::io::Write for ChunkSender {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .blocking_send(Ok(Bytes::copy_from_slice(buf)))
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the client closed the export"))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
