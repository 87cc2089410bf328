//! SVG plots of `zftl bench media` (the `plotters` crate's SVG backend).

use std::path::Path;

use plotters::prelude::*;

use super::media::MediaReport;
use super::BenchError;

const COLORS: [RGBColor; 4] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
];

/// Points of a CDF: at most this many, evenly spread over the samples.
const CDF_POINTS: usize = 400;

fn fail(path: &Path) -> impl Fn(String) -> BenchError + '_ {
    move |e| BenchError::Check(format!("cannot plot {}: {e}", path.display()))
}

/// Utilization against depth (left) and the latency CDFs (right); `cdfs`
/// are sorted latency samples in virtual nanoseconds.
pub fn media_svg(
    path: &Path,
    report: &MediaReport,
    cdfs: &[(&str, Vec<u64>)],
) -> Result<(), BenchError> {
    let fail = fail(path);
    let root = SVGBackend::new(path, (1280, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(e.to_string()))?;
    let (left, right) = root.split_horizontally(620);
    utilization(&left, report).map_err(|e| fail(e.to_string()))?;
    latency(&right, cdfs).map_err(|e| fail(e.to_string()))?;
    root.present().map_err(|e| fail(e.to_string()))?;
    Ok(())
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;
type PlotResult = Result<(), Box<dyn std::error::Error>>;

fn utilization(area: &Area<'_>, report: &MediaReport) -> PlotResult {
    let max_depth = report
        .series
        .iter()
        .flat_map(|s| s.windows.iter().map(|w| w.depth))
        .max()
        .unwrap_or(1)
        .max(2) as f64;
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!("media utilization ({} LUNs)", report.luns),
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d((1f64..max_depth * 1.2).log_scale(), 0f64..1.05f64)?;
    chart
        .configure_mesh()
        .light_line_style(TRANSPARENT)
        .x_desc("host queue depth")
        .y_desc("LUN busy ÷ (LUNs × time)")
        .draw()?;
    for (i, s) in report.series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let points: Vec<(f64, f64)> = s
            .windows
            .iter()
            .map(|w| (w.depth as f64, w.utilization))
            .collect();
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?
            .label(s.workload)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        chart.draw_series(
            points
                .into_iter()
                .map(|p| Circle::new(p, 4, color.filled())),
        )?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

fn latency(area: &Area<'_>, cdfs: &[(&str, Vec<u64>)]) -> PlotResult {
    let us = |ns: u64| (ns as f64 / 1e3).max(1.0);
    let lo = cdfs
        .iter()
        .filter_map(|(_, v)| v.first())
        .map(|&n| us(n))
        .fold(f64::INFINITY, f64::min)
        .min(10.0);
    let hi = cdfs
        .iter()
        .filter_map(|(_, v)| v.last())
        .map(|&n| us(n))
        .fold(lo * 10.0, f64::max);
    let mut chart = ChartBuilder::on(area)
        .caption("4 KiB latency CDF (virtual time)", ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d((lo * 0.8..hi * 1.25).log_scale(), 0f64..1.0f64)?;
    chart
        .configure_mesh()
        .light_line_style(TRANSPARENT)
        .x_desc("latency, µs")
        .y_desc("fraction of requests")
        .draw()?;
    for (i, (name, samples)) in cdfs.iter().enumerate() {
        if samples.is_empty() {
            continue;
        }
        let color = COLORS[i % COLORS.len()];
        let n = samples.len();
        let step = n.div_ceil(CDF_POINTS).max(1);
        let mut points: Vec<(f64, f64)> = (0..n)
            .step_by(step)
            .map(|k| (us(samples[k]), (k + 1) as f64 / n as f64))
            .collect();
        points.push((us(samples[n - 1]), 1.0));
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))?
            .label(*name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}
