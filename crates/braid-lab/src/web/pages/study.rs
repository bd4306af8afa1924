//! `/studies/{name}`: a study's template, parameters and value lists, the
//! form that adds values (queued in the server's runner), and the
//! experiment table: sortable by any column, filterable by status and any
//! parameter, paginated, a failed experiment's stderr tail one click away
//! (a `<details>` in its row).

use std::sync::Arc;

use axum::extract::{Path, RawQuery, State};
use axum::response::Html;
use serde::{Deserialize, Serialize};

use super::QueryPairs;
use crate::analysis::table::format_number;
use crate::store::{
    ExperimentPageQuery, ExperimentRow, ExperimentSort, ExperimentStatus, ParamValues, Store, StudyInfo,
};
use crate::web::html::{esc, experiment_link, page, query, study_link, table, url};
use crate::web::{with_store, App, WebError};

/// Rows per page unless asked otherwise.
pub const PER_PAGE: usize = 50;
/// The most rows one page may ask for.
pub const MAX_PER_PAGE: usize = 1000;

/// The study called (or numbered) `key`: pages use names, the API takes
/// either.
pub(crate) fn find_study(store: &Store, key: &str) -> Result<StudyInfo, WebError> {
    if let Some(info) = store.study(key)? {
        return Ok(info);
    }
    if let Ok(id) = key.parse::<i64>() {
        if let Some(info) = store.studies()?.into_iter().find(|s| s.id == id) {
            return Ok(info);
        }
    }
    Err(WebError::NotFound(format!("no study `{key}` in the database")))
}

/// Which experiments of a study to list, in which order.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TableQuery {
    /// Only this status.
    pub status: Option<ExperimentStatus>,
    /// `(key, canonical text)`: an experiment must match all.
    pub filters: Vec<(String, String)>,
    /// `id`, `status`, `repetition`, `param:KEY` or `metric:NAME`.
    pub sort: Option<String>,
    /// Descending.
    pub desc: bool,
    /// 1-based page.
    pub page: usize,
    /// Rows per page.
    pub per_page: usize,
}

impl TableQuery {
    /// From `status=`, `f=KEY=VALUE` (repeated), `sort=`, `dir=desc`,
    /// `page=`, `per_page=`.
    pub fn from_query(q: &QueryPairs) -> Result<TableQuery, WebError> {
        let status =
            match q.get("status") {
                None | Some("all") => None,
                Some(s) => Some(ExperimentStatus::parse(s).ok_or_else(|| {
                    WebError::BadRequest(format!("status `{s}`: expected ok, failed, timeout or all"))
                })?),
            };
        let mut filters = Vec::new();
        for f in q.all("f") {
            let (k, v) = crate::analysis::parse_filter(&f)?;
            filters.push((k, v));
        }
        let number = |key: &str, default: usize| -> Result<usize, WebError> {
            match q.get(key) {
                None => Ok(default),
                Some(t) => t
                    .parse::<usize>()
                    .ok()
                    .filter(|n| *n >= 1)
                    .ok_or_else(|| WebError::BadRequest(format!("{key} `{t}`: expected a whole number >= 1"))),
            }
        };
        let per_page = number("per_page", PER_PAGE)?;
        if per_page > MAX_PER_PAGE {
            return Err(WebError::BadRequest(format!("per_page {per_page}: at most {MAX_PER_PAGE}")));
        }
        Ok(TableQuery {
            status,
            filters,
            sort: q.get("sort").map(str::to_string),
            desc: q.get("dir") == Some("desc"),
            page: number("page", 1)?,
            per_page,
        })
    }

    /// The query as URL pairs (for links that change one thing).
    fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut p = Vec::new();
        if let Some(s) = self.status {
            p.push(("status", s.as_str().to_string()));
        }
        for (k, v) in &self.filters {
            p.push(("f", format!("{k}={v}")));
        }
        if let Some(s) = &self.sort {
            p.push(("sort", s.clone()));
        }
        if self.desc {
            p.push(("dir", "desc".into()));
        }
        p
    }
}

/// The matching experiments, sorted: how many match, and the page's rows.
/// Filtering, sorting and the cut run in SQL
/// ([`Store::experiment_page`]): only the page's rows are read whole.
pub fn select(store: &Store, study_id: i64, q: &TableQuery) -> Result<(usize, Vec<ExperimentRow>), WebError> {
    let sort = q.sort.as_deref().map(sort_key).transpose()?;
    let per_page = q.per_page as u64;
    let page = store.experiment_page(
        study_id,
        &ExperimentPageQuery {
            status: q.status,
            filters: q.filters.clone(),
            sort,
            desc: q.desc,
            offset: (q.page as u64).saturating_sub(1).saturating_mul(per_page),
            limit: per_page,
        },
    )?;
    Ok((usize::try_from(page.total).unwrap_or(usize::MAX), page.rows))
}

