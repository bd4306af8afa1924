//! The lab's plots as files: every kind writes SVG that parses and names
//! its title, groups and categories, and PNG of the requested size whose
//! text is really drawn; bad input gives typed errors, never a panic.
//!
//! Set BRAID_KEEP_PLOTS=1 to keep the files (their folder is printed).

use std::path::{Path, PathBuf};

use braid_lab::plot::{
    BandGroup, BandPlot, BandPoint, BoxGroup, BoxPlot, Direction, Format, Objective, ParetoPlot, ParetoPoint, Plot,
    PlotError, SeriesPlot, TimeSeries, DEFAULT_SIZE,
};
use proptest::prelude::*;
use resvg::{tiny_skia, usvg};

/// A fresh folder for one test's files, removed on drop unless
/// BRAID_KEEP_PLOTS is set.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let dir = std::env::temp_dir().join(format!("braid-lab-plots-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Dir(dir)
    }

    fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        if std::env::var_os("BRAID_KEEP_PLOTS").is_some() {
            eprintln!("plots kept in {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// The SVG file at `path`, checked to parse as SVG.
fn read_svg(path: &Path) -> String {
    let svg = std::fs::read_to_string(path).unwrap();
    usvg::Tree::from_str(&svg, &usvg::Options::default())
        .unwrap_or_else(|e| panic!("{}: not SVG: {e}", path.display()));
    svg
}

/// The text of every `<text>` element of `svg`, trimmed and unescaped.
fn texts(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .filter_map(|t| {
            let body = &t[t.find('>')? + 1..t.find("</text>")?];
            Some(body.trim().replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"").replace("&amp;", "&"))
        })
        .collect()
}

/// Whether `svg` writes `text` as one text element.
fn has_text(svg: &str, text: &str) -> bool {
    texts(svg).iter().any(|t| t == text)
}

/// Width and height of the PNG file at `path`, checked to be a PNG.
fn png_size(path: &Path) -> (u32, u32) {
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{}: no PNG signature", path.display());
    assert_eq!(&bytes[12..16], b"IHDR");
    let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    (be(&bytes[16..20]), be(&bytes[20..24]))
}

/// Pixels of the PNG `bytes` inside rows `rows` that are dark (text, axes).
fn dark_pixels(bytes: &[u8], rows: std::ops::Range<u32>) -> usize {
    let pixmap = tiny_skia::Pixmap::decode_png(bytes).unwrap();
    let w = pixmap.width();
    rows.flat_map(|y| (0..w).map(move |x| (x, y)))
        .filter(|(x, y)| {
            let p = pixmap.pixel(*x, *y).unwrap();
            u32::from(p.red()) + u32::from(p.green()) + u32::from(p.blue()) < 3 * 100
        })
        .count()
}

/// Pixels of the PNG `bytes` close to `rgb`.
fn pixels_like(bytes: &[u8], rgb: (u8, u8, u8)) -> usize {
    let pixmap = tiny_skia::Pixmap::decode_png(bytes).unwrap();
    pixmap
        .pixels()
        .iter()
        .filter(|p| {
            let d = |a: u8, b: u8| (i32::from(a) - i32::from(b)).abs();
            d(p.red(), rgb.0) + d(p.green(), rgb.1) + d(p.blue(), rgb.2) < 30
        })
        .count()
}

fn box_plot() -> BoxPlot {
    BoxPlot {
        title: "Goodput by loss".into(),
        x_label: "loss".into(),
        y_label: "goodput (Mbit/s)".into(),
        categories: vec!["0%".into(), "1%".into(), "5%".into()],
        groups: vec![
            BoxGroup {
                name: "minrtt".into(),
                values_per_category: vec![
                    vec![93.0, 94.5, 95.0, 92.0, 60.0],
                    vec![80.0, 82.0, 85.0, f64::NAN],
                    vec![40.0, 45.0, 50.0, 48.0],
                ],
            },
            BoxGroup {
                name: "redundant".into(),
                values_per_category: vec![vec![88.0, 89.0, 90.0], vec![], vec![70.0, 72.0, 75.0, 120.0]],
            },
        ],
    }
}

fn band_plot() -> BandPlot {
    let p = |x: f64, mean: f64, half: f64| BandPoint { x, mean, lower: mean - half, upper: mean + half };
    BandPlot {
        title: "Completion time over RTT ratio".into(),
        x_label: "RTT ratio".into(),
        y_label: "flow completion time (s)".into(),
        groups: vec![
            BandGroup { name: "minrtt".into(), points: vec![p(4.0, 3.0, 0.4), p(1.0, 1.0, 0.1), p(2.0, 1.8, 0.3)] },
            BandGroup {
                name: "redundant".into(),
                // One repetition at x = 2: no interval, the line goes on.
                points: vec![p(1.0, 1.2, 0.1), p(2.0, 1.5, f64::NAN), p(4.0, 2.0, 0.2), p(8.0, 2.6, 0.3)],
            },
        ],
    }
}

fn series_plot() -> SeriesPlot {
    SeriesPlot {
        title: "Experiment 3f2a: congestion window".into(),
        x_label: "time (s)".into(),
        y_label: "packets".into(),
        series: vec![
            TimeSeries { name: "cwnd".into(), points: (0..200).map(|i| (i as f64 * 0.05, (i % 50) as f64)).collect() },
            TimeSeries {
                name: "ssthresh".into(),
                points: vec![(0.0, 64.0), (2.5, 25.0), (f64::NAN, 3.0), (5.0, 25.0)],
            },
        ],
    }
}

fn pareto_plot() -> ParetoPlot {
    let pt = |x: f64, y: f64, on_front: bool, label: &str| ParetoPoint { x, y, on_front, label: label.into() };
    ParetoPlot {
        title: "Completion time against overhead".into(),
        x: Objective { label: "flow completion time (s)".into(), better: Direction::Min },
        y: Objective { label: "bytes on the wire (MB)".into(), better: Direction::Min },
        points: vec![
            pt(1.0, 9.0, true, "redundant"),
            pt(3.0, 3.0, true, "minrtt"),
            pt(2.0, 5.0, true, "opportunistic"),
            pt(3.5, 6.0, false, "roundrobin"),
            pt(2.5, 8.0, false, ""),
            pt(f64::NAN, 1.0, false, "broken"),
        ],
    }
}

/// Writes `plot` as SVG and as PNG of `size`, checks both and returns the
/// SVG text and the PNG bytes.
fn write_both(plot: &dyn Plot, dir: &Dir, stem: &str, size: (u32, u32)) -> (String, Vec<u8>) {
    let svg_path = dir.file(&format!("{stem}.svg"));
    plot.write_sized(&svg_path, size).unwrap();
    let svg = read_svg(&svg_path);
    assert!(svg.contains(&format!("width=\"{}\"", size.0)) && svg.contains(&format!("height=\"{}\"", size.1)));
    let png_path = dir.file(&format!("{stem}.png"));
    plot.write_sized(&png_path, size).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(png_size(&png_path), size);
    (svg, std::fs::read(&png_path).unwrap())
}

#[test]
fn box_plots_name_title_axes_groups_and_categories_in_svg_and_draw_them_in_png() {
    let dir = Dir::new("box");
    let (svg, png) = write_both(&box_plot(), &dir, "box", (900, 500));
    for text in ["Goodput by loss", "loss", "goodput (Mbit/s)", "minrtt", "redundant", "0%", "1%", "5%"] {
        assert!(has_text(&svg, text), "SVG lacks {text:?}");
    }
    assert!(!svg.contains("NaN"), "NaN values are skipped, never drawn");
    // The two outliers (60 and 120) are circles; the boxes are rectangles.
    assert!(svg.matches("<circle").count() >= 2);
    assert!(svg.matches("<rect").count() >= 2 * 5);
    // The first group's Okabe–Ito blue is drawn (box borders, whiskers).
    assert!(pixels_like(&png, (0, 114, 178)) > 200);
}

#[test]
fn box_plot_figures_are_the_box_statistics_of_each_group_and_category() {
    let stats = box_plot().stats().unwrap();
    let minrtt_0 = stats[0][0].as_ref().unwrap();
    // 60, 92, 93, 94.5, 95: q1 = 92, median = 93, q3 = 94.5; 60 is below 92 - 1.5 * 2.5.
    assert_eq!((minrtt_0.q1, minrtt_0.median, minrtt_0.q3), (92.0, 93.0, 94.5));
    assert_eq!(minrtt_0.outliers, vec![60.0]);
    assert_eq!(stats[0][1].as_ref().unwrap().n, 3, "the NaN is not counted");
    assert!(stats[1][1].is_none(), "no values: no box");
}

#[test]
fn png_text_is_rendered_with_a_system_font() {
    // The same plot with and without its title, axis description and
    // category names: the rows of that text differ exactly when a font was
    // found and used.
    let labelled = box_plot().render(Format::Png, DEFAULT_SIZE).unwrap_or_else(|e| panic!("{e}"));
    let blank = BoxPlot { title: String::new(), x_label: String::new(), categories: vec![String::new(); 3], ..box_plot() };
    let blank = blank.render(Format::Png, DEFAULT_SIZE).unwrap();
    let title_rows = 4..34;
    assert!(dark_pixels(&labelled, title_rows.clone()) > 150, "no title drawn: is a font installed (fonts-dejavu-core)?");
    assert_eq!(dark_pixels(&blank, title_rows), 0);
    let bottom_rows = DEFAULT_SIZE.1 - 60..DEFAULT_SIZE.1;
    let (with, without) = (dark_pixels(&labelled, bottom_rows.clone()), dark_pixels(&blank, bottom_rows));
    assert!(with > without + 60, "category names and x description: {with} dark pixels, {without} without them");
}

#[test]
fn many_long_categories_are_turned_upright_and_thinned_not_piled_up() {
    let categories: Vec<String> = (0..120).map(|i| format!("rtt-ratio-{i}-loss-2%")).collect();
    let values = (0..120).map(|i| vec![i as f64, i as f64 + 1.0, i as f64 + 3.0]).collect();
    let plot = BoxPlot {
        title: "dense".into(),
        x_label: "environment".into(),
        y_label: "s".into(),
        categories: categories.clone(),
        groups: vec![BoxGroup { name: String::new(), values_per_category: values }],
    };
    let svg = plot.to_svg(DEFAULT_SIZE).unwrap();
    let shown = categories.iter().filter(|c| has_text(&svg, c)).count();
    assert!(svg.contains("rotate(270"), "long labels are upright");
    assert!(shown > 10 && shown < 120, "{shown} of 120 labels shown");
    assert!(has_text(&svg, "rtt-ratio-0-loss-2%"), "the first category is always labelled");
    usvg::Tree::from_str(&svg, &usvg::Options::default()).unwrap();
}

#[test]
fn band_plots_draw_each_groups_line_and_band() {
    let dir = Dir::new("band");
    let (svg, png) = write_both(&band_plot(), &dir, "band", (800, 480));
    for text in ["Completion time over RTT ratio", "RTT ratio", "flow completion time (s)", "minrtt", "redundant"] {
        assert!(has_text(&svg, text), "SVG lacks {text:?}");
    }
    assert!(svg.contains("<polygon"), "bands are filled polygons");
    assert!(!svg.contains("NaN"));
    assert!(pixels_like(&png, (213, 94, 0)) > 50, "second group's orange line");
}

#[test]
fn series_plots_draw_every_series_over_time() {
    let dir = Dir::new("series");
    let (svg, png) = write_both(&series_plot(), &dir, "series", DEFAULT_SIZE);
    for text in ["Experiment 3f2a: congestion window", "time (s)", "packets", "cwnd", "ssthresh"] {
        assert!(has_text(&svg, text), "SVG lacks {text:?}");
    }
    assert!(svg.contains("<polyline"));
    assert!(!svg.contains("NaN"));
    assert!(pixels_like(&png, (0, 114, 178)) > 200);
}

#[test]
fn pareto_plots_say_which_direction_is_better_and_label_the_front() {
    let dir = Dir::new("pareto");
    let (svg, png) = write_both(&pareto_plot(), &dir, "pareto", DEFAULT_SIZE);
    for text in [
        "Completion time against overhead",
        "flow completion time (s) (min: lower is better)",
        "bytes on the wire (MB) (min: lower is better)",
        "Pareto front",
        "redundant",
        "minrtt",
        "opportunistic",
    ] {
        assert!(has_text(&svg, text), "SVG lacks {text:?}");
    }
    assert!(!has_text(&svg, "roundrobin"), "dominated points are not labelled");
    assert!(!has_text(&svg, "broken") && !svg.contains("NaN"), "a point with a NaN metric is skipped");
    assert!(pixels_like(&png, (0, 114, 178)) > 100);
    let max = ParetoPlot { x: Objective { label: "goodput".into(), better: Direction::Max }, ..pareto_plot() };
    assert!(has_text(&max.to_svg(DEFAULT_SIZE).unwrap(), "goodput (max: higher is better)"));
}

#[test]
fn the_format_follows_the_extension_and_anything_else_is_refused() {
    let dir = Dir::new("format");
    let upper = dir.file("series.SVG");
    series_plot().write(&upper).unwrap();
    read_svg(&upper);
    for name in ["series.pdf", "series", "series.svg.gz"] {
        let path = dir.file(name);
        let err = series_plot().write(&path).unwrap_err();
        assert!(matches!(err, PlotError::UnsupportedFormat { .. }), "{name}: {err}");
        let message = err.to_string();
        assert!(message.contains(name) && message.contains(".svg") && message.contains(".png"), "{message}");
        assert!(!path.exists());
    }
}

#[test]
fn unwritable_files_and_bad_sizes_are_errors_naming_them() {
    let dir = Dir::new("io");
    let path = dir.file("missing-folder/plot.svg");
    let err = box_plot().write(&path).unwrap_err();
    assert!(matches!(err, PlotError::Io { .. }) && err.to_string().contains("missing-folder"), "{err}");
    for size in [(0, 500), (10, 10), (900, 100_000)] {
        let err = box_plot().to_svg(size).unwrap_err();
        assert!(matches!(err, PlotError::BadSize { .. }), "{size:?}: {err}");
        assert!(err.to_string().contains(&format!("{}x{}", size.0, size.1)));
    }
}

#[test]
fn empty_or_all_nan_input_is_a_typed_error() {
    let nothing = |e: PlotError| matches!(e, PlotError::Empty { .. });
    assert!(nothing(BoxPlot { categories: vec![], groups: vec![], ..box_plot() }.to_svg(DEFAULT_SIZE).unwrap_err()));
    assert!(nothing(BoxPlot { groups: vec![], ..box_plot() }.to_svg(DEFAULT_SIZE).unwrap_err()));
    let all_nan = BoxGroup { name: "x".into(), values_per_category: vec![vec![f64::NAN]; 3] };
    assert!(nothing(BoxPlot { groups: vec![all_nan], ..box_plot() }.to_svg(DEFAULT_SIZE).unwrap_err()));
    assert!(nothing(BandPlot { groups: vec![], ..band_plot() }.to_svg(DEFAULT_SIZE).unwrap_err()));
    let nan_band =
        BandGroup { name: "x".into(), points: vec![BandPoint { x: 1.0, mean: f64::NAN, lower: 0.0, upper: 1.0 }] };
    assert!(nothing(BandPlot { groups: vec![nan_band], ..band_plot() }.to_svg(DEFAULT_SIZE).unwrap_err()));
    assert!(nothing(SeriesPlot { series: vec![], ..series_plot() }.to_svg(DEFAULT_SIZE).unwrap_err()));
    let empty_series = TimeSeries { name: "cwnd".into(), points: vec![] };
    assert!(nothing(SeriesPlot { series: vec![empty_series], ..series_plot() }.to_svg(DEFAULT_SIZE).unwrap_err()));
    assert!(nothing(ParetoPlot { points: vec![], ..pareto_plot() }.to_svg(DEFAULT_SIZE).unwrap_err()));
    // The error says which plot and what was missing.
    let err = BoxPlot { groups: vec![], ..box_plot() }.to_svg(DEFAULT_SIZE).unwrap_err();
    assert_eq!(err.to_string(), "box plot: nothing to plot: no groups");
}

#[test]
fn contradictory_data_is_an_error_naming_the_field() {
    let short = BoxGroup { name: "braid".into(), values_per_category: vec![vec![1.0]] };
    let err = BoxPlot { groups: vec![short], ..box_plot() }.to_svg(DEFAULT_SIZE).unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, PlotError::InvalidData { .. }), "{message}");
    assert!(message.contains("groups[0] (\"braid\").values_per_category") && message.contains("1 value lists for 3"));
    let upside_down =
        BandGroup { name: "g".into(), points: vec![BandPoint { x: 2.0, mean: 1.0, lower: 3.0, upper: 0.5 }] };
    let err = BandPlot { groups: vec![upside_down], ..band_plot() }.to_svg(DEFAULT_SIZE).unwrap_err();
    assert!(err.to_string().contains("at x = 2") && err.to_string().contains("lower <= upper"), "{err}");
    let huge = TimeSeries { name: "s".into(), points: vec![(0.0, -f64::MAX), (1.0, f64::MAX)] };
    let err = SeriesPlot { series: vec![huge], ..series_plot() }.to_svg(DEFAULT_SIZE).unwrap_err();
    assert!(matches!(err, PlotError::InvalidData { .. }), "{err}");
}

