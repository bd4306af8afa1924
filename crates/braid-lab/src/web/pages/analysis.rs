//! `/studies/{name}/analysis`: pick a metric, an x parameter, grouping and
//! filters and get the box plot (or mean lines with 95% bands) with the
//! per-group summary; the best configuration per environment; the Pareto
//! front of two chosen metrics. Every view is the CLI's analysis
//! (`braid lab plot`, `show`, `best`, `pareto`) on the same query, and
//! `/studies/{name}/analysis/export?view=...&format=csv|json` exports
//! exactly what is shown.

use std::sync::Arc;

use axum::extract::{Path, RawQuery, State};
use axum::http::header;
use axum::response::{Html, IntoResponse, Response};
use serde::Serialize;

use super::study::find_study;
use super::QueryPairs;
use crate::analysis::common::StudyView;
use crate::analysis::{
    self, BestQuery, BestReport, Goal, Objective, ParetoQuery, ParetoReport, ShowQuery, ShowReport, Table,
};
use crate::figures::{self, DistributionQuery, Kind};
use crate::web::html::{esc, page, query, report_table, study_link, url};
use crate::web::{figure, with_store, App, WebError};

/// The analysis asked for, from the query string: `metric`, `x`, `g`
/// (group-by, repeated), `f` (`KEY=VALUE` filters, repeated), `kind`
/// (`box` or `band`), `goal` (`max` or `min`, for the best view), `pa`,
/// `pa_goal`, `pb`, `pb_goal` (the Pareto metrics), `per_env`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AnalysisQuery {
    /// The metric (default: the study's first).
    pub metric: Option<String>,
    /// The x parameter (default: the first that varies).
    pub x: Option<String>,
    /// Group-by parameters.
    pub group_by: Vec<String>,
    /// `KEY=VALUE` filters.
    pub filters: Vec<String>,
    /// Band plot instead of box plot.
    pub band: bool,
    /// The best view's goal.
    pub goal: Goal,
    /// The Pareto view's two objectives, when both are chosen.
    pub pareto: Option<[Objective; 2]>,
    /// One Pareto front per environment.
    pub per_environment: bool,
}

fn goal(q: &QueryPairs, key: &str) -> Result<Goal, WebError> {
    q.get(key).map_or(Ok(Goal::Maximize), |g| g.parse().map_err(|e: String| WebError::BadRequest(format!("{key} {e}"))))
}

impl AnalysisQuery {
    /// Parse the query string.
    pub fn from_query(q: &QueryPairs) -> Result<AnalysisQuery, WebError> {
        let band = match q.get("kind") {
            None | Some("box") => false,
            Some("band") => true,
            Some(k) => return Err(WebError::BadRequest(format!("kind `{k}`: expected box or band"))),
        };
        let pareto = match (q.get("pa"), q.get("pb")) {
            (Some(a), Some(b)) => Some([
                Objective { metric: a.to_string(), goal: goal(q, "pa_goal")? },
                Objective { metric: b.to_string(), goal: goal(q, "pb_goal")? },
            ]),
            _ => None,
        };
        Ok(AnalysisQuery {
            metric: q.get("metric").map(str::to_string),
            x: q.get("x").map(str::to_string),
            group_by: q.all("g"),
            filters: q.all("f"),
            band,
            goal: goal(q, "goal")?,
            pareto,
            per_environment: q.get("per_env").is_some_and(|v| v == "on" || v == "true" || v == "1"),
        })
    }

    /// The query string that asks for this analysis again.
    fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut p = Vec::new();
        if let Some(m) = &self.metric {
            p.push(("metric", m.clone()));
        }
        if let Some(x) = &self.x {
            p.push(("x", x.clone()));
        }
        p.extend(self.group_by.iter().map(|g| ("g", g.clone())));
        p.extend(self.filters.iter().map(|f| ("f", f.clone())));
        if self.band {
            p.push(("kind", "band".into()));
        }
        p.push(("goal", self.goal.as_str().into()));
        if let Some([a, b]) = &self.pareto {
            p.push(("pa", a.metric.clone()));
            p.push(("pa_goal", a.goal.as_str().into()));
            p.push(("pb", b.metric.clone()));
            p.push(("pb_goal", b.goal.as_str().into()));
        }
        if self.per_environment {
            p.push(("per_env", "on".into()));
        }
        p
    }
}

/// The study's choices for the form.
struct Choices {
    keys: Vec<String>,
    varying: Vec<String>,
    metrics: Vec<String>,
    values: Vec<crate::store::ParamValues>,
}