/// `id`, `status`, `repetition`, `param:KEY` or `metric:NAME`.
fn sort_key(col: &str) -> Result<ExperimentSort, WebError> {
    Ok(match col {
        "id" => ExperimentSort::Id,
        "status" => ExperimentSort::Status,
        "repetition" => ExperimentSort::Repetition,
        _ => match col.split_once(':') {
            Some(("param", k)) => ExperimentSort::Param(k.to_string()),
            Some(("metric", m)) => ExperimentSort::Metric(m.to_string()),
            _ => {
                return Err(WebError::BadRequest(format!(
                    "sort `{col}`: expected id, status, repetition, param:KEY or metric:NAME"
                )))
            }
        },
    })
}

/// Everything the study page shows.
struct StudyData {
    info: StudyInfo,
    values: Vec<ParamValues>,
    metrics: Vec<String>,
    total: usize,
    page: Vec<ExperimentRow>,
}

/// The study page.
pub(crate) async fn page_study(
    State(app): State<Arc<App>>,
    Path(name): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Html<String>, WebError> {
    let q = TableQuery::from_query(&QueryPairs::parse(raw.as_deref()))?;
    let q2 = q.clone();
    let data = with_store(&app, move |store, _| {
        let info = find_study(store, &name)?;
        let values = store.param_values(info.id)?;
        let metrics = store.metric_names(info.id)?;
        let (total, page) = select(store, info.id, &q2)?;
        Ok(StudyData { info, values, metrics, total, page })
    })
    .await?;
    let run = app.launcher().status(&data.info.name);
    Ok(Html(page(&format!("Study {}", data.info.name), &render(&data, &q, run), Some(app.auth().header_value()))))
}

/// Parameters that take more than one stored value: the table's columns.
fn varying(values: &[ParamValues]) -> Vec<&ParamValues> {
    values.iter().filter(|p| p.values.len() > 1).collect()
}

fn render(d: &StudyData, q: &TableQuery, run: Option<crate::web::launcher::RunStatus>) -> String {
    let info = &d.info;
    let base = format!("/studies/{}", url(&info.name));
    let mut out = format!(
        "<p>template <b>{}</b> v{} · {} planned · {} ok · {} failed · {} timed out</p>\
         <p><a href=\"{base}/analysis\">analysis</a> · export <a href=\"{base}/export.csv\">CSV</a> · \
         <a href=\"{base}/export.jsonl\">JSON lines</a> · <a href=\"/api/studies/{}\">JSON API</a></p>",
        esc(&info.template),
        info.template_version,
        info.planned,
        info.counts.ok,
        info.counts.failed,
        info.counts.timed_out,
        url(&info.name)
    );
    if let Some(r) = run {
        let state = if r.active { "running in this server" } else { "last run in this server ended" };
        out.push_str(&format!(
            "<p id=\"run-state\">{state}{}{}</p>",
            if r.queued_update { "; added values queued" } else { "" },
            r.error.map(|e| format!("; stopped: {}", esc(&e))).unwrap_or_default()
        ));
    }

    // Parameters, their values, and the add-values form.
    out.push_str("<h2>Parameters</h2><form id=\"add-values\">");
    let header: Vec<String> = ["parameter", "role", "type", "values (stored experiments)", "add values (one per line)"]
        .map(String::from)
        .to_vec();
    let rows: Vec<Vec<String>> = info
        .params
        .iter()
        .map(|decl| {
            let stored = d
                .values
                .iter()
                .find(|v| v.key == decl.name)
                .map(|v| {
                    v.values.iter().map(|c| format!("{} ({})", esc(&c.text), c.experiments)).collect::<Vec<_>>().join(", ")
                })
                .unwrap_or_default();
            vec![
                esc(&decl.name),
                decl.role.name().to_string(),
                format!("<span title=\"{}\">{}</span>", esc(&decl.ty.allowed_form()), decl.ty.name()),
                stored,
                format!(
                    "<textarea name=\"{n}\" data-param=\"{n}\" placeholder=\"{}\"></textarea><div class=\"field-error\" data-error-for=\"{n}\"></div>",
                    esc(&decl.ty.allowed_form()),
                    n = esc(&decl.name)
                ),
            ]
        })
        .collect();
    out.push_str(&table("params", &header, &rows));
    out.push_str(&format!(
        "<div class=\"field-error\" data-error-for=\"_form\"></div><button type=\"submit\" id=\"add-values-submit\">add values and queue the new experiments</button> <span id=\"add-values-result\"></span></form>\
         <script>document.getElementById('add-values').addEventListener('submit',async ev=>{{ev.preventDefault();const f=ev.target;const values={{}};\
         f.querySelectorAll('textarea[data-param]').forEach(t=>{{if(t.value.trim())values[t.dataset.param]=t.value}});\
         const r=await braidPost('/api/studies/{}/values',{{values}});if(r.ok){{document.getElementById('add-values-result').textContent=r.body.added+' new experiments queued';setTimeout(()=>location.reload(),800)}}\
         else braidShowErrors(f,r.body.fields||[{{field:'_form',message:r.body.error||('HTTP '+r.status)}}])}});</script>",
        url(&info.name)
    ));
    out.push_str(&format!("<details><summary>study file</summary><pre>{}</pre></details>", esc(&info.file_text)));

    // The experiment table.
    let vary = varying(&d.values);
    out.push_str(&format!(
        "<h2>Experiments</h2><form method=\"get\" action=\"{base}\" id=\"filters\">status <select name=\"status\">"
    ));
    for s in ["all", "ok", "failed", "timeout"] {
        let sel = if q.status.map_or("all", |x| x.as_str()) == s { " selected" } else { "" };
        out.push_str(&format!("<option{sel}>{s}</option>"));
    }
    out.push_str("</select> ");
    for p in &vary {
        let current = q.filters.iter().find(|(k, _)| *k == p.key).map(|(_, v)| v.as_str());
        out.push_str(&format!("{} <select name=\"f\"><option value=\"\">any</option>", esc(&p.key)));
        for v in &p.values {
            let val = format!("{}={}", p.key, v.text);
            let sel = if current == Some(v.text.as_str()) { " selected" } else { "" };
            out.push_str(&format!("<option value=\"{}\"{sel}>{}</option>", esc(&val), esc(&v.text)));
        }
        out.push_str("</select> ");
    }
    if let Some(s) = &q.sort {
        out.push_str(&format!("<input type=\"hidden\" name=\"sort\" value=\"{}\">", esc(s)));
    }
    if q.desc {
        out.push_str("<input type=\"hidden\" name=\"dir\" value=\"desc\">");
    }
    out.push_str("<button type=\"submit\">filter</button></form>");

    let pages = d.total.div_ceil(q.per_page).max(1);
    out.push_str(&format!(
        "<p id=\"matching\">{} experiments match · page {} of {pages}</p>",
        d.total,
        q.page.min(pages)
    ));
    let sort_link = |col: &str, label: &str| {
        let mut t = q.clone();
        t.desc = t.sort.as_deref() == Some(col) && !t.desc;
        t.sort = Some(col.to_string());
        let arrow = match (q.sort.as_deref() == Some(col), q.desc) {
            (true, false) => " ▲",
            (true, true) => " ▼",
            _ => "",
        };
        format!("<a href=\"{base}?{}\">{}{arrow}</a>", query(&t.pairs()), esc(label))
    };
    let mut header = vec![sort_link("id", "id"), sort_link("status", "status"), sort_link("repetition", "rep")];
    header.extend(vary.iter().map(|p| sort_link(&format!("param:{}", p.key), &p.key)));
    header.extend(d.metrics.iter().map(|m| sort_link(&format!("metric:{m}"), m)));
    header.push("error / stderr".into());
    let rows: Vec<Vec<String>> = d
        .page
        .iter()
        .map(|r| {
            let mut row = vec![
                experiment_link(&r.id),
                format!("<span class=\"{s}\">{s}</span>", s = r.status.as_str()),
                r.repetition.to_string(),
            ];
            row.extend(vary.iter().map(|p| r.params.0.get(&p.key).map(|v| esc(&v.to_text())).unwrap_or_default()));
            row.extend(d.metrics.iter().map(|m| r.scalars.get(m).map(|v| format_number(*v)).unwrap_or_default()));
            row.push(if r.status == ExperimentStatus::Ok {
                String::new()
            } else {
                format!(
                    "<details class=\"stderr\"><summary>{}</summary><pre>{}</pre></details>",
                    esc(r.error.as_deref().unwrap_or("stderr")),
                    esc(&r.stderr_tail)
                )
            });
            row
        })
        .collect();
    out.push_str(&table("experiments", &header, &rows));
    if pages > 1 {
        let link = |p: usize, label: &str| {
            let mut pairs = q.pairs();
            pairs.push(("page", p.to_string()));
            format!("<a href=\"{base}?{}\">{label}</a>", query(&pairs))
        };
        let mut nav = Vec::new();
        if q.page > 1 {
            nav.push(link(1, "first"));
            nav.push(link(q.page - 1, "previous"));
        }
        if q.page < pages {
            nav.push(link(q.page + 1, "next"));
            nav.push(link(pages, "last"));
        }
        out.push_str(&format!("<p class=\"pages\">{}</p>", nav.join(" · ")));
    }
    out.push_str(&format!("<p>{}</p>", study_link(&info.name)));
    out
}
