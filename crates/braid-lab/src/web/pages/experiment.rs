//! `/experiments/{id}`: one experiment (drill-down): its parameters, how it
//! ended (error and stderr tail), its scalar records, its warnings, and a
//! plot per time series (every series named `M` or `M.<part>` in one
//! figure, as `braid lab series ID M --out` draws it).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::response::Html;

use crate::analysis::table::format_number;
use crate::figures;
use crate::store::ExperimentRow;
use crate::web::html::{esc, page, study_link, table};
use crate::web::{figure, with_store, App, WebError};

/// The most series figures one page draws (the rest are listed).
pub const MAX_FIGURES: usize = 12;

/// The figure families of an experiment's series: `cwnd.flow1` and
/// `cwnd.flow2` are one figure, `cwnd`, in the order of first appearance.
pub fn series_families(names: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for n in names {
        let family = n.split('.').next().unwrap_or(n).to_string();
        if !out.contains(&family) {
            out.push(family);
        }
    }
    out
}

/// The experiment page.
pub(crate) async fn page_experiment(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<Html<String>, WebError> {
    let (row, figures) = with_store(&app, move |store, _| {
        let row = store
            .experiment(&id)?
            .ok_or_else(|| WebError::NotFound(format!("no experiment `{id}` in the database")))?;
        let families = series_families(&store.series_names(&id)?);
        let mut figs = Vec::new();
        for f in families.iter().take(MAX_FIGURES) {
            figs.push((
                f.clone(),
                figure::svg(|path| figures::experiment_series(store, &id, f, path)).map(|(svg, _)| svg),
            ));
        }
        let rest: Vec<String> = families.iter().skip(MAX_FIGURES).cloned().collect();
        Ok((row, (figs, rest)))
    })
    .await?;
    Ok(Html(page(&format!("Experiment {}", row.id), &render(&row, figures), Some(app.auth().header_value()))))
}

type Figures = (Vec<(String, Result<String, WebError>)>, Vec<String>);

fn render(r: &ExperimentRow, (figs, rest): Figures) -> String {
    let mut out = format!(
        "<p>study {} · template {} v{} · repetition {} · seed {} · <span class=\"{s}\" id=\"status\">{s}</span>{}</p>",
        study_link(&r.study),
        esc(&r.template),
        r.template_version,
        r.repetition,
        r.seed,
        r.exit_code.map(|c| format!(" (exit code {c})")).unwrap_or_default(),
        s = r.status.as_str()
    );
    out.push_str(&format!(
        "<p>ran {:.1} s on {} · braid {} · commit {}</p>",
        r.ended - r.started,
        esc(&r.host),
        esc(&r.braid_version),
        esc(&r.git_commit)
    ));
    if let Some(e) = &r.error {
        out.push_str(&format!("<p class=\"error\" id=\"error\">{}</p>", esc(e)));
    }
    if !r.stderr_tail.is_empty() {
        out.push_str(&format!("<h2 id=\"stderr\">stderr (last lines)</h2><pre>{}</pre>", esc(&r.stderr_tail)));
    }
    out.push_str("<h2>Parameters</h2>");
    let rows: Vec<Vec<String>> = r.params.iter().map(|(k, v)| vec![esc(k), esc(&v.to_text())]).collect();
    out.push_str(&table("params", &["parameter".into(), "value".into()], &rows));
    out.push_str("<h2>Scalars</h2>");
    let rows: Vec<Vec<String>> = r
        .scalars
        .iter()
        .map(|(k, v)| vec![esc(k), format!("<span title=\"{v}\">{}</span>", format_number(*v))])
        .collect();
    out.push_str(&table("scalars", &["metric".into(), "value".into()], &rows));
    out.push_str("<h2>Warnings</h2>");
    if r.warnings.is_empty() {
        out.push_str("<p>none</p>");
    } else {
        out.push_str("<ul id=\"warnings\">");
        for w in &r.warnings {
            out.push_str(&format!("<li>{}</li>", esc(w)));
        }
        out.push_str("</ul>");
    }
    out.push_str("<h2>Time series</h2>");
    if figs.is_empty() {
        out.push_str("<p>none recorded</p>");
    }
    for (family, fig) in figs {
        match fig {
            Ok(svg) => {
                out.push_str(&format!("<figure class=\"series\" data-series=\"{}\">{svg}</figure>", esc(&family)))
            }
            Err(e) => out.push_str(&format!("<p class=\"error\">{}: {}</p>", esc(&family), esc(&e.to_string()))),
        }
    }
    if !rest.is_empty() {
        out.push_str(&format!("<p>more series (not drawn): {}</p>", esc(&rest.join(", "))));
    }
    out.push_str(&format!("<p><a href=\"/api/experiments/{}\">JSON</a></p>", crate::web::html::url(&r.id)));
    out
}
