//! `hpcview-rs --memmap`: a program that retouches static X every 20 ms for 300 ms, then Y
//! (`memmap_phases.c`), measured with `hpcrun-rs -t -e page-faults@1 --data`: the data trace
//! holds every data sample of the profile, and in the map's slices, its CSV and its PNG's
//! pixels the first phase's faults are X's and the second's Y's.

use std::path::Path;

use correlate::render::memmap::MapLayout;
use correlate::render::timeline::colour;
use correlate::{memmap, Database, MemMap, Selection};
use profiler::db::Profile;

use crate::correlate_data::correlate;
use crate::hpcrun_data::measure_faults_with;
use crate::support::{compile, run, run_ok, scratch_dir, tool_command};

/// Rounds of each phase (300 ms / 20 ms) times the pages each round faults on.
const FAULTS_PER_PHASE: u64 = 15 * 256;

/// Slices of 20 ms, in ns.
const SLICE_NS: u64 = 20_000_000;

/// The fixture's own clock readings: phase 1 start, switch, phase 2 end (CLOCK_MONOTONIC ns).
fn phases(stdout: &str) -> [u64; 3] {
    let value = |key: &str| -> u64 {
        let field = stdout.split_whitespace().find_map(|f| f.strip_prefix(key));
        let parsed = field.and_then(|v| v.parse().ok());
        parsed.unwrap_or_else(|| panic!("no {key} in {stdout:?}"))
    };
    [value("start_ns="), value("switch_ns="), value("end_ns=")]
}

/// Per thread, the data trace holds exactly the first event's data samples, cost by cost, in
/// time order.
fn check_trace_invariants(profile: &Profile) {
    let traces = &profile.data.traces;
    assert_eq!(traces.dropped, 0);
    assert_eq!(traces.threads.len(), profile.threads.len());
    for (thread, data) in profile.threads.iter().zip(&profile.data.threads) {
        let trace = traces.threads.iter().find(|t| t.thread == thread.tid);
        let samples = trace.unwrap().decode(data.costs.len()).unwrap();
        assert!(
            samples.windows(2).all(|w| w[0].0 <= w[1].0),
            "times go back"
        );
        let mut per_cost = vec![0u64; data.costs.len()];
        samples.iter().for_each(|&(_, c)| per_cost[c as usize] += 1);
        let charged: Vec<u64> = data.costs.iter().map(|c| c.costs[0].samples).collect();
        assert_eq!(per_cost, charged);
    }
}

/// Samples of the objects named `want` and in all, over the slices of `slices` (each a
/// (slice start, samples, object) row) lying wholly within `range`.
fn share_within(rows: &[(u64, u64, String)], range: (u64, u64), want: &str) -> (u64, u64) {
    let inside = rows
        .iter()
        .filter(|r| r.0 >= range.0 && r.0 + SLICE_NS <= range.1);
    inside.fold((0, 0), |(hit, all), r| {
        (hit + (r.2 == want) as u64 * r.1, all + r.1)
    })
}

/// Check that at least 95% of the samples in the phase's whole slices are `want`'s.
fn assert_phase(rows: &[(u64, u64, String)], range: (u64, u64), want: &str, what: &str) {
    let (hit, all) = share_within(rows, range, want);
    assert!(all >= 2_000, "{what}: only {all} samples in {want}'s phase");
    assert!(
        hit as f64 >= 0.95 * all as f64,
        "{what}: {hit} of {all} samples of {want}'s phase are {want}'s"
    );
}

