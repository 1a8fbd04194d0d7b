//! Time: the traces `hpcrun-rs -t` recorded (carried into the database by `prof::traces`),
//! projected into a threads x time grid coloured by
//! the procedure at a chosen call depth (`timeline`, hpctraceviewer's main view) or into equal
//! time slices with per-procedure costs, activity spans and phases (`slices`, tQUAD's). The timeline's text, SVG
//! and PNG renderings in `out` all draw one grid, so they cannot disagree.

mod slices;
mod timeline;

pub use slices::{slices, Phase, SliceRow, Slices};
pub use timeline::{timeline, Lane, Timeline, TimelineOptions};

/// A round step (1, 2 or 5 x 10^k ns) cutting `span` ns into at most 10 steps: the timeline's
/// ticks and the default slice.
pub(crate) fn round_step(span: u64) -> u64 {
    let mut step = 1u64;
    loop {
        for m in [1, 2, 5] {
            if span / (step * m) <= 10 {
                return step * m;
            }
        }
        step *= 10;
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn round_steps_are_round_and_few() {
        assert_eq!(super::round_step(1_236_000_000), 200_000_000);
        assert_eq!(super::round_step(9_000), 1_000);
        assert_eq!(super::round_step(3), 1);
    }
}
