//! `/`: every study with its progress (done / failed / running / ETA),
//! updated live from `/events` ([`crate::web::sse`]).

use std::sync::Arc;

use axum::extract::State;
use axum::response::Html;

use crate::web::html::{clock, esc, page, study_link, table_with_attrs};
use crate::web::progress::{progress, StudyProgress};
use crate::web::{with_store, App, WebError};

/// The live-update script: each `progress` event rewrites the rows' cells;
/// a study the page does not list yet reloads it.
const LIVE: &str = "<script>(function(){const es=new EventSource('/events');
function clock(s){if(s==null)return '-';s=Math.round(s);if(s<60)return s+'s';if(s<3600)return Math.floor(s/60)+'m'+String(s%60).padStart(2,'0')+'s';return Math.floor(s/3600)+'h'+String(Math.floor(s%3600/60)).padStart(2,'0')+'m'}
es.addEventListener('progress',ev=>{const list=JSON.parse(ev.data);for(const p of list){const row=document.querySelector('tr[data-study=\"'+CSS.escape(p.study)+'\"]');
if(!row){location.reload();return}const set=(c,v)=>{const e=row.querySelector('[data-col='+c+']');if(e)e.textContent=v};
set('planned',p.planned);set('done',p.done);set('ok',p.ok);set('failed',p.failed);set('running',p.running==null?'-':p.running);set('eta',p.active?clock(p.eta_s):'-');
set('state',p.error?('stopped: '+p.error):(p.active?'running':(p.done>=p.planned?'complete':'idle')));
const b=row.querySelector('.bar span');if(b)b.style.width=(p.planned?Math.min(100,100*p.done/p.planned):0)+'%'}
document.body.dataset.updates=String(Number(document.body.dataset.updates||0)+1)})})();</script>";

/// The studies page.
pub(crate) async fn page_studies(State(app): State<Arc<App>>) -> Result<Html<String>, WebError> {
    let rows = with_store(&app, progress).await?;
    let header: Vec<String> =
        ["study", "template", "progress", "planned", "done", "ok", "failed", "running", "ETA", "state"]
            .map(String::from)
            .to_vec();
    let cells: Vec<Vec<String>> = rows.iter().map(row).collect();
    // Rows carry their study's name for the live script.
    let attributed: Vec<(String, &[String])> =
        rows.iter().zip(&cells).map(|(p, c)| (format!(" data-study=\"{}\"", esc(&p.study)), c.as_slice())).collect();
    let mut body = if rows.is_empty() {
        "<p>No studies in this database yet: <a href=\"/new\">start one</a>, or run one with <code>braid lab run STUDY.toml</code>.</p>".to_string()
    } else {
        table_with_attrs("studies", &header, &attributed)
    };
    body.push_str(&format!("<p class=\"hint\">database: <code>{}</code></p>", esc(&app.db().display().to_string())));
    body.push_str(LIVE);
    Ok(Html(page("Studies", &body, Some(app.auth().header_value()))))
}

fn row(p: &StudyProgress) -> Vec<String> {
    let pct = if p.planned == 0 { 0.0 } else { (100.0 * p.done as f64 / p.planned as f64).min(100.0) };
    let state = match (&p.error, p.active) {
        (Some(e), _) => format!("stopped: {e}"),
        (None, true) => "running".into(),
        (None, false) if p.done >= p.planned => "complete".into(),
        _ => "idle".into(),
    };
    let cell = |col: &str, v: String| format!("<span data-col=\"{col}\">{}</span>", esc(&v));
    vec![
        study_link(&p.study),
        esc(&p.template),
        format!("<span class=\"bar\"><span style=\"width:{pct:.1}%\"></span></span>"),
        cell("planned", p.planned.to_string()),
        cell("done", p.done.to_string()),
        cell("ok", p.ok.to_string()),
        cell("failed", p.failed.to_string()),
        cell("running", p.running.map_or("-".into(), |r| r.to_string())),
        cell("eta", if p.active { p.eta_s.map_or("-".into(), clock) } else { "-".into() }),
        cell("state", state),
    ]
}
