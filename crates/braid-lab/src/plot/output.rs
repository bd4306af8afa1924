//! Where a plot goes: every plot is drawn once, as SVG, and written as SVG
//! or rasterised to PNG ([`super::png`]) according to the file name's
//! extension. The [`Plot`] trait gives every plot kind the same `write`.

use std::path::Path;

use plotters::prelude::*;

use super::error::{DrawResult, PlotError};
use super::png;
use super::style::Root;

/// Width and height in pixels used by [`Plot::write`] (the size of the
/// bench charts, so all of Braid's figures match).
pub const DEFAULT_SIZE: (u32, u32) = (1000, 560);

/// Smallest width or height a plot accepts: below it the axes and labels
/// leave no room for data.
pub const MIN_SIDE: u32 = 240;

/// Largest width or height a plot accepts (a 4096 × 4096 PNG needs 64 MiB
/// while it is drawn).
pub const MAX_SIDE: u32 = 4096;

/// A plot file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Scalable vector graphics; the text stays text.
    Svg,
    /// A PNG image rasterised from the SVG with the system's fonts.
    Png,
}

impl Format {
    /// The format a file name asks for: `.svg` or `.png`, in any case.
    ///
    /// ```
    /// use braid_lab::plot::Format;
    /// use std::path::Path;
    /// assert_eq!(Format::from_path(Path::new("out/goodput.PNG")).unwrap(), Format::Png);
    /// assert!(Format::from_path(Path::new("goodput.pdf")).is_err());
    /// ```
    pub fn from_path(path: &Path) -> Result<Format, PlotError> {
        let ext = path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
        match ext.as_deref() {
            Some("svg") => Ok(Format::Svg),
            Some("png") => Ok(Format::Png),
            _ => Err(PlotError::UnsupportedFormat { path: path.to_path_buf() }),
        }
    }
}

/// A plot that can be drawn as SVG, rendered to bytes or written to a file.
///
/// ```
/// use braid_lab::plot::{Plot, SeriesPlot, TimeSeries};
/// let plot = SeriesPlot {
///     title: "cwnd".into(),
///     x_label: "time (s)".into(),
///     y_label: "packets".into(),
///     series: vec![TimeSeries { name: "cwnd".into(), points: vec![(0.0, 10.0), (1.0, 20.0)] }],
/// };
/// let svg = plot.to_svg((640, 400)).unwrap();
/// assert!(svg.contains("cwnd"));
/// ```
pub trait Plot {
    /// The plot as an SVG document of `size` (width, height) pixels.
    fn to_svg(&self, size: (u32, u32)) -> Result<String, PlotError>;

    /// The plot as the bytes of a file in `format`.
    fn render(&self, format: Format, size: (u32, u32)) -> Result<Vec<u8>, PlotError> {
        let svg = self.to_svg(size)?;
        match format {
            Format::Svg => Ok(svg.into_bytes()),
            Format::Png => png::rasterise(&svg, size),
        }
    }

    /// Writes the plot at [`DEFAULT_SIZE`] to `path`, as SVG or PNG by its
    /// extension.
    fn write(&self, path: &Path) -> Result<(), PlotError> {
        self.write_sized(path, DEFAULT_SIZE)
    }

    /// Writes the plot at `size` (width, height) pixels to `path`, as SVG or
    /// PNG by its extension.
    fn write_sized(&self, path: &Path, size: (u32, u32)) -> Result<(), PlotError> {
        let format = Format::from_path(path)?;
        let bytes = self.render(format, size)?;
        std::fs::write(path, bytes).map_err(|source| PlotError::Io { path: path.to_path_buf(), source })
    }
}

/// Checks `size`, then draws an SVG document of that size with `draw`
/// on a white background.
pub(crate) fn svg_document(
    plot: &'static str,
    size: (u32, u32),
    draw: impl FnOnce(&Root<'_>) -> Result<(), PlotError>,
) -> Result<String, PlotError> {
    let (width, height) = size;
    let allowed = MIN_SIDE..=MAX_SIDE;
    if !allowed.contains(&width) || !allowed.contains(&height) {
        return Err(PlotError::BadSize { width, height });
    }
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE).drawing(plot)?;
        draw(&root)?;
        root.present().drawing(plot)?;
    }
    Ok(svg)
}
