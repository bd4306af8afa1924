//! A parser for the static MPEG-DASH manifests (MPD, ISO/IEC 23009-1) that ffmpeg's DASH muxer
//! writes and the study serves: `Period` / `AdaptationSet` / `Representation` with its
//! `bandwidth`, and `SegmentTemplate` (at set or representation level) with `initialization` and
//! `media` patterns over `$RepresentationID$`, `$Number$` (with `%0Nd` widths), `$Bandwidth$` and
//! `$Time$`, `startNumber`, and either `timescale`/`duration` or a `SegmentTimeline`
//! (§5.3.9.4–5.3.9.6). The segment list of each representation is resolved once at parse time,
//! so asking for a segment's path later cannot fail.
//!
//! Not supported (a typed error says so): live (`type="dynamic"`) manifests, `SegmentBase` and
//! `SegmentList` addressing, and multi-period presentations beyond the first period.

use serde::Serialize;

/// Most segments one representation may have: bounds memory on a hostile manifest (a 10-hour
/// video of 100 ms segments is 360 000).
const MAX_SEGMENTS: u64 = 1_000_000;

/// Why a manifest was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MpdError {
    /// Not well-formed XML.
    #[error("manifest is not well-formed XML: {0}")]
    Xml(String),
    /// A required element or attribute is absent.
    #[error("manifest: missing {0}")]
    Missing(String),
    /// An attribute has a value of the wrong form.
    #[error("manifest: {what} is `{value}`, expected {expected}")]
    Invalid {
        /// Which attribute, with its element.
        what: String,
        /// The value found.
        value: String,
        /// The allowed form.
        expected: &'static str,
    },
    /// A feature this parser does not implement.
    #[error("manifest: {0} is not supported (static SegmentTemplate manifests only)")]
    Unsupported(String),
}

/// One segment of a representation.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Segment {
    /// Its `$Number$`.
    pub number: u64,
    /// Its `$Time$` (start, in timescale units).
    pub time: u64,
    /// Its media duration in seconds.
    pub duration_s: f64,
}

/// One encoding of the content.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Representation {
    /// Its `id`.
    pub id: String,
    /// Its `bandwidth`, bit/s.
    pub bandwidth: u64,
    /// Picture size, for video.
    pub width: Option<u32>,
    /// Picture height, for video.
    pub height: Option<u32>,
    /// Its `mimeType` (or the adaptation set's).
    pub mime_type: Option<String>,
    /// Its `codecs` (or the adaptation set's).
    pub codecs: Option<String>,
    /// The initialization segment's path, if any.
    pub init: Option<String>,
    /// The media segments, in playback order.
    pub segments: Vec<Segment>,
    media: String,
}

impl Representation {
    /// The bitrate in kbit/s.
    pub fn kbps(&self) -> f64 {
        self.bandwidth as f64 / 1000.0
    }

    /// The path (relative to the manifest) of segment `index` (0-based), if it exists.
    pub fn media_path(&self, index: usize) -> Option<String> {
        let seg = self.segments.get(index)?;
        // The template was checked at parse time.
        expand(&self.media, &self.id, self.bandwidth, seg.number, seg.time).ok()
    }
}

/// What an adaptation set carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ContentType {
    /// Video.
    Video,
    /// Audio.
    Audio,
    /// Anything else (text, images).
    Other,
}

/// A set of interchangeable representations.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AdaptationSet {
    /// Video, audio or other.
    pub content_type: ContentType,
    /// Its representations, by ascending bandwidth.
    pub representations: Vec<Representation>,
}

impl AdaptationSet {
    /// Segments every representation has (they are aligned in the manifests ffmpeg writes).
    pub fn segment_count(&self) -> usize {
        self.representations.iter().map(|r| r.segments.len()).min().unwrap_or(0)
    }
}

/// A parsed static manifest.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Manifest {
    /// `mediaPresentationDuration` (or the period's `duration`), seconds.
    pub duration_s: f64,
    /// `minBufferTime`, seconds, if given.
    pub min_buffer_s: Option<f64>,
    /// The first period's adaptation sets.
    pub adaptation_sets: Vec<AdaptationSet>,
}

