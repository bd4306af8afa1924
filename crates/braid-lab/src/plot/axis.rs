//! A categorical x axis whose labels never pile up: horizontal while they
//! fit their slot, else turned upright (reading upwards), and when even
//! upright labels are too dense, only every k-th one is written. Labels
//! longer than the room below the chart are cut with an ellipsis.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::error::{DrawResult, PlotError};
use super::style::{font_px, text_width, Chart, Root, DESC_ROOM, FONT, TICK_SIZE};

/// Share of its slot a horizontal label may fill before labels turn
/// upright (the rest keeps neighbours apart).
const FILL: f64 = 0.9;

/// Where and how the categories' labels go.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CategoryAxis {
    /// The text under each category, `None` where thinning skips it.
    pub labels: Vec<Option<String>>,
    /// Whether the labels are drawn upright.
    pub upright: bool,
    /// Height of the x label area (labels and the axis description), px.
    pub area: u32,
}

impl CategoryAxis {
    /// The labels of `categories` on a plotting area `plot_width` pixels
    /// wide, upright ones at most `max_label_px` long.
    pub(crate) fn layout(categories: &[String], plot_width: f64, max_label_px: f64) -> CategoryAxis {
        let slot = plot_width / categories.len().max(1) as f64;
        let line = font_px(TICK_SIZE) * 1.25;
        let widest = categories.iter().map(|c| text_width(c, TICK_SIZE)).fold(0.0, f64::max);
        if widest <= slot * FILL {
            let labels = categories.iter().cloned().map(Some).collect();
            return CategoryAxis { labels, upright: false, area: line.ceil() as u32 + 10 + DESC_ROOM };
        }
        let every = (line / slot).ceil().max(1.0) as usize;
        let max_chars = ((max_label_px / text_width("x", TICK_SIZE)).floor() as usize).max(4);
        let labels: Vec<Option<String>> =
            categories.iter().enumerate().map(|(i, c)| (i % every == 0).then(|| shorten(c, max_chars))).collect();
        let longest = labels.iter().flatten().map(|l| text_width(l, TICK_SIZE)).fold(0.0, f64::max);
        CategoryAxis { labels, upright: true, area: longest.ceil() as u32 + 16 + DESC_ROOM }
    }

    /// Draws a tick and the label under each labelled category (category
    /// `i` is centred at x = `i + 0.5`).
    pub(crate) fn draw(&self, root: &Root<'_>, chart: &Chart<'_, '_>, plot: &'static str) -> Result<(), PlotError> {
        let bottom = chart.y_range().start;
        let font = (FONT, TICK_SIZE).into_font();
        let style = if self.upright {
            TextStyle::from(font).transform(FontTransform::Rotate270).pos(Pos::new(HPos::Right, VPos::Center))
        } else {
            TextStyle::from(font).pos(Pos::new(HPos::Center, VPos::Top))
        };
        for (i, label) in self.labels.iter().enumerate() {
            let Some(label) = label else { continue };
            let (x, y) = chart.backend_coord(&(i as f64 + 0.5, bottom));
            root.draw(&PathElement::new(vec![(x, y), (x, y + 5)], BLACK)).drawing(plot)?;
            root.draw(&Text::new(label.as_str(), (x, y + 8), style.clone())).drawing(plot)?;
        }
        Ok(())
    }
}

/// `text` cut to `max_chars` characters, the last one an ellipsis.
fn shorten(text: &str, max_chars: usize) -> String {
    if text.chars().count() <= max_chars {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(max_chars.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize, prefix: &str) -> Vec<String> {
        (0..n).map(|i| format!("{prefix}{i}")).collect()
    }

    #[test]
    fn few_short_labels_stay_horizontal_and_all_shown() {
        let axis = CategoryAxis::layout(&names(4, "rtt "), 800.0, 200.0);
        assert!(!axis.upright);
        assert_eq!(axis.labels, names(4, "rtt ").into_iter().map(Some).collect::<Vec<_>>());
    }

    #[test]
    fn long_labels_turn_upright_and_are_cut_to_the_room_below() {
        let long = vec!["opportunistic-redundant-if-queue-empty".to_string(); 12];
        let axis = CategoryAxis::layout(&long, 800.0, 120.0);
        assert!(axis.upright);
        assert!(axis.labels.iter().all(Option::is_some), "12 slots of 66 px fit upright labels");
        let shown = axis.labels[0].as_deref().unwrap();
        assert!(shown.ends_with('…') && text_width(shown, TICK_SIZE) <= 120.0, "{shown}");
        assert!(axis.area as f64 >= text_width(shown, TICK_SIZE));
    }

    #[test]
    fn dense_labels_are_thinned_so_that_shown_ones_do_not_overlap() {
        let axis = CategoryAxis::layout(&names(200, "c"), 900.0, 150.0);
        assert!(axis.upright);
        let shown: Vec<usize> = axis.labels.iter().enumerate().filter(|(_, l)| l.is_some()).map(|(i, _)| i).collect();
        assert!(shown.len() < 200 && shown[0] == 0);
        let gap_px = (shown[1] - shown[0]) as f64 * 900.0 / 200.0;
        assert!(gap_px >= font_px(TICK_SIZE) * 1.25, "upright labels {gap_px} px apart");
    }

    #[test]
    fn shortening_keeps_short_text_and_counts_characters_not_bytes() {
        assert_eq!(shorten("abc", 3), "abc");
        assert_eq!(shorten("äöüäöü", 4), "äöü…");
    }
}
