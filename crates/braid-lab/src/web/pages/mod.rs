//! The HTML pages, one module each: [`studies`] (the list with live
//! progress), [`study`] (parameters, value lists, experiment table, adding
//! values), [`analysis`] (box plot, best, Pareto, export), [`experiment`]
//! (drill-down) and [`new_study`] (the form).

pub mod analysis;
pub mod experiment;
pub mod new_study;
pub mod studies;
pub mod study;

/// A query string's `key=value` pairs in order, percent-decoded (`+` is a
/// space), repeated keys kept: filters come as `f=loss=1%&f=rtt=20ms`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueryPairs(pub Vec<(String, String)>);

impl QueryPairs {
    /// Parse a raw query string (without the `?`).
    pub fn parse(raw: Option<&str>) -> QueryPairs {
        let Some(raw) = raw else { return QueryPairs::default() };
        QueryPairs(
            raw.split('&')
                .filter(|kv| !kv.is_empty())
                .map(|kv| {
                    let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                    (decode(k), decode(v))
                })
                .collect(),
        )
    }

    /// The first value of `key`, if non-empty.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.iter().find(|(k, v)| k == key && !v.is_empty()).map(|(_, v)| v.as_str())
    }

    /// Every non-empty value of `key`, in order.
    pub fn all(&self, key: &str) -> Vec<String> {
        self.0.iter().filter(|(k, v)| k == key && !v.is_empty()).map(|(_, v)| v.clone()).collect()
    }
}

/// Percent-decode (and `+` → space); invalid escapes stay as written.
fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                match std::str::from_utf8(&bytes[i + 1..i + 3]).ok().and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn repeated_keys_and_escapes() {
        let q = QueryPairs::parse(Some("f=loss%3D1%25&f=rtt%3D20ms&metric=fct_s&x=&g=a+b&bad=%zz"));
        assert_eq!(q.all("f"), vec!["loss=1%", "rtt=20ms"]);
        assert_eq!(q.get("metric"), Some("fct_s"));
        assert_eq!(q.get("x"), None);
        assert_eq!(q.get("g"), Some("a b"));
        assert_eq!(q.get("bad"), Some("%zz"));
        assert_eq!(decode("%4"), "%4");
    }

    proptest! {
        #[test]
        fn decode_inverts_url(s in ".*") {
            prop_assert_eq!(decode(&crate::web::html::url(&s)), s);
        }
    }
}
