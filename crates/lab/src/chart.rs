//! Grouped bar charts of benchmark results, as SVG (plotters' SVG backend: no fonts or
//! image libraries): one group of bars per category (a profile, a mode), one colour per
//! series (a DUT on a transport), with a legend.

use std::path::Path;

use anyhow::{Context, Result};

/// One bar: its series, its group, its height.
#[derive(Clone, Debug, PartialEq)]
pub struct Bar {
    /// The series (legend entry).
    pub series: String,
    /// The group (x-axis label).
    pub group: String,
    /// The value.
    pub value: f64,
}

/// Draw `bars` grouped by their group (in order of first appearance), coloured by series,
/// into the SVG file `path`.
pub fn bars(path: &Path, title: &str, y_desc: &str, bars: &[Bar]) -> Result<()> {
    use plotters::prelude::*;
    let mut groups: Vec<String> = Vec::new();
    let mut series: Vec<String> = Vec::new();
    for b in bars {
        if !groups.contains(&b.group) {
            groups.push(b.group.clone());
        }
        if !series.contains(&b.series) {
            series.push(b.series.clone());
        }
    }
    let max = bars
        .iter()
        .map(|b| b.value)
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max)
        .max(0.001);
    let root = SVGBackend::new(path, (960, 540)).into_drawing_area();
    root.fill(&WHITE).context("drawing the chart")?;
    let n = groups.len().max(1) as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..n, 0.0..max * 1.2)
        .context("drawing the chart")?;
    let names = groups.clone();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(groups.len() * 2 + 1)
        .x_label_formatter(&move |x: &f64| {
            let i = x.floor() as usize;
            if (x - x.floor() - 0.5).abs() < 0.01 {
                names.get(i).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc(y_desc)
        .draw()
        .context("drawing the chart")?;
    let width = 0.8 / series.len().max(1) as f64;
    for (j, s) in series.iter().enumerate() {
        let color = Palette99::pick(j).mix(0.9);
        let rects: Vec<Rectangle<(f64, f64)>> = bars
            .iter()
            .filter(|b| &b.series == s && b.value.is_finite())
            .filter_map(|b| {
                let i = groups.iter().position(|g| g == &b.group)? as f64;
                let x0 = i + 0.1 + j as f64 * width;
                Some(Rectangle::new(
                    [(x0, 0.0), (x0 + width * 0.95, b.value)],
                    color.filled(),
                ))
            })
            .collect();
        chart
            .draw_series(rects)
            .context("drawing the chart")?
            .label(s.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled()));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .context("drawing the chart")?;
    root.present()
        .with_context(|| format!("writing the chart to {}", path.display()))?;
    Ok(())
}
