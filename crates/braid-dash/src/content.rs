//! The test video of the DASH study (issue 21, item 1): a generated source encoded by ffmpeg into
//! a representation ladder like the thesis's (seed 001, §8.2: nine H.264 representations from
//! about 0.25 to 10 Mbit/s, the *Tears of Steel* set of Lederer et al.), cut into DASH segments.
//!
//! Model: what the study varies is the bitrate of each rung and the segment length, not the
//! picture, so the source is ffmpeg's `testsrc2` pattern with a sine tone, resolutions stay small
//! to spare the CPU (of the encoder and of the browsers decoding it), and x264 runs in CBR mode
//! with HRD filler (`nal-hrd=cbr`) so every segment really carries its rung's bitrate even though
//! the synthetic picture would compress far below it. The GOP is fixed to one segment (no
//! scene-cut keyframes) so ffmpeg's DASH muxer cuts every segment on a keyframe at exactly
//! `segment_secs`.
//!
//! The result is cached under a directory named by a hash of the spec and of this recipe, built in
//! a temporary directory and renamed into place, so concurrent builders never see half a video.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Changes whenever the ffmpeg recipe below changes, so cached content is rebuilt.
const RECIPE_VERSION: u32 = 1;

/// The manifest's file name inside a content directory.
pub const MANIFEST: &str = "manifest.mpd";

/// Audio bitrate of the (single) audio representation, kbit/s.
const AUDIO_KBPS: u32 = 64;

/// How much of ffmpeg's standard error an error message quotes.
const STDERR_TAIL: usize = 2000;

/// One representation of the ladder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rung {
    /// Video bitrate, kbit/s (constant: the encoder pads up to it).
    pub kbps: u32,
    /// Picture width in pixels (even).
    pub width: u32,
    /// Picture height in pixels (even).
    pub height: u32,
}

/// What to encode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContentSpec {
    /// Segment length in seconds (also the GOP length).
    pub segment_secs: u32,
    /// Video length in seconds.
    pub duration_secs: u32,
    /// The representations, any order.
    pub ladder: Vec<Rung>,
    /// Frames per second.
    pub fps: u32,
}

/// Why content could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ContentError {
    /// The spec is unusable.
    #[error("content spec: `{field}` {problem}")]
    Spec {
        /// The offending field.
        field: &'static str,
        /// What is wrong and what is allowed.
        problem: String,
    },
    /// ffmpeg is not installed.
    #[error("ffmpeg not found on PATH: install it (Debian: `apt-get install -y ffmpeg`)")]
    FfmpegMissing,
    /// ffmpeg ran and failed.
    #[error("ffmpeg failed ({status}): {stderr}")]
    Ffmpeg {
        /// Its exit status.
        status: String,
        /// The end of its standard error.
        stderr: String,
    },
    /// A file-system operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The path involved.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

impl ContentSpec {
    /// The study's content: the thesis's nine rungs from 0.25 to 10 Mbit/s, 120 s, 24 frames/s,
    /// with `segment_secs`-second segments (the study uses 1, 2, 6, 10 and 15).
    pub fn thesis(segment_secs: u32) -> ContentSpec {
        let ladder = [
            (250, 256, 144),
            (500, 320, 180),
            (750, 320, 180),
            (1000, 384, 216),
            (1500, 384, 216),
            (2500, 512, 288),
            (4000, 512, 288),
            (6000, 640, 360),
            (10000, 640, 360),
        ]
        .into_iter()
        .map(|(kbps, width, height)| Rung { kbps, width, height })
        .collect();
        ContentSpec { segment_secs, duration_secs: 120, ladder, fps: 24 }
    }

    /// Checks the spec; the error names the field and the allowed form.
    pub fn validate(&self) -> Result<(), ContentError> {
        let spec = |field, problem: &str| Err(ContentError::Spec { field, problem: problem.to_string() });
        if !(1..=60).contains(&self.segment_secs) {
            return spec("segment_secs", "must be 1..=60 seconds");
        }
        if self.duration_secs < self.segment_secs || self.duration_secs > 3600 {
            return spec("duration_secs", "must be at least one segment and at most 3600 seconds");
        }
        if !(1..=120).contains(&self.fps) {
            return spec("fps", "must be 1..=120");
        }
        if self.ladder.is_empty() || self.ladder.len() > 32 {
            return spec("ladder", "must have 1..=32 rungs");
        }
        for r in &self.ladder {
            if !(16..=100_000).contains(&r.kbps) {
                return spec("ladder.kbps", "must be 16..=100000 kbit/s");
            }
            let even = |v: u32| (16..=4096).contains(&v) && v % 2 == 0;
            if !even(r.width) || !even(r.height) {
                return spec("ladder.width/height", "must be even, 16..=4096 pixels (H.264 4:2:0)");
            }
        }
        Ok(())
    }