impl Manifest {
    /// Parses `xml`; every failure is an [`MpdError`] naming what is wrong.
    pub fn parse(xml: &str) -> Result<Manifest, MpdError> {
        let doc = roxmltree::Document::parse(xml).map_err(|e| MpdError::Xml(e.to_string()))?;
        let root = doc.root_element();
        if root.tag_name().name() != "MPD" {
            return Err(MpdError::Missing(format!("root element MPD (found {})", root.tag_name().name())));
        }
        if root.attribute("type").is_some_and(|t| t != "static") {
            return Err(MpdError::Unsupported("a live (dynamic) manifest".into()));
        }
        let period = child(root, "Period").ok_or_else(|| MpdError::Missing("Period".into()))?;
        let duration_s = match (root.attribute("mediaPresentationDuration"), period.attribute("duration")) {
            (Some(d), _) => iso_duration("MPD@mediaPresentationDuration", d)?,
            (None, Some(d)) => iso_duration("Period@duration", d)?,
            (None, None) => return Err(MpdError::Missing("MPD@mediaPresentationDuration".into())),
        };
        let min_buffer_s = root.attribute("minBufferTime").map(|d| iso_duration("MPD@minBufferTime", d)).transpose()?;
        let mut adaptation_sets = Vec::new();
        for set in period.children().filter(|n| n.has_tag_name_local("AdaptationSet")) {
            adaptation_sets.push(adaptation_set(set, duration_s)?);
        }
        if adaptation_sets.is_empty() {
            return Err(MpdError::Missing("AdaptationSet in the first Period".into()));
        }
        Ok(Manifest { duration_s, min_buffer_s, adaptation_sets })
    }

    /// The first video adaptation set.
    pub fn video(&self) -> Result<&AdaptationSet, MpdError> {
        self.adaptation_sets
            .iter()
            .find(|s| s.content_type == ContentType::Video)
            .ok_or_else(|| MpdError::Missing("a video AdaptationSet (contentType=\"video\" or mimeType video/*)".into()))
    }

    /// The first audio adaptation set, if any.
    pub fn audio(&self) -> Option<&AdaptationSet> {
        self.adaptation_sets.iter().find(|s| s.content_type == ContentType::Audio)
    }
}

/// Local-name matching (MPD elements live in the `urn:mpeg:dash:schema:mpd:2011` namespace).
trait LocalName {
    fn has_tag_name_local(&self, name: &str) -> bool;
}

impl LocalName for roxmltree::Node<'_, '_> {
    fn has_tag_name_local(&self, name: &str) -> bool {
        self.is_element() && self.tag_name().name() == name
    }
}

fn child<'a, 'i>(node: roxmltree::Node<'a, 'i>, name: &str) -> Option<roxmltree::Node<'a, 'i>> {
    node.children().find(|n| n.has_tag_name_local(name))
}

fn adaptation_set(set: roxmltree::Node, duration_s: f64) -> Result<AdaptationSet, MpdError> {
    if child(set, "SegmentList").is_some() || child(set, "SegmentBase").is_some() {
        return Err(MpdError::Unsupported("SegmentList/SegmentBase addressing".into()));
    }
    let set_template = child(set, "SegmentTemplate");
    let set_mime = set.attribute("mimeType");
    let mut reps = Vec::new();
    for rep in set.children().filter(|n| n.has_tag_name_local("Representation")) {
        reps.push(representation(rep, set, set_template, duration_s)?);
    }
    if reps.is_empty() {
        return Err(MpdError::Missing("Representation in an AdaptationSet".into()));
    }
    reps.sort_by_key(|r| r.bandwidth);
    let mime = set_mime.or(reps[0].mime_type.as_deref()).unwrap_or("");
    let content_type = match set.attribute("contentType") {
        Some("video") => ContentType::Video,
        Some("audio") => ContentType::Audio,
        Some(_) => ContentType::Other,
        None if mime.starts_with("video/") => ContentType::Video,
        None if mime.starts_with("audio/") => ContentType::Audio,
        None => ContentType::Other,
    };
    Ok(AdaptationSet { content_type, representations: reps })
}

