//! Reliability diagrams before and after the fitted temperature, one row of two
//! panels per fitted question type, drawn with `plotters` (SVG backend, text as
//! `<text>` elements: no system fonts needed). The bins are those of
//! [`crate::metrics::reliability_bins`] over the scored (out-of-fold) slots.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use dgem_core::schema::QuestionKind;

use super::Fitted;
use crate::metrics::{ece_10bin, reliability_bins};
use crate::BenchError;

/// Draw the diagrams of every fitted type of `fitted` to `path`, `title` on
/// top (name the model there). Returns how many types were drawn; with none,
/// nothing is written.
///
/// # Errors
/// [`BenchError::Plot`] when drawing or writing fails.
pub fn before_after_svg(fitted: &Fitted, title: &str, path: &Path) -> Result<usize, BenchError> {
    let panels: Vec<Panel<'_>> = QuestionKind::SLOT_KINDS
        .iter()
        .filter_map(|k| {
            let f = fitted.of(*k);
            // A type fitted and scored, even when its temperature was then
            // dropped for making held-out figures worse, is drawn: the
            // diagram shows why.
            f.figures.scores?;
            Some((
                k.as_str(),
                f.before.as_slice(),
                f.after.as_slice(),
                f.figures.temperature,
            ))
        })
        .collect();
    if panels.is_empty() {
        return Ok(0);
    }
    draw(&panels, title, path).map_err(|e| BenchError::Plot {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    Ok(panels.len())
}

/// Type name, pairs before, pairs after, the kept T (`None`: dropped).
type Panel<'a> = (&'a str, &'a [(f64, bool)], &'a [(f64, bool)], Option<f64>);

fn draw(panels: &[Panel<'_>], title: &str, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let rows = panels.len();
    let height = 60 + 340 * u32::try_from(rows).unwrap_or(3);
    let root = SVGBackend::new(path, (900, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 18))?;
    let cells = root.split_evenly((rows, 2));
    for (i, (name, before, after, t)) in panels.iter().enumerate() {
        let (left, right) = (&cells[2 * i], &cells[2 * i + 1]);
        panel(left, &format!("{name}: as read (T = 1)"), before)?;
        let label = match t {
            Some(t) => format!("{name}: after T = {t:.3}"),
            None => format!("{name}: after the fitted T (dropped: held-out worse)"),
        };
        panel(right, &label, after)?;
    }
    root.present()?;
    Ok(())
}

fn panel(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    caption: &str,
    xs: &[(f64, bool)],
) -> Result<(), Box<dyn std::error::Error>> {
    let bins = reliability_bins(xs);
    let caption = format!("{caption}, ECE {:.3}, n = {}", ece_10bin(xs), xs.len());
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 14))
        .margin(10)
        .x_label_area_size(36)
        .y_label_area_size(44)
        .build_cartesian_2d(0f64..1f64, 0f64..1f64)?;
    chart
        .configure_mesh()
        .x_desc("confidence (top answer)")
        .y_desc("accuracy")
        .x_labels(6)
        .y_labels(6)
        .draw()?;
    chart.draw_series(bins.iter().filter(|b| b.count > 0).map(|b| {
        Rectangle::new(
            [
                (b.lower + 0.005, 0.0),
                (b.upper - 0.005, b.empirical_accuracy),
            ],
            BLUE.mix(0.55).filled(),
        )
    }))?;
    chart.draw_series(
        bins.iter()
            .filter(|b| b.count > 0)
            .map(|b| Circle::new((b.avg_confidence, b.empirical_accuracy), 4, RED.filled())),
    )?;
    chart.draw_series(LineSeries::new(
        vec![(0.0, 0.0), (1.0, 1.0)],
        BLACK.stroke_width(1),
    ))?;
    Ok(())
}
