//! PNG output: the plot's SVG rasterised by resvg (pure Rust, no C
//! libraries), with text drawn in a font from the system's font
//! directories. A machine without any font gets [`PlotError::NoFont`]
//! naming the Debian package to install, never an image without labels.

use std::sync::{Arc, OnceLock};

use resvg::{tiny_skia, usvg};

use super::error::PlotError;

/// Families tried, in order, for the SVG's generic `sans-serif` (the only
/// family the plots use). Any other installed font is the last resort.
const SANS_SERIF_PREFERENCE: [&str; 6] =
    ["DejaVu Sans", "Liberation Sans", "Noto Sans", "FreeSans", "Arial", "Helvetica"];

/// The system's fonts, loaded once per process (scanning the font
/// directories costs milliseconds that every PNG would otherwise repeat);
/// `None` when there is no font at all.
fn fonts() -> Option<Arc<usvg::fontdb::Database>> {
    static FONTS: OnceLock<Option<Arc<usvg::fontdb::Database>>> = OnceLock::new();
    FONTS
        .get_or_init(|| {
            let mut db = usvg::fontdb::Database::new();
            db.load_system_fonts();
            let family = sans_serif_family(&db)?;
            db.set_sans_serif_family(family.clone());
            // usvg falls back to the serif family for unknown names: make
            // that the same face, not a "Times New Roman" that is absent.
            db.set_serif_family(family);
            Some(Arc::new(db))
        })
        .clone()
}

/// The family to draw `sans-serif` text with: the first preferred one that
/// is installed, else the first family of any installed face.
fn sans_serif_family(db: &usvg::fontdb::Database) -> Option<String> {
    let has = |name: &str| db.faces().any(|f| f.families.iter().any(|(family, _)| family == name));
    SANS_SERIF_PREFERENCE
        .iter()
        .find(|name| has(name))
        .map(|name| name.to_string())
        .or_else(|| db.faces().find_map(|f| f.families.first().map(|(family, _)| family.clone())))
}

/// `svg` (a document of `size` pixels) as the bytes of a PNG file.
pub(crate) fn rasterise(svg: &str, size: (u32, u32)) -> Result<Vec<u8>, PlotError> {
    let fontdb = fonts().ok_or(PlotError::NoFont)?;
    let options = usvg::Options { fontdb, font_family: "sans-serif".into(), ..usvg::Options::default() };
    let tree = usvg::Tree::from_str(svg, &options).map_err(|e| PlotError::Raster(e.to_string()))?;
    let (width, height) = size;
    let mut pixmap = tiny_skia::Pixmap::new(width, height)
        .ok_or_else(|| PlotError::Raster(format!("cannot allocate a {width}x{height} image")))?;
    // Scale the document onto the image in case its own size differs.
    let doc = tree.size();
    let transform = tiny_skia::Transform::from_scale(width as f32 / doc.width(), height as f32 / doc.height());
    resvg::render(&tree, transform, &mut pixmap.as_mut());
    pixmap.encode_png().map_err(|e| PlotError::Raster(e.to_string()))
}