fn representation(
    rep: roxmltree::Node,
    set: roxmltree::Node,
    set_template: Option<roxmltree::Node>,
    duration_s: f64,
) -> Result<Representation, MpdError> {
    let id = rep.attribute("id").ok_or_else(|| MpdError::Missing("Representation@id".into()))?.to_string();
    let bandwidth = number::<u64>(&format!("Representation {id} @bandwidth"), rep.attribute("bandwidth"), "a whole number of bit/s")?
        .filter(|b| *b > 0)
        .ok_or_else(|| MpdError::Missing(format!("Representation {id} @bandwidth (positive)")))?;
    let width = number::<u32>(&format!("Representation {id} @width"), rep.attribute("width"), "a whole number of pixels")?;
    let height = number::<u32>(&format!("Representation {id} @height"), rep.attribute("height"), "a whole number of pixels")?;
    if child(rep, "SegmentList").is_some() || child(rep, "SegmentBase").is_some() {
        return Err(MpdError::Unsupported("SegmentList/SegmentBase addressing".into()));
    }
    let rep_template = child(rep, "SegmentTemplate");
    // Representation-level attributes override the adaptation set's (§5.3.9.1 inheritance).
    let attr = |name: &str| rep_template.and_then(|t| t.attribute(name)).or_else(|| set_template.and_then(|t| t.attribute(name)));
    if rep_template.is_none() && set_template.is_none() {
        return Err(MpdError::Missing(format!("SegmentTemplate for Representation {id}")));
    }
    let what = |a: &str| format!("SegmentTemplate@{a} of Representation {id}");
    let media = attr("media").ok_or_else(|| MpdError::Missing(what("media")))?.to_string();
    let init = attr("initialization").map(str::to_string);
    let timescale = number::<u64>(&what("timescale"), attr("timescale"), "a positive whole number")?.unwrap_or(1);
    if timescale == 0 {
        return Err(MpdError::Invalid { what: what("timescale"), value: "0".into(), expected: "a positive whole number" });
    }
    let start_number = number::<u64>(&what("startNumber"), attr("startNumber"), "a whole number")?.unwrap_or(1);
    let timeline = rep_template.and_then(|t| child(t, "SegmentTimeline")).or_else(|| set_template.and_then(|t| child(t, "SegmentTimeline")));
    let segments = match timeline {
        Some(tl) => timeline_segments(tl, timescale, start_number, &id)?,
        None => {
            let d = number::<u64>(&what("duration"), attr("duration"), "a positive whole number")?
                .filter(|d| *d > 0)
                .ok_or_else(|| MpdError::Missing(what("duration") + " (or a SegmentTimeline)"))?;
            fixed_segments(d, timescale, start_number, duration_s, &id)?
        }
    };
    // Check the templates now, so expansion later cannot fail.
    expand(&media, &id, bandwidth, start_number, 0).map_err(|e| e.with_what(what("media")))?;
    if let Some(i) = &init {
        expand(i, &id, bandwidth, start_number, 0).map_err(|e| e.with_what(what("initialization")))?;
    }
    let init = init.map(|i| expand(&i, &id, bandwidth, start_number, 0)).transpose()?;
    let inherit = |name: &str| rep.attribute(name).or_else(|| set.attribute(name)).map(str::to_string);
    Ok(Representation { mime_type: inherit("mimeType"), codecs: inherit("codecs"), id, bandwidth, width, height, init, segments, media })
}

/// Segments of `d`/`timescale` seconds covering the presentation; the last may be shorter.
fn fixed_segments(d: u64, timescale: u64, start: u64, duration_s: f64, id: &str) -> Result<Vec<Segment>, MpdError> {
    let seg_s = d as f64 / timescale as f64;
    // A presentation a hair longer than a whole number of segments (rounding) has no extra segment.
    let count = ((duration_s / seg_s) - 1e-6).ceil().max(1.0);
    if count > MAX_SEGMENTS as f64 {
        return Err(MpdError::Invalid {
            what: format!("segment count of Representation {id}"),
            value: format!("{count}"),
            expected: "at most 1000000 segments",
        });
    }
    let count = count as u64;
    Ok((0..count)
        .map(|i| {
            let begin = i as f64 * seg_s;
            Segment { number: start + i, time: i * d, duration_s: seg_s.min(duration_s - begin).max(0.0) }
        })
        .collect())
}

