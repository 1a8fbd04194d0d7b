//! `hpcview-rs --timeline`, `--slices` and `--memmap`: the traces (`hpcrun-rs -t`) as
//! threads x time, coloured by procedure, in the terminal and as an SVG or PNG image; cut into
//! time slices with per-procedure samples, activity spans and phases; and the data traces
//! (`hpcrun-rs -t --data`) as time x object pages, in text, CSV, JSON and images.

use std::io::{self, BufWriter, Write};
use std::path::Path;

use anyhow::anyhow;
use correlate::render::memmap::MapLayout;
use correlate::render::raster::{system_font, write_png};
use correlate::render::timeline::{draw, render_json, render_text, write_svg, Layout, Shape};
use correlate::{memmap, render, slices, timeline, Database, TimelineOptions};
use profiler::envelope::{write_atomically_with, Replace};

use crate::args::Args;
use crate::inputs::thread_selection;
use crate::{bad, output, Failure};

/// Shapes to draw and the picture's size.
type Drawing = (Vec<Shape>, (u32, u32));

/// The time views' flags.
#[derive(Debug, clap::Args)]
pub(crate) struct TimeArgs {
    /// Threads x time, coloured by the procedure each thread was in (databases of runs with
    /// `hpcrun-rs -t`); --depth N colours by the procedure N calls deep instead of the
    /// innermost
    #[arg(long)]
    pub(crate) timeline: bool,

    /// With --timeline or --memmap: also draw it as an SVG image in FILE
    #[arg(long, value_name = "FILE", requires = "pictured")]
    pub(crate) svg: Option<std::path::PathBuf>,

    /// With --timeline or --memmap: also draw it as a PNG image in FILE
    #[arg(long, value_name = "FILE", requires = "pictured")]
    pub(crate) png: Option<std::path::PathBuf>,

    /// With --timeline: columns of the text rendering; images (also --memmap's) get 8 pixel
    /// columns per text column
    #[arg(long, value_name = "N", default_value_t = 100, requires = "pictured")]
    pub(crate) columns: usize,

    /// Per procedure per time slice: samples, activity span and the run's phases (databases of
    /// runs with `hpcrun-rs -t`); procedures at --depth N as for --timeline
    #[arg(long)]
    pub(crate) slices: bool,

    /// With --slices or --memmap: the slice length in ms [default: a round length giving at
    /// most 11]
    #[arg(long, value_name = "MS", requires = "sliced")]
    pub(crate) slice: Option<f64>,

    /// Which data objects' pages were touched when (databases of runs with `hpcrun-rs -t
    /// --data`; exact first touches with `-e page-faults@1`): per time slice and object the
    /// samples and a bar over its pages; --csv gives one record per slice, thread, procedure,
    /// object and page; --svg/--png draw time x pages
    #[arg(long)]
    pub(crate) memmap: bool,
}

/// `--timeline`, `--slices` or `--memmap`; returns the summary line.
pub(crate) fn run(args: &Args, db: &Database, path: &Path) -> Result<String, Failure> {
    if args.time.columns == 0 || args.time.columns > 10_000 {
        return Err(bad(anyhow!("--columns must be 1 to 10000")));
    }
    match (args.time.slices, args.time.memmap) {
        (true, _) => run_slices(args, db, path),
        (_, true) => run_memmap(args, db, path),
        _ => run_timeline(args, db, path),
    }
}

/// Print the timeline and write the images asked for; returns the summary line.
fn run_timeline(args: &Args, db: &Database, path: &Path) -> Result<String, Failure> {
    let threads = thread_selection(db, &args.threads, path).map_err(bad)?;
    let options = |columns| TimelineOptions {
        depth: args.depth,
        columns,
        threads: threads.clone(),
    };
    let no_trace = || no_traces(path);
    let text = timeline(db, &options(args.time.columns)).ok_or_else(no_trace)?;
    let mut out = BufWriter::new(io::stdout().lock());
    match args.json {
        true => render_json(&text, db, &mut out)?,
        false => render_text(&text, &mut out)?,
    }
    out.flush()?;
    write_images(args, || {
        let grid = timeline(db, &options(args.time.columns * 8)).ok_or_else(no_trace)?;
        Ok(draw(
            &grid,
            &Layout::new(args.time.columns * 8, grid.lanes.len()),
        ))
    })?;
    let samples: u64 = text.procedures.iter().map(|p| p.1).sum();
    Ok(format!(
        "timeline of {}: {} threads, {samples} samples, {} procedures",
        path.display(),
        text.lanes.len(),
        text.procedures.len()
    ))
}