#[test]
fn each_phase_shows_its_own_object_in_the_slices_the_csv_and_the_png() {
    let dir = scratch_dir("memory-map");
    let exe = compile("memmap_phases.c", &dir, "mp", &["-O2", "-g"]);
    let db_path = dir.join("mp.db");
    let (profile, stdout) = measure_faults_with(&exe, &db_path, &["-t"]);
    let [start, switch, end] = phases(&stdout);
    check_trace_invariants(&profile);
    let hpcdb = correlate(&db_path);
    let db = Database::read(&hpcdb).unwrap();
    let map = memmap(&db, &Selection::All, Some(SLICE_NS)).expect("data traces");
    let total: u64 = map.objects.iter().map(|o| o.samples).sum();
    assert_eq!(total, profile.data.total(0).samples);
    let index = |name: &str| map.objects.iter().position(|o| o.label == name).unwrap();
    let (x, y) = (index("X"), index("Y"));
    for o in [x, y] {
        assert_eq!(map.objects[o].samples, FAULTS_PER_PHASE);
        assert_eq!(map.objects[o].pages, Some((0, 255)));
    }

    // The slices, as the library and as hpcview-rs --csv give them.
    let mut rows: Vec<(u64, u64, String)> = Vec::new();
    for r in &map.rows {
        let start = map.start_ns + r.slice as u64 * map.slice_ns;
        rows.push((start, r.samples, map.objects[r.object].label.clone()));
    }
    assert_phase(&rows, (start, switch), "X", "slices");
    assert_phase(&rows, (switch, end), "Y", "slices");
    let csv_path = dir.join("mp.csv");
    run_ok(
        tool_command("hpcview-rs")
            .arg(&hpcdb)
            .args(["--memmap", "--slice", "20", "--csv", "-o"])
            .arg(&csv_path),
    );
    let csv = std::fs::read_to_string(&csv_path).unwrap();
    let mut lines = csv.lines();
    let head = "slice_start_ns,tid,procedure,object,kind,page,samples";
    assert_eq!(lines.next(), Some(head));
    let csv_rows: Vec<(u64, u64, String)> = lines
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (
                f[0].parse().unwrap(),
                f[6].parse().unwrap(),
                f[3].to_string(),
            )
        })
        .collect();
    assert_eq!(csv_rows.iter().map(|r| r.1).sum::<u64>(), total);
    assert_phase(&csv_rows, (start, switch), "X", "CSV");
    assert_phase(&csv_rows, (switch, end), "Y", "CSV");
    let x_rows = csv.lines().filter(|l| l.contains(",touch_x,X,static,"));
    assert_eq!(
        x_rows
            .map(|l| l.rsplit(',').next().unwrap().parse::<u64>().unwrap())
            .sum::<u64>(),
        FAULTS_PER_PHASE
    );

    // The text: with 100 ms slices, the second slice is X's and the fifth Y's.
    let text = run_ok(
        tool_command("hpcview-rs")
            .arg(&hpcdb)
            .args(["--memmap", "--slice", "100"]),
    );
    let first_of = |at: &str| {
        let line = text.lines().find(|l| l.trim_start().starts_with(at));
        line.unwrap_or_else(|| panic!("no {at} slice in {text}"))
            .split_whitespace()
            .last()
            .unwrap()
            .to_string()
    };
    assert_eq!(first_of("0.100 s"), "X", "{text}");
    assert_eq!(first_of("0.400 s"), "Y", "{text}");

    check_png(&dir, &hpcdb, &map, (x, y), [start, switch, end]);
}

/// The PNG: in the columns of phase 1 the marks are X's, in those of phase 2 Y's, each in its
/// own band and colour, over most of the phase's rounds.
fn check_png(dir: &Path, hpcdb: &Path, map: &MemMap, (x, y): (usize, usize), at: [u64; 3]) {
    let png = dir.join("mp.png");
    run_ok(
        tool_command("hpcview-rs")
            .arg(hpcdb)
            .args(["--memmap", "--slice", "20", "--png"])
            .arg(&png),
    );
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&png).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size().unwrap()];
    let width = reader.next_frame(&mut pixels).unwrap().width as usize;
    let layout = MapLayout::new(800);
    // Marked pixels of object `o` in its band, per plot column.
    let marks = |o: usize| -> Vec<u32> {
        let top = layout.band_top(o) as usize;
        (0..layout.plot_width)
            .map(|c| {
                let col = layout.left as usize + c as usize;
                (top..top + layout.band_height as usize)
                    .filter(|&r| pixels[(r * width + col) * 3..][..3] == colour(o))
                    .count() as u32
            })
            .collect()
    };
    let (mx, my) = (marks(x), marks(y));
    let column = |t: u64| layout.column(map, t) as usize;
    let (c0, c1, c2) = (column(at[0]), column(at[1]), column(at[2]));
    for (what, range, own, other) in [
        ("X", c0..c1.saturating_sub(2), &mx, &my),
        ("Y", c1 + 2..c2, &my, &mx),
    ] {
        let own_px: u32 = own[range.clone()].iter().sum();
        let other_px: u32 = other[range.clone()].iter().sum();
        assert!(
            own_px as f64 >= 0.95 * (own_px + other_px) as f64,
            "{what}'s phase: {own_px} of its pixels, {other_px} of the other's"
        );
        let columns = own[range].iter().filter(|&&n| n > 0).count();
        assert!(
            columns >= 10,
            "{what} marked in only {columns} columns of its phase"
        );
    }
}

#[test]
fn a_database_without_data_traces_is_refused_with_what_to_do() {
    let dir = scratch_dir("memory-map-none");
    let exe = compile("memmap_phases.c", &dir, "mp", &["-O2", "-g"]);
    let db_path = dir.join("mp.db");
    measure_faults_with(&exe, &db_path, &[]);
    let hpcdb = correlate(&db_path);
    let out = run(tool_command("hpcview-rs").arg(&hpcdb).arg("--memmap"));
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("hpcrun-rs -t --data"), "{stderr}");
    let out = run(tool_command("hpcview-rs")
        .arg(&hpcdb)
        .args(["--slice", "5"]));
    assert_eq!(out.status.code(), Some(2), "--slice alone is refused");
}
