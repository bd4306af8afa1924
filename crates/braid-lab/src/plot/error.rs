//! What can go wrong when drawing or writing a plot: one typed error for
//! every plot kind, naming the plot, the field or the file and what was
//! expected instead.

use std::path::PathBuf;

/// A plot that could not be drawn or written.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// Nothing to draw: no categories, no groups, or no finite value.
    #[error("{plot}: nothing to plot: {what}")]
    Empty {
        /// The plot kind, e.g. `box plot`.
        plot: &'static str,
        /// What was missing.
        what: String,
    },
    /// The data contradicts itself (e.g. a group with a different number of
    /// value lists than there are categories).
    #[error("{plot}: {field}: {problem}")]
    InvalidData {
        /// The plot kind.
        plot: &'static str,
        /// The offending field, e.g. `groups[1] ("braid").values_per_category`.
        field: String,
        /// What is wrong and what is allowed.
        problem: String,
    },
    /// The file name does not say which format to write.
    #[error("plot file {}: unsupported format; the file name must end in .svg or .png", path.display())]
    UnsupportedFormat {
        /// The file asked for.
        path: PathBuf,
    },
    /// A width or height outside what the plots support.
    #[error(
        "plot size {width}x{height} pixels: width and height must each be between {min} and {max}",
        min = super::output::MIN_SIDE,
        max = super::output::MAX_SIDE
    )]
    BadSize {
        /// Requested width in pixels.
        width: u32,
        /// Requested height in pixels.
        height: u32,
    },
    /// plotters failed while drawing (a bug rather than bad input).
    #[error("drawing the {plot}: {message}")]
    Draw {
        /// The plot kind.
        plot: &'static str,
        /// plotters' message.
        message: String,
    },
    /// PNG output needs a font to draw titles and tick labels, and the
    /// system has none.
    #[error(
        "PNG plots need a font and none was found in the system font directories \
         (/usr/share/fonts, /usr/local/share/fonts, ~/.local/share/fonts); install one, \
         e.g. Debian's package fonts-dejavu-core, or write .svg instead"
    )]
    NoFont,
    /// The SVG could not be turned into a PNG.
    #[error("rendering the plot as PNG: {0}")]
    Raster(String),
    /// The file could not be written.
    #[error("writing the plot {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

/// Turns a plotters error into [`PlotError::Draw`] naming the plot kind.
pub(crate) trait DrawResult<T> {
    /// The result, with a plotters error named after `plot`.
    fn drawing(self, plot: &'static str) -> Result<T, PlotError>;
}

impl<T, E: std::fmt::Display> DrawResult<T> for Result<T, E> {
    fn drawing(self, plot: &'static str) -> Result<T, PlotError> {
        self.map_err(|e| PlotError::Draw { plot, message: e.to_string() })
    }
}