/// Draw what `drawing` makes into the SVG and PNG files the arguments name, if any.
fn write_images(
    args: &Args,
    drawing: impl Fn() -> Result<Drawing, Failure>,
) -> Result<(), Failure> {
    let images = [(&args.time.svg, false), (&args.time.png, true)];
    for (file, png) in images
        .iter()
        .filter_map(|(f, png)| Some((f.as_ref()?, *png)))
    {
        let (shapes, size) = drawing()?;
        let mut bytes = Vec::new();
        match png {
            true => {
                let font = system_font();
                if font.is_none() {
                    let why = "no font found (HPCVIEW_FONT=FILE.ttf names one)";
                    correlate::say_line!(
                        "hpcview-rs: {}: {why}; the PNG has no labels",
                        file.display()
                    );
                }
                write_png(&shapes, size, font.as_ref(), &mut bytes)?
            }
            false => write_svg(&shapes, size, &mut bytes)?,
        }
        write_atomically_with(file, Replace::Allowed, |w| w.write_all(&bytes))
            .map_err(|e| Failure::Other(anyhow!(e)))?;
    }
    Ok(())
}

/// The error for a database without traces.
fn no_traces(path: &Path) -> Failure {
    let why = "has no traces (measure with `hpcrun-rs -t`)";
    bad(anyhow!("{}: {why}", path.display()))
}

/// The `--slice` length in ns, if given.
fn slice_ns(args: &Args) -> Result<Option<u64>, Failure> {
    match args.time.slice {
        Some(ms) if !(ms.is_finite() && ms > 0.0 && ms <= 1e9) => {
            Err(bad(anyhow!("--slice must be a positive number of ms")))
        }
        ms => Ok(ms.map(|ms| (ms * 1e6).max(1.0) as u64)),
    }
}

/// Print the memory map (text, CSV or JSON, to -o FILE or standard output) and write the
/// images asked for; returns the summary line.
fn run_memmap(args: &Args, db: &Database, path: &Path) -> Result<String, Failure> {
    let slice_ns = slice_ns(args)?;
    let threads = thread_selection(db, &args.threads, path).map_err(bad)?;
    let map = memmap(db, &threads, slice_ns).ok_or_else(|| {
        let why = "has no data traces (measure with `hpcrun-rs -t --data`)";
        bad(anyhow!("{}: {why}", path.display()))
    })?;
    let mut out = output::Sink::open(&args.output);
    match (args.json, args.csv) {
        (true, _) => render::memmap::render_json(&map, db, &mut out)?,
        (_, true) => drop(render::memmap::render_csv(&map, db, &mut out)?),
        _ => render::memmap::render_text(&map, &mut out)?,
    }
    out.finish()?;
    let width = args.time.columns as u32 * 8;
    write_images(args, || {
        Ok(render::memmap::draw(&map, &MapLayout::new(width)))
    })?;
    let samples = map.points.len();
    let mut summary = format!(
        "memory map of {}: {samples} data samples, {} objects, {} slices of {} ms",
        path.display(),
        map.objects.len(),
        map.slices(),
        map.slice_ns as f64 / 1e6
    );
    if db.data.traces.dropped > 0 {
        let dropped = db.data.traces.dropped;
        summary += &format!("; {dropped} data samples past the trace budget not traced");
    }
    Ok(summary)
}

/// Print the slice table and phases; returns the summary line.
fn run_slices(args: &Args, db: &Database, path: &Path) -> Result<String, Failure> {
    let slice_ns = slice_ns(args)?;
    let threads = thread_selection(db, &args.threads, path).map_err(bad)?;
    let s = slices(db, &threads, args.depth, slice_ns).ok_or_else(|| no_traces(path))?;
    let mut out = BufWriter::new(io::stdout().lock());
    match args.json {
        true => render::slices::render_json(&s, &mut out)?,
        false => render::slices::render(&s, &mut out)?,
    }
    out.flush()?;
    Ok(format!(
        "slices of {}: {} procedures, {} phases",
        path.display(),
        s.rows.len(),
        s.phases.len()
    ))
}