/// Each view, or why it could not be made (shown in its place).
struct Views {
    show: Result<ShowReport, WebError>,
    figure: Result<String, WebError>,
    best: Result<BestReport, WebError>,
    pareto: Option<Result<(ParetoReport, String), WebError>>,
}

/// Fill in the defaults: the first metric, the first varying key as x.
fn resolve(q: &AnalysisQuery, c: &Choices) -> AnalysisQuery {
    let mut q = q.clone();
    if q.metric.is_none() {
        q.metric = c.metrics.first().cloned();
    }
    if q.x.is_none() {
        q.x = c.varying.first().or(c.keys.first()).cloned();
    }
    q
}

fn choices(view: &StudyView) -> Choices {
    Choices {
        keys: view.keys(),
        varying: view.varying(None),
        metrics: view.frame.metric_names().to_vec(),
        values: view.values.clone(),
    }
}

/// The study behind every view of a request, loaded once (one walk of its
/// parameters and one of its scalars) and shared.
async fn load_view(app: &Arc<App>, name: String) -> Result<Arc<StudyView>, WebError> {
    with_store(app, move |store, _| {
        let study = find_study(store, &name)?.name;
        Ok(Arc::new(StudyView::load(store, &study)?))
    })
    .await
}

/// Run `f` over the loaded study on a blocking thread.
async fn on_view<T: Send + 'static>(
    view: &Arc<StudyView>,
    f: impl FnOnce(&StudyView) -> Result<T, WebError> + Send + 'static,
) -> Result<T, WebError> {
    let view = view.clone();
    tokio::task::spawn_blocking(move || f(&view))
        .await
        .map_err(|e| WebError::Internal(format!("a request's worker thread failed: {e}")))?
}

fn show_query(study: &str, q: &AnalysisQuery) -> ShowQuery {
    let mut group_by: Vec<String> = q.x.iter().cloned().collect();
    group_by.extend(q.group_by.iter().filter(|g| Some(*g) != q.x.as_ref()).cloned());
    ShowQuery {
        study: study.into(),
        filters: q.filters.clone(),
        group_by: Some(group_by),
        metrics: q.metric.iter().cloned().collect(),
    }
}

fn best_query(study: &str, q: &AnalysisQuery) -> Option<BestQuery> {
    Some(BestQuery { study: study.into(), metric: q.metric.clone()?, goal: q.goal, filters: q.filters.clone() })
}

fn pareto_query(study: &str, q: &AnalysisQuery) -> Option<ParetoQuery> {
    let objectives = q.pareto.clone()?.to_vec();
    Some(ParetoQuery {
        study: study.into(),
        objectives,
        per_environment: q.per_environment,
        filters: q.filters.clone(),
    })
}

fn no_metric() -> WebError {
    WebError::BadRequest("the study has no metric yet: no experiment reported one".into())
}

/// Every view of the study loaded once, each on its own blocking thread:
/// they are independent passes over the same memory, so a multi-core
/// server answers in about the time of the slowest instead of their sum.
async fn views(view: &Arc<StudyView>, q: &AnalysisQuery) -> Views {
    let study = view.info.name.as_str();
    let show = {
        let (study, q) = (study.to_string(), q.clone());
        on_view(view, move |view| {
            if q.metric.is_none() {
                return Err(no_metric());
            }
            Ok(analysis::show_in(view, &show_query(&study, &q))?)
        })
    };
    let figure = {
        let (study, q) = (study.to_string(), q.clone());
        on_view(view, move |view| {
            let (Some(metric), Some(x)) = (q.metric.clone(), q.x.clone()) else { return Err(no_metric()) };
            let dq = DistributionQuery {
                study,
                metric,
                x,
                group_by: q.group_by.clone(),
                filters: q.filters.clone(),
                kind: if q.band { Kind::Band } else { Kind::Box },
            };
            figure::svg(|path| figures::distribution_in(view, &dq, path)).map(|(svg, _)| svg)
        })
    };
    let best = {
        let bq = best_query(study, q);
        on_view(view, move |view| Ok(analysis::best_in(view, &bq.ok_or_else(no_metric)?)?))
    };
    let pareto = {
        let pq = pareto_query(study, q);
        async move {
            let pq = pq?;
            Some(
                on_view(view, move |view| {
                    let report = analysis::pareto_in(view, &pq)?;
                    let (svg, _) = figure::svg(|path| figures::pareto_figure(&report, path))?;
                    Ok((report, svg))
                })
                .await,
            )
        }
    };
    let (show, figure, best, pareto) = tokio::join!(show, figure, best, pareto);
    Views { show, figure, best, pareto }
}

