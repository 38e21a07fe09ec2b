//! The reliability diagram as SVG, drawn with `plotters` (SVG backend only: text
//! is written as SVG `<text>` elements, so no system fonts are needed).

use std::path::Path;

use plotters::prelude::*;

use crate::metrics::ReliabilityBin;
use crate::BenchError;

/// Draw accuracy per confidence bin (bars) against the diagonal of perfect
/// calibration; `title` goes on top (name the model there).
///
/// # Errors
/// [`BenchError::Plot`] when drawing or writing fails.
pub fn reliability_svg(
    bins: &[ReliabilityBin],
    title: &str,
    path: &Path,
) -> Result<(), BenchError> {
    draw(bins, title, path).map_err(|e| BenchError::Plot {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

fn draw(
    bins: &[ReliabilityBin],
    title: &str,
    path: &Path,
) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (640, 520)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(52)
        .build_cartesian_2d(0f64..1f64, 0f64..1f64)?;
    chart
        .configure_mesh()
        .x_desc("confidence (top answer)")
        .y_desc("accuracy")
        .x_labels(11)
        .y_labels(11)
        .draw()?;
    chart
        .draw_series(bins.iter().filter(|b| b.count > 0).map(|b| {
            Rectangle::new(
                [
                    (b.lower + 0.005, 0.0),
                    (b.upper - 0.005, b.empirical_accuracy),
                ],
                BLUE.mix(0.55).filled(),
            )
        }))?
        .label("accuracy per bin")
        .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], BLUE.mix(0.55).filled()));
    chart
        .draw_series(
            bins.iter()
                .filter(|b| b.count > 0)
                .map(|b| Circle::new((b.avg_confidence, b.empirical_accuracy), 4, RED.filled())),
        )?
        .label("mean confidence of bin")
        .legend(|(x, y)| Circle::new((x + 6, y), 4, RED.filled()));
    chart
        .draw_series(LineSeries::new(
            vec![(0.0, 0.0), (1.0, 1.0)],
            BLACK.stroke_width(1),
        ))?
        .label("perfect calibration")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 12, y)], BLACK));
    chart.draw_series(bins.iter().filter(|b| b.count > 0).map(|b| {
        Text::new(
            format!("n={}", b.count),
            (
                (b.lower + b.upper) / 2.0 - 0.03,
                (b.empirical_accuracy + 0.04).min(0.97),
            ),
            ("sans-serif", 11),
        )
    }))?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
