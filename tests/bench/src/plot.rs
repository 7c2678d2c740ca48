//! PNG plots drawn by the tool itself (plotters, bitmap backend; text through ab_glyph with
//! a TrueType font found on the system): latency percentiles per class and size,
//! throughput against the ceiling and the peer, the queue's p99 against its history, and
//! upload throughput and p99 against the number of scanners, and small executions'
//! time to ready during a big publication. No font, no plots — the
//! report says so.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::report::{quantiles, Results};
use crate::scanner::CLASSES;

const FONTS: [&str; 3] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];

fn register_font() -> bool {
    for f in FONTS {
        if let Ok(bytes) = std::fs::read(f) {
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                return true;
            }
        }
    }
    false
}

/// Draws every plot into `out`; returns the files written (errors go to stderr).
pub fn all(r: &Results, out: &Path) -> Vec<PathBuf> {
    if !register_font() {
        eprintln!("no TrueType font found (install fonts-dejavu-core): plots skipped");
        return Vec::new();
    }
    let mut files = Vec::new();
    for (name, f) in [
        (
            "latency.png",
            latency as fn(&Results, &Path) -> Result<(), String>,
        ),
        ("throughput.png", throughput),
        ("queue.png", queue),
        ("scanners.png", scanners),
        ("fairness.png", fairness),
    ] {
        if (name == "queue.png" && r.queue.is_none())
            || (name == "scanners.png" && r.sweep.is_none())
            || (name == "fairness.png" && r.fairness.is_none())
        {
            continue;
        }
        let p = out.join(name);
        match f(r, &p) {
            Ok(()) => files.push(p),
            Err(e) => eprintln!("plot {name}: {e}"),
        }
    }
    files
}

fn err<E: std::fmt::Debug>(e: E) -> String {
    format!("{e:?}")
}

/// A line with a dot at each point, named in the legend.
fn marked_line<'a, DB, CT>(
    chart: &mut ChartContext<'a, DB, CT>,
    name: String,
    pts: Vec<(f64, f64)>,
    color: RGBAColor,
    width: u32,
) -> Result<(), String>
where
    DB: DrawingBackend + 'a,
    CT: CoordTranslate<From = (f64, f64)>,
{
    chart
        .draw_series(LineSeries::new(pts.clone(), color.stroke_width(width)))
        .map_err(err)?
        .label(name)
        .legend(move |(x, y)| {
            PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(width))
        });
    chart
        .draw_series(pts.into_iter().map(|p| Circle::new(p, 3, color.filled())))
        .map_err(err)?;
    Ok(())
}

/// The legend, boxed, at `at`.
fn legend<'a, DB, CT>(
    chart: &mut ChartContext<'a, DB, CT>,
    at: SeriesLabelPosition,
) -> Result<(), String>
where
    DB: DrawingBackend + 'a,
    CT: CoordTranslate,
{
    chart
        .configure_series_labels()
        .position(at)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(err)
}

fn latency(r: &Results, path: &Path) -> Result<(), String> {
    let mut lines = Vec::new();
    for s in &r.sizes {
        for (ci, c) in CLASSES.iter().enumerate() {
            let h = &s.upload.latencies.0[c];
            if h.is_empty() {
                continue;
            }
            let q = quantiles(h);
            lines.push((format!("{c} @ {} endpoints", s.size), ci, q));
        }
    }
    let max = lines.iter().flat_map(|l| l.2).fold(1.0f64, f64::max) * 1.5;
    let min = lines
        .iter()
        .flat_map(|l| l.2)
        .fold(f64::MAX, f64::min)
        .max(0.01)
        / 1.5;
    let root = BitMapBackend::new(path, (1100, 650)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption("Upload latency per class (client side)", ("sans-serif", 24))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.2f64..3.2f64, (min..max).log_scale())
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_labels(4)
        .x_label_formatter(&|x| {
            ["p50", "p95", "p99", "max"]
                .get(x.round() as usize)
                .unwrap_or(&"")
                .to_string()
        })
        .y_label_formatter(&|v| format!("{v:.0}"))
        .y_desc("milliseconds (log)")
        .draw()
        .map_err(err)?;
    let sizes: Vec<usize> = r.sizes.iter().map(|s| s.size).collect();
    for (label, ci, q) in lines {
        let size_i = sizes
            .iter()
            .position(|s| label.ends_with(&format!("@ {s} endpoints")))
            .unwrap_or(0);
        let color = Palette99::pick(ci).to_rgba();
        let width = 1 + size_i as u32 * 2;
        let pts: Vec<(f64, f64)> = q
            .iter()
            .enumerate()
            .map(|(i, v)| (i as f64, v.max(min)))
            .collect();
        marked_line(&mut chart, label, pts, color, width)?;
    }
    legend(&mut chart, SeriesLabelPosition::LowerRight)?;
    root.present().map_err(err)
}