/// The segments a `SegmentTimeline` lists (`S@t`, `S@d`, `S@r` repeats).
fn timeline_segments(tl: roxmltree::Node, timescale: u64, start: u64, id: &str) -> Result<Vec<Segment>, MpdError> {
    let mut out = Vec::new();
    let mut t = 0u64;
    for s in tl.children().filter(|n| n.has_tag_name_local("S")) {
        let what = |a: &str| format!("SegmentTimeline S@{a} of Representation {id}");
        if let Some(v) = number::<u64>(&what("t"), s.attribute("t"), "a whole number")? {
            t = v;
        }
        let d = number::<u64>(&what("d"), s.attribute("d"), "a positive whole number")?
            .filter(|d| *d > 0)
            .ok_or_else(|| MpdError::Missing(what("d")))?;
        let r = number::<i64>(&what("r"), s.attribute("r"), "a whole number >= 0")?.unwrap_or(0);
        if r < 0 {
            return Err(MpdError::Unsupported(format!("{} = -1 (open-ended repeat)", what("r"))));
        }
        for _ in 0..=r {
            if out.len() as u64 >= MAX_SEGMENTS {
                return Err(MpdError::Invalid { what: what("r"), value: r.to_string(), expected: "at most 1000000 segments in all" });
            }
            out.push(Segment { number: start + out.len() as u64, time: t, duration_s: d as f64 / timescale as f64 });
            t = t.saturating_add(d);
        }
    }
    if out.is_empty() {
        return Err(MpdError::Missing(format!("S elements in the SegmentTimeline of Representation {id}")));
    }
    Ok(out)
}

fn number<T: std::str::FromStr>(what: &str, v: Option<&str>, expected: &'static str) -> Result<Option<T>, MpdError> {
    v.map(|s| s.trim().parse::<T>().map_err(|_| MpdError::Invalid { what: what.to_string(), value: s.to_string(), expected }))
        .transpose()
}

impl MpdError {
    fn with_what(self, what: String) -> MpdError {
        match self {
            MpdError::Invalid { value, expected, .. } => MpdError::Invalid { what, value, expected },
            other => other,
        }
    }
}

