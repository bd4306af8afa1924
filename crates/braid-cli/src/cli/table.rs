//! Plain aligned text tables for human-readable output.

/// Render rows under a header, columns padded to their widest cell; the
/// first column is left-aligned, the others right-aligned (numbers).
pub fn render(header: &[&str], rows: &[Vec<String>]) -> String {
    let cols = header.len();
    let mut width: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate().take(cols) {
            width[i] = width[i].max(cell.chars().count());
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let parts: Vec<String> = cells
            .enumerate()
            .map(|(i, c)| if i == 0 { format!("{c:<w$}", w = width[0]) } else { format!("{c:>w$}", w = width[i]) })
            .collect();
        parts.join("  ").trim_end().to_string()
    };
    let mut out = line(&mut header.iter().copied());
    out.push('\n');
    out.push_str(&line(&mut width.iter().map(|&w| "-".repeat(w)).collect::<Vec<_>>().iter().map(|s| s.as_str())));
    for row in rows {
        out.push('\n');
        out.push_str(&line(&mut row.iter().map(|s| s.as_str())));
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn aligns_columns() {
        let t = super::render(&["peer", "Gbit/s"], &[vec!["braid".into(), "1.25".into()], vec!["tcp".into(), "10.50".into()]]);
        assert_eq!(t, "peer   Gbit/s\n-----  ------\nbraid    1.25\ntcp     10.50");
    }
}