fn throughput(r: &Results, path: &Path) -> Result<(), String> {
    let names = [
        "scanstore upload",
        "ceiling upload",
        "scanstore publication",
        "ceiling publication",
        "Python peer",
    ];
    let groups: Vec<(usize, [f64; 5])> = r
        .sizes
        .iter()
        .map(|s| {
            // Skipped measurements draw as empty slots.
            let peer = s.peer.as_ref().map(|p| p.endpoints_per_s()).unwrap_or(0.0);
            (
                s.size,
                [
                    s.upload_eps(),
                    s.ceiling_upload.endpoints_per_s(),
                    s.publish_eps(),
                    s.publication().map_or(0.0, |p| p.ceiling.endpoints_per_s()),
                    peer,
                ],
            )
        })
        .collect();
    let top = groups.iter().flat_map(|g| g.1).fold(1.0f64, f64::max) * 1.15;
    let width = groups.len() as f64 * 6.0;
    let root = BitMapBackend::new(path, (1100, 650)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Throughput (endpoints/s) against the raw-bulk ceiling and the Python peer",
            ("sans-serif", 22),
        )
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(0f64..width, 0f64..top)
        .map_err(err)?;
    let labels: Vec<(f64, String)> = groups
        .iter()
        .enumerate()
        .map(|(i, g)| (i as f64 * 6.0 + 3.0, format!("{} endpoints", g.0)))
        .collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(groups.len() * 6 + 1)
        .x_label_formatter(&|x| {
            labels
                .iter()
                .find(|(c, _)| (c - x).abs() < 0.5)
                .map(|l| l.1.clone())
                .unwrap_or_default()
        })
        .y_label_formatter(&|v| format!("{v:.0}"))
        .y_desc("endpoints per second")
        .draw()
        .map_err(err)?;
    for (k, name) in names.iter().enumerate() {
        let color = Palette99::pick(k).to_rgba();
        chart
            .draw_series(groups.iter().enumerate().map(|(i, g)| {
                let x0 = i as f64 * 6.0 + 0.5 + k as f64;
                Rectangle::new([(x0, 0.0), (x0 + 0.9, g.1[k])], color.filled())
            }))
            .map_err(err)?
            .label(*name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 15, y + 5)], color.filled()));
    }
    legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    root.present().map_err(err)
}

fn queue(r: &Results, path: &Path) -> Result<(), String> {
    let Some(q) = &r.queue else {
        return Ok(());
    };
    type Quantiles = fn(&crate::queue::Step) -> [f64; 4];
    let series: [(&str, Quantiles); 4] = [
        ("claim", |s| s.claim),
        ("checkpoint", |s| s.checkpoint),
        ("backlog (sampler)", |s| s.backlog),
        ("backlog summary (admin)", |s| s.admin_summary),
    ];
    let top = q
        .steps
        .iter()
        .flat_map(|s| series.iter().map(move |(_, f)| f(s)[2]))
        .fold(0.1f64, f64::max)
        * 1.3;
    let n = q.steps.len();
    let root = BitMapBackend::new(path, (1100, 650)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Queue statements: p99 against the outbox's processed history",
            ("sans-serif", 22),
        )
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.2f64..(n as f64 - 0.8), 0f64..top)
        .map_err(err)?;
    let labels: Vec<String> = q
        .steps
        .iter()
        .map(|s| format!("{} rows, {} receipts", s.history, s.receipts))
        .collect();
    chart
        .configure_mesh()
        .x_labels(n)
        .x_label_formatter(&|x| labels.get(x.round() as usize).cloned().unwrap_or_default())
        .y_label_formatter(&|v| format!("{v:.2}"))
        .y_desc("p99 milliseconds")
        .draw()
        .map_err(err)?;
    for (k, (name, f)) in series.iter().enumerate() {
        let color = Palette99::pick(k).to_rgba();
        let pts: Vec<(f64, f64)> = q
            .steps
            .iter()
            .enumerate()
            .map(|(i, s)| (i as f64, f(s)[2]))
            .collect();
        marked_line(&mut chart, name.to_string(), pts, color, 2)?;
    }
    legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    root.present().map_err(err)
}

