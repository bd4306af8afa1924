//! `/new`: the new-study form, generated from a built-in template's typed
//! parameters. As the user types, the page asks `POST /api/plan` for the
//! experiment count and expected duration (or the field errors, the CLI's
//! messages); "launch" sends `POST /api/studies`, which runs the study in
//! the server's runner and answers with the study page's URL.

use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::response::Html;

use super::QueryPairs;
use crate::param::Role;
use crate::web::html::{esc, page, url};
use crate::web::{App, WebError};

/// The form's script: collects the fields, asks for the plan while the
/// user types, launches on submit.
const SCRIPT: &str = "<script>(function(){const f=document.getElementById('new-study');
function body(){const values={};f.querySelectorAll('textarea[data-param]').forEach(t=>values[t.dataset.param]=t.value);
return {template:f.dataset.template,name:f.elements.name.value,repetitions:f.elements.repetitions.value,seed:f.elements.seed.value,timeout:f.elements.timeout.value,values}}
let timer=null;async function plan(){const r=await braidPost('/api/plan',body());const out=document.getElementById('plan');
if(r.ok){braidShowErrors(f,[]);out.textContent=r.body.count+' experiments, expected '+r.body.expected_human+' with '+r.body.jobs+' jobs'}
else{out.textContent='';braidShowErrors(f,r.body.fields||[{field:'_form',message:r.body.error||('HTTP '+r.status)}])}}
f.addEventListener('input',()=>{clearTimeout(timer);timer=setTimeout(plan,250)});
f.addEventListener('submit',async ev=>{ev.preventDefault();const r=await braidPost('/api/studies',body());
if(r.ok){location.href=r.body.url}else braidShowErrors(f,r.body.fields||[{field:'_form',message:r.body.error||('HTTP '+r.status)}])});
plan()})();</script>";

/// The new-study page.
pub(crate) async fn page_new(State(app): State<Arc<App>>, RawQuery(raw): RawQuery) -> Result<Html<String>, WebError> {
    let q = QueryPairs::parse(raw.as_deref());
    let templates = crate::template::builtins();
    let chosen = match q.get("template") {
        Some(name) => templates
            .iter()
            .find(|t| t.name() == name)
            .cloned()
            .ok_or_else(|| WebError::NotFound(format!("no built-in template `{name}`")))?,
        None => templates.first().cloned().ok_or_else(|| WebError::Internal("no built-in templates".into()))?,
    };
    let mut out = String::from("<p>template: ");
    let links: Vec<String> = templates
        .iter()
        .map(|t| {
            if t.name() == chosen.name() {
                format!("<b>{}</b>", esc(t.name()))
            } else {
                format!("<a href=\"/new?template={}\">{}</a>", url(t.name()), esc(t.name()))
            }
        })
        .collect();
    out.push_str(&links.join(" · "));
    out.push_str("</p>");
    let req = chosen.requirements();
    out.push_str(&format!(
        "<p>{}{}</p>",
        esc(chosen.description()),
        match (req.emulator, req.exclusive) {
            (true, _) => " (needs the emulator: root; experiments run alone)",
            (false, true) => " (experiments run alone)",
            _ => "",
        }
    ));
    out.push_str(&format!("<form id=\"new-study\" data-template=\"{}\">", esc(chosen.name())));
    let field = |name: &str, label: &str, value: &str, hint: &str| {
        format!(
            "<div class=\"field\"><label for=\"f-{name}\">{label}</label><input id=\"f-{name}\" name=\"{name}\" value=\"{}\"> \
             <span class=\"hint\">{}</span><div class=\"field-error\" data-error-for=\"{name}\"></div></div>",
            esc(value),
            esc(hint)
        )
    };
    out.push_str(&field("name", "study name", "", "letters, digits, _, - and ."));
    out.push_str(&field("repetitions", "repetitions", "1", "a whole number >= 1"));
    out.push_str(&field("seed", "base seed", "0", "a whole number >= 0"));
    out.push_str(&field("timeout", "timeout per experiment", "", "a duration (default: 10 x expected, at least 30 s)"));
    for role in [Role::Configuration, Role::Environment] {
        out.push_str(&format!("<h2>{}</h2>", role.name()));
        for decl in chosen.params().iter().filter(|d| d.role == role) {
            out.push_str(&format!(
                "<div class=\"field\"><label for=\"p-{n}\">{n}</label><textarea id=\"p-{n}\" name=\"{n}\" data-param=\"{n}\">{}</textarea> \
                 <span class=\"hint\">{} · {}</span><div class=\"field-error\" data-error-for=\"{n}\"></div></div>",
                esc(&decl.default.to_text()),
                esc(&decl.ty.allowed_form()),
                esc(&decl.doc),
                n = esc(&decl.name)
            ));
        }
    }
    out.push_str(
        "<p id=\"plan\"></p><div class=\"field-error\" data-error-for=\"_form\"></div>\
         <button type=\"submit\" id=\"launch\">launch</button></form><p class=\"hint\">One value per line; each line is one value of the list.</p>",
    );
    out.push_str(SCRIPT);
    Ok(Html(page("New study", &out, Some(app.auth().header_value()))))
}