    /// The cache key: a short hash of the spec and the recipe version.
    pub fn key(&self) -> String {
        let mut h = Sha256::new();
        h.update(RECIPE_VERSION.to_le_bytes());
        // The JSON of a plain struct is deterministic (fields in declaration order).
        h.update(serde_json::to_vec(self).unwrap_or_default());
        let digest = h.finalize();
        let mut hex = String::new();
        for b in &digest[..8] {
            let _ = write!(hex, "{b:02x}");
        }
        format!("dash-{}s-{}s-{hex}", self.segment_secs, self.duration_secs)
    }

    /// ffmpeg's arguments, writing `manifest.mpd` and the segments into the working directory.
    fn ffmpeg_args(&self) -> Vec<String> {
        let (d, fps) = (self.duration_secs, self.fps);
        let max_w = self.ladder.iter().map(|r| r.width).max().unwrap_or(320);
        let max_h = self.ladder.iter().map(|r| r.height).max().unwrap_or(180);
        let gop = (fps * self.segment_secs).to_string();
        let mut a: Vec<String> = vec!["-hide_banner".into(), "-loglevel".into(), "error".into(), "-nostdin".into(), "-y".into()];
        a.extend(["-f", "lavfi", "-i"].map(String::from));
        a.push(format!("testsrc2=size={max_w}x{max_h}:rate={fps}:duration={d}"));
        a.extend(["-f", "lavfi", "-i"].map(String::from));
        a.push(format!("sine=frequency=440:sample_rate=48000:duration={d}"));
        for _ in &self.ladder {
            a.extend(["-map", "0:v"].map(String::from));
        }
        a.extend(["-map", "1:a"].map(String::from));
        a.extend(["-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p"].map(String::from));
        for (i, r) in self.ladder.iter().enumerate() {
            let k = r.kbps;
            a.push(format!("-filter:v:{i}"));
            a.push(format!("scale={}:{}", r.width, r.height));
            for opt in ["b", "minrate", "maxrate"] {
                a.push(format!("-{opt}:v:{i}"));
                a.push(format!("{k}k"));
            }
            // One second of VBV buffer: the rate holds within each segment.
            a.push(format!("-bufsize:v:{i}"));
            a.push(format!("{k}k"));
        }
        a.extend(["-x264-params", "nal-hrd=cbr", "-g", &gop, "-keyint_min", &gop, "-sc_threshold", "0"].map(String::from));
        a.extend(["-c:a", "aac", "-ac", "1"].map(String::from));
        a.push("-b:a".into());
        a.push(format!("{AUDIO_KBPS}k"));
        a.extend(["-f", "dash", "-seg_duration"].map(String::from));
        a.push(self.segment_secs.to_string());
        a.extend(["-use_template", "1", "-use_timeline", "0", "-adaptation_sets", "id=0,streams=v id=1,streams=a"].map(String::from));
        a.push(MANIFEST.into());
        a
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ContentError + '_ {
    move |source| ContentError::Io { path: path.to_path_buf(), source }
}

/// The directory holding `manifest.mpd` and the segments of `spec`, under `cache_dir`: reused
/// when already built, otherwise encoded now with ffmpeg (seconds to a minute for the 120 s
/// thesis content) and moved into place atomically.
pub fn ensure(cache_dir: &Path, spec: &ContentSpec) -> Result<PathBuf, ContentError> {
    spec.validate()?;
    let dir = cache_dir.join(spec.key());
    if dir.join(MANIFEST).is_file() {
        return Ok(dir);
    }
    std::fs::create_dir_all(cache_dir).map_err(io(cache_dir))?;
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    let tmp = cache_dir.join(format!(".tmp-{}-{}-{nanos}", spec.key(), std::process::id()));
    std::fs::create_dir_all(&tmp).map_err(io(&tmp))?;
    let built = encode(&tmp, spec);
    if let Err(e) = built {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    match std::fs::rename(&tmp, &dir) {
        Ok(()) => Ok(dir),
        // Another builder finished first: theirs is as good as ours.
        Err(_) if dir.join(MANIFEST).is_file() => {
            let _ = std::fs::remove_dir_all(&tmp);
            Ok(dir)
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp);
            Err(ContentError::Io { path: dir, source: e })
        }
    }
}

/// Runs ffmpeg in `dir` and records the spec next to the manifest.
fn encode(dir: &Path, spec: &ContentSpec) -> Result<(), ContentError> {
    let out = Command::new("ffmpeg").args(spec.ffmpeg_args()).current_dir(dir).output().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            ContentError::FfmpegMissing
        } else {
            ContentError::Io { path: PathBuf::from("ffmpeg"), source: e }
        }
    })?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let start = err.len().saturating_sub(STDERR_TAIL);
        let tail = err.get(start..).unwrap_or(&err).trim().to_string();
        return Err(ContentError::Ffmpeg { status: out.status.to_string(), stderr: tail });
    }
    let manifest = dir.join(MANIFEST);
    if !manifest.is_file() {
        return Err(ContentError::Ffmpeg { status: out.status.to_string(), stderr: "ffmpeg wrote no manifest.mpd".into() });
    }
    let spec_path = dir.join("spec.json");
    let json = serde_json::to_vec_pretty(spec).unwrap_or_default();
    std::fs::write(&spec_path, json).map_err(io(&spec_path))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 6 s clip with 2 s segments and three rungs: small enough for a unit test.
    pub(crate) fn small_spec() -> ContentSpec {
        let ladder = vec![
            Rung { kbps: 300, width: 160, height: 90 },
            Rung { kbps: 1000, width: 256, height: 144 },
            Rung { kbps: 3000, width: 320, height: 180 },
        ];
        ContentSpec { segment_secs: 2, duration_secs: 6, ladder, fps: 12 }
    }

    #[test]
    fn thesis_ladder_spans_the_papers_range() {
        let s = ContentSpec::thesis(6);
        assert_eq!(s.ladder.len(), 9);
        assert_eq!(s.ladder.first().map(|r| r.kbps), Some(250));
        assert_eq!(s.ladder.last().map(|r| r.kbps), Some(10_000));
        assert_eq!(s.duration_secs, 120);
        s.validate().unwrap();
    }

    #[test]
    fn bad_specs_name_the_field() {
        let mut s = small_spec();
        s.segment_secs = 0;
        assert!(s.validate().unwrap_err().to_string().contains("segment_secs"));
        let mut s = small_spec();
        s.ladder[1].width = 255;
        assert!(s.validate().unwrap_err().to_string().contains("even"));
        let mut s = small_spec();
        s.duration_secs = 1;
        assert!(s.validate().unwrap_err().to_string().contains("duration_secs"));
    }

    #[test]
    fn keys_differ_by_spec_and_are_stable() {
        assert_eq!(ContentSpec::thesis(2).key(), ContentSpec::thesis(2).key());
        assert_ne!(ContentSpec::thesis(2).key(), ContentSpec::thesis(6).key());
    }

    #[test]
    fn ffmpeg_makes_segments_at_the_rung_bitrates_and_the_cache_is_reused() {
        let cache = tempfile::tempdir().unwrap();
        let spec = small_spec();
        let dir = ensure(cache.path(), &spec).unwrap();
        let mpd = std::fs::read_to_string(dir.join(MANIFEST)).unwrap();
        assert!(mpd.contains("bandwidth=\"3000000\""), "{mpd}");
        let manifest = crate::mpd::Manifest::parse(&mpd).unwrap();
        let video = manifest.video().unwrap();
        assert_eq!(video.representations.len(), 3);
        assert_eq!(video.segment_count(), 3);
        for rep in &video.representations {
            for n in 0..3 {
                let path = dir.join(rep.media_path(n).unwrap());
                let bytes = std::fs::metadata(&path).unwrap().len() as f64;
                let kbps = bytes * 8.0 / 2.0 / 1000.0;
                let nominal = rep.bandwidth as f64 / 1000.0;
                // CBR with filler: each segment within 25% of its rung.
                assert!((kbps / nominal - 1.0).abs() < 0.25, "{} segment {n}: {kbps:.0} kbit/s for {nominal}", rep.id);
            }
        }
        // Second call: the same directory, not rebuilt.
        let modified = std::fs::metadata(dir.join(MANIFEST)).unwrap().modified().unwrap();
        assert_eq!(ensure(cache.path(), &spec).unwrap(), dir);
        assert_eq!(std::fs::metadata(dir.join(MANIFEST)).unwrap().modified().unwrap(), modified);
        // No temporary directories left behind.
        let leftovers = std::fs::read_dir(cache.path()).unwrap().filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with(".tmp")).count();
        assert_eq!(leftovers, 0);
    }
}