/// Upload throughput (scanstore's and its ceiling's) and normal/final p99 against the
/// number of concurrent scanners, one line per size.
fn scanners(r: &Results, path: &Path) -> Result<(), String> {
    let Some(s) = &r.sweep else {
        return Ok(());
    };
    let counts: Vec<usize> = {
        let mut v: Vec<usize> = s.points.iter().map(|p| p.scanners).collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    let x_of = |n: usize| counts.iter().position(|&c| c == n).unwrap_or(0) as f64;
    let xr = -0.2f64..(counts.len() as f64 - 0.8).max(0.2);
    let root = BitMapBackend::new(path, (1200, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let (left, right) = root.split_horizontally(600);
    type Series<'a> = Vec<(String, Vec<(f64, f64)>, bool)>;
    let draw = |area: &DrawingArea<BitMapBackend, plotters::coord::Shift>,
                caption: &str,
                y_desc: &str,
                series: Series|
     -> Result<(), String> {
        let top = series
            .iter()
            .flat_map(|(_, pts, _)| pts.iter().map(|p| p.1))
            .fold(1.0f64, f64::max)
            * 1.2;
        let mut chart = ChartBuilder::on(area)
            .caption(caption, ("sans-serif", 20))
            .margin(15)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(xr.clone(), 0f64..top)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_labels(counts.len())
            .x_label_formatter(&|x| {
                counts
                    .get(x.round().max(0.0) as usize)
                    .map(|c| format!("{c} scanners"))
                    .unwrap_or_default()
            })
            .y_desc(y_desc)
            .draw()
            .map_err(err)?;
        for (k, (name, pts, thin)) in series.into_iter().enumerate() {
            let width = if thin { 1 } else { 2 };
            marked_line(&mut chart, name, pts, Palette99::pick(k).to_rgba(), width)?;
        }
        legend(&mut chart, SeriesLabelPosition::LowerRight)
    };
    let line = |size: usize, f: &dyn Fn(&crate::sweep::Point) -> f64| -> Vec<(f64, f64)> {
        s.points
            .iter()
            .filter(|p| p.size == size)
            .map(|p| (x_of(p.scanners), f(p)))
            .collect()
    };
    let mut through: Series = Vec::new();
    let mut p99: Series = Vec::new();
    for size in s.sizes() {
        through.push((
            format!("{size}: scanstore"),
            line(size, &|p| p.endpoints_per_s().0),
            false,
        ));
        through.push((
            format!("{size}: ceiling"),
            line(size, &|p| p.ceiling_per_s().0),
            true,
        ));
        // Paced when measured so: the latency targets' numbers.
        for (class, thin) in [("normal", false), ("final", true)] {
            let pts: Vec<(f64, f64)> = s
                .points
                .iter()
                .filter(|p| p.size == size)
                .filter_map(|p| {
                    let (v, n) = p.paced.as_ref().map_or(p.p99(class), |x| x.p99(class));
                    (n > 0).then(|| (x_of(p.scanners), v))
                })
                .collect();
            p99.push((format!("{size}: {class}"), pts, thin));
        }
    }
    draw(&left, "Upload throughput", "endpoints/s", through)?;
    draw(
        &right,
        "Upload p99, paced (client side)",
        "milliseconds",
        p99,
    )?;
    root.present().map_err(err)
}

fn fairness(r: &Results, path: &Path) -> Result<(), String> {
    let Some(f) = &r.fairness else {
        return Ok(());
    };
    let samples = || f.runs.iter().flat_map(|run| &run.samples);
    // To the end of the longer big publication: where the small ones fell within it.
    let right = samples()
        .map(|s| s.at_s)
        .chain(f.runs.iter().map(|run| run.big_seconds))
        .fold(1.0f64, f64::max)
        * 1.05;
    let top = samples().map(|s| s.ready_s).fold(5.0f64, f64::max) * 1.15;
    let root = BitMapBackend::new(path, (1100, 650)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "Small executions: seconds to ready while {} endpoints publish",
                f.backlog
            ),
            ("sans-serif", 22),
        )
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..right, 0f64..top)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("seconds into the big publication when the small one's final was answered")
        .y_desc("seconds to projection_status ready")
        .draw()
        .map_err(err)?;
    chart
        .draw_series(LineSeries::new(
            [(0.0, 5.0), (right, 5.0)],
            RED.mix(0.6).stroke_width(1),
        ))
        .map_err(err)?
        .label("target: 5 s")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED.mix(0.6)));
    for (k, run) in f.runs.iter().enumerate() {
        let color = Palette99::pick(k).to_rgba();
        let pts: Vec<(f64, f64)> = run.samples.iter().map(|s| (s.at_s, s.ready_s)).collect();
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))
            .map_err(err)?
            .label(format!(
                "projection.workers = {} (the big one done at {:.1} s)",
                run.workers, run.big_seconds
            ))
            .legend(move |(x, y)| Circle::new((x + 10, y), 4, color.filled()));
    }
    legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    root.present().map_err(err)
}
