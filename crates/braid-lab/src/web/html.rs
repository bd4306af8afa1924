//! HTML building blocks: escaping, the page layout (navigation, style, the
//! one shared script), tables and links. Pages are plain strings: no
//! template engine and no build step.

use std::fmt::Write;

/// `text` escaped for HTML text and attribute values.
pub(crate) fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `text` percent-encoded for a URL path segment or query value
/// (RFC 3986 unreserved characters kept).
pub(crate) fn url(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// A query string from `(key, value)` pairs, percent-encoded.
pub(crate) fn query(pairs: &[(&str, String)]) -> String {
    pairs.iter().map(|(k, v)| format!("{}={}", url(k), url(v))).collect::<Vec<_>>().join("&")
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:0;color:#222}
header{background:#234;color:#fff;padding:.6em 1em}header a{color:#fff;margin-right:1.2em;text-decoration:none}
main{padding:1em}table{border-collapse:collapse;margin:.5em 0}th,td{border:1px solid #ccc;padding:.2em .5em;text-align:left;font-size:.9em}
th a{color:inherit}td.num{text-align:right;font-variant-numeric:tabular-nums}.error{color:#b00}.ok{color:#070}
.failed,.timeout{color:#b00}pre{background:#f6f6f6;padding:.5em;overflow:auto;max-height:30em}
.bar{display:inline-block;width:10em;height:.8em;background:#eee;vertical-align:middle}.bar span{display:block;height:100%;background:#4a4}
.field{margin:.4em 0}.field label{display:inline-block;min-width:12em;vertical-align:top}.field .hint{color:#666;font-size:.85em}
.field-error{color:#b00;font-size:.9em}textarea{width:28em;height:3.2em}figure{margin:.5em 0}figure svg{max-width:100%;height:auto}
form.inline{display:inline}";

/// The script every page shares: `braidPost(url, body)` sends JSON with
/// the token header that state-changing requests need.
const SCRIPT: &str = "function braidToken(){const m=document.querySelector('meta[name=braid-token]');return m?m.content:''}
async function braidPost(url,body){const r=await fetch(url,{method:'POST',headers:{'Content-Type':'application/json','X-Braid-Token':braidToken()},body:JSON.stringify(body)});
let j={};try{j=await r.json()}catch(e){}return {ok:r.ok,status:r.status,body:j}}
function braidShowErrors(form,fields){form.querySelectorAll('.field-error').forEach(e=>e.textContent='');
for(const f of (fields||[])){const e=form.querySelector('[data-error-for=\"'+CSS.escape(f.field)+'\"]')||form.querySelector('[data-error-for=\"_form\"]');if(e)e.textContent+=f.message+' '}}";

/// A whole page: `title`, the navigation, `body`. `token` is the value
/// state-changing requests send in their header (none on error pages).
pub(crate) fn page(title: &str, body: &str, token: Option<&str>) -> String {
    let meta = token.map(|t| format!("<meta name=\"braid-token\" content=\"{}\">", esc(t))).unwrap_or_default();
    format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">{meta}<title>{} · braid lab</title>\
         <style>{STYLE}</style><script>{SCRIPT}</script></head><body><header><a href=\"/\">braid lab</a>\
         <a href=\"/\">studies</a><a href=\"/new\">new study</a></header><main><h1>{}</h1>{body}</main></body></html>",
        esc(title),
        esc(title)
    )
}

/// A table with a header row; cells are HTML already.
pub(crate) fn table(id: &str, header: &[String], rows: &[Vec<String>]) -> String {
    let rows: Vec<(String, &[String])> = rows.iter().map(|r| (String::new(), r.as_slice())).collect();
    table_with_attrs(id, header, &rows)
}

/// A table whose rows carry attributes (` data-study="x"`, escaped by the
/// caller); cells are HTML already.
pub(crate) fn table_with_attrs(id: &str, header: &[String], rows: &[(String, &[String])]) -> String {
    let mut out = format!("<table id=\"{}\"><thead><tr>", esc(id));
    for h in header {
        let _ = write!(out, "<th>{h}</th>");
    }
    out.push_str("</tr></thead><tbody>");
    for (attrs, row) in rows {
        let _ = write!(out, "<tr{attrs}>");
        for cell in row.iter() {
            out.push_str("<td>");
            out.push_str(cell);
            out.push_str("</td>");
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table>");
    out
}

/// A [`crate::analysis::Table`] as HTML (every cell escaped).
pub(crate) fn report_table(id: &str, t: &crate::analysis::Table) -> String {
    let header: Vec<String> = t.columns.iter().map(|c| esc(c)).collect();
    let rows: Vec<Vec<String>> = t.rows.iter().map(|r| r.iter().map(|c| esc(c)).collect()).collect();
    table(id, &header, &rows)
}

/// The link to a study's page.
pub(crate) fn study_link(name: &str) -> String {
    format!("<a href=\"/studies/{}\">{}</a>", url(name), esc(name))
}

/// The link to an experiment's page.
pub(crate) fn experiment_link(id: &str) -> String {
    format!("<a href=\"/experiments/{}\">{}</a>", url(id), esc(id))
}

/// Seconds as `42s`, `3m10s`, `2h05m`.
pub(crate) fn clock(secs: f64) -> String {
    if !secs.is_finite() || secs < 0.0 {
        return "-".into();
    }
    let s = secs.round() as u64;
    if s < 60 {
        format!("{s}s")
    } else if s < 3600 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{}h{:02}m", s / 3600, s % 3600 / 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn escapes_markup() {
        assert_eq!(esc("<a href=\"x\">&'</a>"), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;&lt;/a&gt;");
        assert_eq!(url("rtt=20ms,loss=1%"), "rtt%3D20ms%2Closs%3D1%25");
        assert_eq!(clock(190.0), "3m10s");
    }

    proptest! {
        #[test]
        fn escaped_text_has_no_markup(s in ".*") {
            let e = esc(&s);
            prop_assert!(!e.contains('<') && !e.contains('>') && !e.contains('"') && !e.contains('\''));
        }

        #[test]
        fn url_encoding_keeps_only_safe_bytes(s in ".*") {
            let u = url(&s);
            prop_assert!(u.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.~%".contains(&b)));
        }
    }
}