/// The analysis page.
pub(crate) async fn page_analysis(
    State(app): State<Arc<App>>,
    Path(name): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Html<String>, WebError> {
    let asked = AnalysisQuery::from_query(&QueryPairs::parse(raw.as_deref()))?;
    let view = load_view(&app, name).await?;
    let c = choices(&view);
    let q = resolve(&asked, &c);
    let v = views(&view, &q).await;
    let study = &view.info.name;
    Ok(Html(page(&format!("Analysis of {study}"), &render(study, &q, &c, v), Some(app.auth().header_value()))))
}

fn options(list: &[String], selected: &[&str], empty: Option<&str>) -> String {
    let mut out = String::new();
    if let Some(label) = empty {
        out.push_str(&format!("<option value=\"\">{}</option>", esc(label)));
    }
    for item in list {
        let sel = if selected.contains(&item.as_str()) { " selected" } else { "" };
        out.push_str(&format!("<option{sel}>{}</option>", esc(item)));
    }
    out
}

fn goal_select(name: &str, g: Goal) -> String {
    let opt = |v: Goal, label: &str| {
        let sel = if v == g { " selected" } else { "" };
        format!("<option value=\"{}\"{sel}>{label}</option>", v.as_str())
    };
    format!(
        "<select name=\"{name}\">{}{}</select>",
        opt(Goal::Maximize, "larger is better"),
        opt(Goal::Minimize, "smaller is better")
    )
}

fn section<T>(r: &Result<T, WebError>, f: impl FnOnce(&T) -> String) -> String {
    match r {
        Ok(v) => f(v),
        Err(e) => format!("<p class=\"error\">{}</p>", esc(&e.to_string())),
    }
}

fn render(study: &str, q: &AnalysisQuery, c: &Choices, v: Views) -> String {
    let base = format!("/studies/{}/analysis", url(study));
    let metric = q.metric.as_deref().unwrap_or("");
    let x = q.x.as_deref().unwrap_or("");
    let group: Vec<&str> = q.group_by.iter().map(String::as_str).collect();
    let mut out = format!("<p>{} · <a href=\"/studies/{}\">experiments</a></p>", study_link(study), url(study));
    out.push_str(&format!("<form method=\"get\" action=\"{base}\" id=\"analysis-form\">"));
    out.push_str(&format!(
        "<div class=\"field\"><label>metric</label><select name=\"metric\">{}</select></div>",
        options(&c.metrics, &[metric], None)
    ));
    out.push_str(&format!("<div class=\"field\"><label>x parameter</label><select name=\"x\">{}</select> \
        <select name=\"kind\"><option value=\"box\"{}>box plot</option><option value=\"band\"{}>mean and 95% band</option></select></div>",
        options(&c.keys, &[x], None), if q.band { "" } else { " selected" }, if q.band { " selected" } else { "" }));
    out.push_str(&format!(
        "<div class=\"field\"><label>group by</label><select name=\"g\" multiple size=\"3\">{}</select></div>",
        options(&c.keys, &group, None)
    ));
    out.push_str("<div class=\"field\"><label>filters</label>");
    for p in c.values.iter().filter(|p| p.values.len() > 1) {
        let current: Vec<String> =
            q.filters.iter().filter_map(|f| f.strip_prefix(&format!("{}=", p.key)).map(str::to_string)).collect();
        out.push_str(&format!("{} <select name=\"f\"><option value=\"\">any</option>", esc(&p.key)));
        for val in &p.values {
            let sel = if current.contains(&val.text) { " selected" } else { "" };
            out.push_str(&format!(
                "<option value=\"{}\"{sel}>{}</option>",
                esc(&format!("{}={}", p.key, val.text)),
                esc(&val.text)
            ));
        }
        out.push_str("</select> ");
    }
    out.push_str("</div>");
    out.push_str(&format!(
        "<div class=\"field\"><label>best configuration</label>{}</div>",
        goal_select("goal", q.goal)
    ));
    let (pa, pb) = match &q.pareto {
        Some([a, b]) => ((a.metric.as_str(), a.goal), (b.metric.as_str(), b.goal)),
        None => (("", Goal::Maximize), ("", Goal::Minimize)),
    };
    out.push_str(&format!(
        "<div class=\"field\"><label>Pareto front of</label><select name=\"pa\">{}</select>{} and <select name=\"pb\">{}</select>{} \
         <label><input type=\"checkbox\" name=\"per_env\"{}> per environment</label></div>",
        options(&c.metrics, &[pa.0], Some("-")), goal_select("pa_goal", pa.1), options(&c.metrics, &[pb.0], Some("-")), goal_select("pb_goal", pb.1),
        if q.per_environment { " checked" } else { "" }
    ));
    out.push_str("<button type=\"submit\">show</button></form>");

    let pairs = q.pairs();
    let export = |view: &str| {
        let mut p = pairs.clone();
        p.push(("view", view.into()));
        let mut csv = p.clone();
        csv.push(("format", "csv".into()));
        p.push(("format", "json".into()));
        format!("<p class=\"export\">export: <a href=\"{base}/export?{}\">CSV</a> · <a href=\"{base}/export?{}\">JSON</a></p>", query(&csv), query(&p))
    };
    out.push_str(&format!("<h2>{} by {}</h2>", esc(metric), esc(x)));
    out.push_str(&section(&v.figure, |svg| format!("<figure id=\"distribution\">{svg}</figure>")));
    out.push_str(&section(&v.show, |r| format!("{}{}", report_table("summary", &r.table()), export("summary"))));
    out.push_str(&format!("<h2>Best configuration per environment ({})</h2>", q.goal));
    out.push_str(&section(&v.best, |r| format!("{}{}", report_table("best", &r.table()), export("best"))));
    out.push_str("<h2>Pareto front</h2>");
    match &v.pareto {
        None => out.push_str("<p>Choose two metrics above.</p>"),
        Some(r) => out.push_str(&section(r, |(report, svg)| {
            format!(
                "<figure id=\"pareto\">{svg}</figure>{}{}",
                report_table("pareto-table", &report.table()),
                export("pareto")
            )
        })),
    }
    out
}

/// `/studies/{name}/analysis/export?view=summary|best|pareto&format=csv|json&...`:
/// the view's report as JSON (the CLI's `--json`) or its table as CSV.
pub(crate) async fn export_analysis(
    State(app): State<Arc<App>>,
    Path(name): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Response, WebError> {
    let pairs = QueryPairs::parse(raw.as_deref());
    let asked = AnalysisQuery::from_query(&pairs)?;
    let view = pairs.get("view").unwrap_or("summary").to_string();
    let csv = match pairs.get("format").unwrap_or("csv") {
        "csv" => true,
        "json" => false,
        f => return Err(WebError::BadRequest(format!("format `{f}`: expected csv or json"))),
    };
    let loaded = load_view(&app, name).await?;
    let (file, json, table) = on_view(&loaded, move |loaded| {
        let study = loaded.info.name.clone();
        let q = resolve(&asked, &choices(loaded));
        let (json, table) = match view.as_str() {
            "summary" => {
                let r = analysis::show_in(loaded, &show_query(&study, &q))?;
                (serde_json::to_value(&r), r.table())
            }
            "best" => {
                let r = analysis::best_in(loaded, &best_query(&study, &q).ok_or_else(no_metric)?)?;
                (serde_json::to_value(&r), r.table())
            }
            "pareto" => {
                let pq = pareto_query(&study, &q)
                    .ok_or_else(|| WebError::BadRequest("pareto: choose two metrics (pa=, pb=)".into()))?;
                let r = analysis::pareto_in(loaded, &pq)?;
                (serde_json::to_value(&r), r.table())
            }
            v => return Err(WebError::BadRequest(format!("view `{v}`: expected summary, best or pareto"))),
        };
        let json = json.map_err(|e| WebError::Internal(format!("encoding the report: {e}")))?;
        Ok((format!("{study}-{view}"), json, table))
    })
    .await?;
    let disposition = |ext: &str| format!("attachment; filename=\"{}.{ext}\"", file.replace(['"', '\\'], "_"));
    Ok(if csv {
        (
            [
                (header::CONTENT_TYPE, "text/csv; charset=utf-8".to_string()),
                (header::CONTENT_DISPOSITION, disposition("csv")),
            ],
            to_csv(&table),
        )
            .into_response()
    } else {
        ([(header::CONTENT_DISPOSITION, disposition("json"))], axum::Json(json)).into_response()
    })
}

/// A table as CSV (RFC 4180: fields with a comma, quote or line break are
/// quoted, quotes doubled).
pub fn to_csv(t: &Table) -> String {
    let field = |s: &str| {
        if s.contains([',', '"', '\n', '\r']) {
            format!("\"{}\"", s.replace('"', "\"\""))
        } else {
            s.to_string()
        }
    };
    let mut out = String::new();
    for row in std::iter::once(&t.columns).chain(&t.rows) {
        out.push_str(&row.iter().map(|c| field(c)).collect::<Vec<_>>().join(","));
        out.push_str("\r\n");
    }
    out
}