/// Expands a segment template's identifiers (§5.3.9.4.4, Table 16).
fn expand(template: &str, id: &str, bandwidth: u64, number: u64, time: u64) -> Result<String, MpdError> {
    let bad = |expected| MpdError::Invalid { what: "SegmentTemplate".into(), value: template.to_string(), expected };
    let mut out = String::with_capacity(template.len() + 8);
    let mut rest = template;
    while let Some(open) = rest.find('$') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let close = after.find('$').ok_or_else(|| bad("`$` identifiers closed by `$`"))?;
        let ident = &after[..close];
        rest = &after[close + 1..];
        if ident.is_empty() {
            out.push('$');
            continue;
        }
        let (name, format) = match ident.split_once('%') {
            Some((n, f)) => (n, Some(f)),
            None => (ident, None),
        };
        let value = match name {
            "RepresentationID" if format.is_none() => {
                out.push_str(id);
                continue;
            }
            "Number" => number,
            "Bandwidth" => bandwidth,
            "Time" => time,
            _ => return Err(bad("identifiers $RepresentationID$, $Number$, $Bandwidth$, $Time$ (with %0Nd), $$")),
        };
        match format {
            None => out.push_str(&value.to_string()),
            Some(f) => {
                let width = f
                    .strip_prefix('0')
                    .and_then(|w| w.strip_suffix('d'))
                    .and_then(|w| w.parse::<usize>().ok())
                    .filter(|w| *w <= 32)
                    .ok_or_else(|| bad("a width format %0Nd with N <= 32"))?;
                out.push_str(&format!("{value:0width$}"));
            }
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// Parses an `xs:duration` of the forms MPDs use (`PT1H2M3.5S`, `P1DT2H`), into seconds.
pub fn iso_duration(what: &str, s: &str) -> Result<f64, MpdError> {
    let bad = || MpdError::Invalid { what: what.to_string(), value: s.to_string(), expected: "an ISO 8601 duration like PT1M30.5S" };
    let body = s.trim().strip_prefix('P').ok_or_else(bad)?;
    let (days, time) = match body.split_once('T') {
        Some((d, t)) => (d, t),
        None => (body, ""),
    };
    let mut total = 0.0;
    let mut parse_units = |part: &str, units: &[(char, f64)]| -> Result<(), MpdError> {
        let mut num = String::new();
        let mut next_unit = 0;
        for c in part.chars() {
            if c.is_ascii_digit() || c == '.' {
                num.push(c);
                continue;
            }
            let pos = units[next_unit..].iter().position(|(u, _)| *u == c).ok_or_else(bad)? + next_unit;
            let v: f64 = num.parse().map_err(|_| bad())?;
            total += v * units[pos].1;
            num.clear();
            next_unit = pos + 1;
        }
        if num.is_empty() {
            Ok(())
        } else {
            Err(bad())
        }
    };
    parse_units(days, &[('D', 86_400.0)])?;
    parse_units(time, &[('H', 3600.0), ('M', 60.0), ('S', 1.0)])?;
    if (days.is_empty() && time.is_empty()) || !total.is_finite() {
        return Err(bad());
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What ffmpeg 7 writes for a 6 s clip, 2 s segments, two video rungs and audio.
    pub(crate) const FFMPEG_MPD: &str = r#"<?xml version="1.0" encoding="utf-8"?>
<MPD xmlns="urn:mpeg:dash:schema:mpd:2011" profiles="urn:mpeg:dash:profile:isoff-live:2011" type="static"
	mediaPresentationDuration="PT6.0S" maxSegmentDuration="PT2.0S" minBufferTime="PT4.0S">
	<Period id="0" start="PT0.0S">
		<AdaptationSet id="0" contentType="video" startWithSAP="1" segmentAlignment="true">
			<Representation id="1" mimeType="video/mp4" codecs="avc1.42c015" bandwidth="4000000" width="320" height="180">
				<SegmentTemplate timescale="1000000" duration="2000000" initialization="init-stream$RepresentationID$.m4s" media="chunk-stream$RepresentationID$-$Number%05d$.m4s" startNumber="1"/>
			</Representation>
			<Representation id="0" mimeType="video/mp4" codecs="avc1.42c00c" bandwidth="250000" width="256" height="144">
				<SegmentTemplate timescale="1000000" duration="2000000" initialization="init-stream$RepresentationID$.m4s" media="chunk-stream$RepresentationID$-$Number%05d$.m4s" startNumber="1"/>
			</Representation>
		</AdaptationSet>
		<AdaptationSet id="1" contentType="audio">
			<Representation id="2" mimeType="audio/mp4" codecs="mp4a.40.2" bandwidth="64000">
				<SegmentTemplate timescale="1000000" duration="2000000" initialization="init-stream$RepresentationID$.m4s" media="chunk-stream$RepresentationID$-$Number%05d$.m4s" startNumber="1"/>
			</Representation>
		</AdaptationSet>
	</Period>
</MPD>"#;

    #[test]
    fn parses_ffmpegs_manifest() {
        let m = Manifest::parse(FFMPEG_MPD).unwrap();
        assert_eq!(m.duration_s, 6.0);
        assert_eq!(m.min_buffer_s, Some(4.0));
        let v = m.video().unwrap();
        assert_eq!(v.representations.iter().map(|r| r.bandwidth).collect::<Vec<_>>(), vec![250_000, 4_000_000]);
        assert_eq!(v.segment_count(), 3);
        let low = &v.representations[0];
        assert_eq!(low.init.as_deref(), Some("init-stream0.m4s"));
        assert_eq!(low.media_path(0).as_deref(), Some("chunk-stream0-00001.m4s"));
        assert_eq!(low.media_path(2).as_deref(), Some("chunk-stream0-00003.m4s"));
        assert_eq!(low.media_path(3), None);
        assert_eq!(low.segments[1].duration_s, 2.0);
        assert_eq!(m.audio().unwrap().representations[0].id, "2");
    }

    #[test]
    fn set_level_template_and_timeline_are_inherited() {
        let xml = r#"<MPD type="static" mediaPresentationDuration="PT0H0M5S"><Period>
          <AdaptationSet mimeType="video/mp4">
            <SegmentTemplate timescale="10" media="$RepresentationID$/$Time$.m4s" startNumber="7">
              <SegmentTimeline><S t="0" d="20" r="1"/><S d="10"/></SegmentTimeline>
            </SegmentTemplate>
            <Representation id="a" bandwidth="1000"/>
          </AdaptationSet></Period></MPD>"#;
        let m = Manifest::parse(xml).unwrap();
        let r = &m.video().unwrap().representations[0];
        assert_eq!(r.segments.iter().map(|s| (s.number, s.time)).collect::<Vec<_>>(), vec![(7, 0), (8, 20), (9, 40)]);
        assert_eq!(r.media_path(2).as_deref(), Some("a/40.m4s"));
        assert_eq!(r.segments[2].duration_s, 1.0);
    }

    #[test]
    fn a_last_partial_segment_is_kept() {
        let xml = FFMPEG_MPD.replace("PT6.0S", "PT7.0S");
        let m = Manifest::parse(&xml).unwrap();
        let r = &m.video().unwrap().representations[0];
        assert_eq!(r.segments.len(), 4);
        assert!((r.segments[3].duration_s - 1.0).abs() < 1e-9);
    }

    #[test]
    fn malformed_manifests_are_named() {
        let cases: &[(&str, &str)] = &[
            ("<MPD", "well-formed"),
            ("<html/>", "root element MPD"),
            (r#"<MPD type="dynamic"><Period/></MPD>"#, "live"),
            (r#"<MPD mediaPresentationDuration="PT6S"/>"#, "Period"),
            (r#"<MPD><Period><AdaptationSet/></Period></MPD>"#, "mediaPresentationDuration"),
            (r#"<MPD mediaPresentationDuration="6 seconds"><Period/></MPD>"#, "ISO 8601"),
        ];
        for (xml, needle) in cases {
            let e = Manifest::parse(xml).unwrap_err().to_string();
            assert!(e.contains(needle), "{xml}: {e}");
        }
        let bad_bw = FFMPEG_MPD.replace("bandwidth=\"250000\"", "bandwidth=\"fast\"");
        assert!(Manifest::parse(&bad_bw).unwrap_err().to_string().contains("@bandwidth"));
        let bad_template = FFMPEG_MPD.replace("$Number%05d$", "$Segment$");
        assert!(Manifest::parse(&bad_template).unwrap_err().to_string().contains("SegmentTemplate@media"));
        let no_duration = FFMPEG_MPD.replace(" duration=\"2000000\"", "");
        assert!(Manifest::parse(&no_duration).unwrap_err().to_string().contains("SegmentTemplate@duration"));
        let huge = FFMPEG_MPD.replace("PT6.0S", "PT100000H");
        assert!(Manifest::parse(&huge).unwrap_err().to_string().contains("at most"));
    }

    #[test]
    fn iso_durations() {
        assert_eq!(iso_duration("x", "PT1M30.5S").unwrap(), 90.5);
        assert_eq!(iso_duration("x", "P1DT1H").unwrap(), 90_000.0);
        assert_eq!(iso_duration("x", "PT120S").unwrap(), 120.0);
        for bad in ["", "P", "PT", "1S", "PT5", "PTS", "PT1S2M", "P1Y"] {
            assert!(iso_duration("x", bad).is_err(), "{bad}");
        }
    }

    proptest! {
        #[test]
        fn arbitrary_text_never_panics(s in ".{0,400}") {
            let _ = Manifest::parse(&s);
            let _ = iso_duration("x", &s);
        }

        #[test]
        fn mangled_ffmpeg_manifests_never_panic(cut in 0usize..2000, junk in "[<>\"$%a-z0-9 =/]{0,12}") {
            let mut s = FFMPEG_MPD.to_string();
            let at = cut.min(s.len());
            if s.is_char_boundary(at) {
                s.insert_str(at, &junk);
            }
            let _ = Manifest::parse(&s);
        }

        #[test]
        fn fixed_segments_cover_the_presentation(d_ms in 100u64..20_000, total_ms in 100u64..200_000) {
            let segs = fixed_segments(d_ms, 1000, 1, total_ms as f64 / 1000.0, "r").unwrap();
            let sum: f64 = segs.iter().map(|s| s.duration_s).sum();
            prop_assert!((sum - total_ms as f64 / 1000.0).abs() < 1e-3);
        }
    }
}