#[test]
fn a_single_value_still_makes_a_plot() {
    let one = BoxPlot {
        categories: vec!["only".into()],
        groups: vec![BoxGroup { name: "g".into(), values_per_category: vec![vec![5.0]] }],
        ..box_plot()
    };
    assert!(has_text(&one.to_svg(DEFAULT_SIZE).unwrap(), "only"));
    let point = SeriesPlot { series: vec![TimeSeries { name: "s".into(), points: vec![(1.0, 0.0)] }], ..series_plot() };
    point.to_svg(DEFAULT_SIZE).unwrap();
    let band = BandGroup { name: "g".into(), points: vec![BandPoint { x: 0.0, mean: 1.0, lower: 0.5, upper: 1.5 }] };
    BandPlot { groups: vec![band], ..band_plot() }.to_svg(DEFAULT_SIZE).unwrap();
}

fn any_value() -> impl Strategy<Value = f64> {
    prop_oneof![
        6 => -1e6f64..1e6,
        1 => Just(f64::NAN),
        1 => Just(f64::INFINITY),
        1 => prop::num::f64::ANY,
        1 => Just(0.0),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn any_box_plot_input_draws_or_gives_a_typed_error(
        categories in prop::collection::vec("[a-z0-9 %=<&]{0,40}", 0..30),
        groups in prop::collection::vec(prop::collection::vec(prop::collection::vec(any_value(), 0..8), 0..30), 0..4),
        width in 0u32..2000,
        height in 0u32..1500,
    ) {
        let plot = BoxPlot {
            title: "t".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            categories,
            groups: groups.into_iter().enumerate().map(|(k, v)| BoxGroup { name: format!("g{k}"), values_per_category: v }).collect(),
        };
        match plot.to_svg((width, height)) {
            Ok(svg) => prop_assert!(usvg::Tree::from_str(&svg, &usvg::Options::default()).is_ok()),
            Err(PlotError::Draw { message, .. }) => prop_assert!(false, "plotters failed: {}", message),
            Err(_) => {}
        }
    }

    #[test]
    fn any_series_input_draws_or_gives_a_typed_error(
        series in prop::collection::vec(prop::collection::vec((any_value(), any_value()), 0..40), 0..4),
    ) {
        let plot = SeriesPlot {
            series: series.into_iter().map(|points| TimeSeries { name: "s".into(), points }).collect(),
            ..series_plot()
        };
        match plot.to_svg(DEFAULT_SIZE) {
            Ok(svg) => prop_assert!(!svg.contains("NaN") && !svg.contains("inf")),
            Err(PlotError::Draw { message, .. }) => prop_assert!(false, "plotters failed: {}", message),
            Err(_) => {}
        }
    }
}
