//! Traces (`hpcrun-rs -t`) and the timeline (`hpcview-rs --timeline`): a program in two
//! phases shows them in order, at the time the program itself measured, in the trace, the text
//! and the PNG's pixels; two threads with a 1:3 imbalance show it; the trace agrees with the
//! trees sample for sample.

use std::path::{Path, PathBuf};

use correlate::render::timeline::Layout;
use correlate::{slices, timeline, Database, Selection, Timeline, TimelineOptions};
use profiler::db::Profile;

use crate::correlate_prof_common::correlate;
use crate::hpcrun::CFLAGS;
use crate::support::{compile, run, run_ok, scratch_dir, tool_command};

/// Measure `tp MODE MS` with `-t` at 1 kHz; returns the profile's path and the program's
/// stdout.
fn measure(dir: &Path, mode: &str, ms: &str) -> (PathBuf, String) {
    let mut flags = CFLAGS.to_vec();
    flags.push("-pthread");
    let exe = compile("trace_phases.c", dir, "tp", &flags);
    let db = dir.join(format!("{mode}.db"));
    let out = run(tool_command("hpcrun-rs")
        .args(["-t", "-e", "cpu-clock@f1000", "-o"])
        .arg(&db)
        .arg(&exe)
        .args([mode, ms]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("bytes a sample"), "{stderr}");
    (db, String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Per thread, the trace holds exactly the samples of the tree, in time order, in at most
/// 8 bytes each.
fn check_invariants(profile: &Profile) {
    assert_eq!(profile.traces.threads.len(), profile.threads.len());
    let (mut bytes, mut samples) = (0, 0);
    for thread in &profile.threads {
        let trace = profile
            .traces
            .threads
            .iter()
            .find(|t| t.thread == thread.tid);
        let trace = trace.expect("every thread with samples has a trace");
        let decoded = trace.decode(thread.cct.nodes.len()).unwrap();
        assert_eq!(decoded.len() as u64, thread.cct.total(0).samples);
        assert!(
            decoded.windows(2).all(|w| w[0].0 <= w[1].0),
            "times go back"
        );
        // Each node is traced as often as it was charged.
        let mut per_node = vec![0u64; thread.cct.nodes.len()];
        decoded.iter().for_each(|&(_, n)| per_node[n as usize] += 1);
        let charged: Vec<u64> = thread
            .cct
            .nodes
            .iter()
            .map(|n| n.costs[0].samples)
            .collect();
        assert_eq!(per_node, charged);
        bytes += trace.bytes.len();
        samples += decoded.len();
    }
    assert!(bytes <= 8 * samples, "{bytes} bytes for {samples} samples");
}

/// The first depth at which `name` colours some samples.
fn depth_of(db: &Database, name: &str) -> usize {
    (1..=16)
        .find(|&d| grid(db, d, 100).procedures.iter().any(|p| p.0 == name))
        .unwrap_or_else(|| panic!("{name} at no depth"))
}

fn grid(db: &Database, depth: usize, columns: usize) -> Timeline {
    let options = TimelineOptions {
        depth: Some(depth),
        columns,
        threads: Selection::All,
    };
    timeline(db, &options).expect("the database has traces")
}

/// The share of `items` equal to `want`, in percent.
fn share<T: PartialEq>(items: &[T], want: &T) -> f64 {
    let hits = items.iter().filter(|&i| i == want).count();
    100.0 * hits as f64 / items.len().max(1) as f64
}

#[test]
fn two_phases_are_seen_in_order_in_the_trace_the_text_and_the_png() {
    let dir = scratch_dir("trace-phases");
    let (db_path, stdout) = measure(&dir, "phases", "300");
    let switched_by_ns: u64 = stdout
        .trim()
        .strip_prefix("switched_by_wall_ns=")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("fixture output: {stdout}"));
    check_invariants(&Profile::read(&db_path).unwrap());
    let db = correlate(&dir, &[&db_path], "phases");
    assert_eq!(db.traces.threads.len(), 1);
    let depth = depth_of(&db, "phase_a");
    let t = grid(&db, depth, 800);
    let name = |i: usize| t.procedures[i].0.as_str();
    let samples = &t.lanes[0].samples;
    // The trace's switch (its first phase_b sample) lies where the program's own clocks say:
    // at least 300 ms of CPU time after phase_a's first sample, and no later than the wall
    // time the program took from phase_a's start to phase_b's third millisecond of CPU time
    // (phase_a's first sample comes after its start; a wait between the phases, 5 ms once on
    // a loaded machine, is inside that time).
    let first_a = samples.iter().find(|s| name(s.1) == "phase_a").unwrap().0;
    let switch = samples.iter().find(|s| name(s.1) == "phase_b").unwrap().0;
    let (earliest, latest) = (first_a + 290_000_000, first_a + switched_by_ns);
    assert!(
        (earliest..=latest).contains(&switch),
        "{switch} not in {earliest}..={latest}"
    );
    // In order: before the switch phase_a, from it on phase_b.
    let before: Vec<&str> = samples
        .iter()
        .filter(|s| s.0 < switch)
        .map(|s| name(s.1))
        .collect();
    let after: Vec<&str> = samples
        .iter()
        .filter(|s| s.0 >= switch)
        .map(|s| name(s.1))
        .collect();
    assert!(
        before.len() >= 250 && after.len() >= 250,
        "{} {}",
        before.len(),
        after.len()
    );
    assert!(share(&before, &"phase_a") >= 95.0, "{before:?}");
    assert!(share(&after, &"phase_b") >= 95.0, "{after:?}");

    // The text and the PNG, drawn by hpcview-rs, 100 text columns = 800 pixel columns.
    let png = dir.join("phases.png");
    let text = run_ok(
        tool_command("hpcview-rs")
            .arg(dir.join("phases.hpcdb"))
            .args(["--timeline", "--depth", &depth.to_string(), "--png"])
            .arg(&png),
    );
    let colour_of = |proc_: &str| -> [u8; 3] {
        let line = text
            .lines()
            .find(|l| l.ends_with(&format!("  {proc_}")))
            .unwrap();
        let hex = line
            .split_whitespace()
            .nth(1)
            .unwrap()
            .trim_start_matches('#');
        let byte = |i: usize| u8::from_str_radix(&hex[i..i + 2], 16).unwrap();
        [byte(0), byte(2), byte(4)]
    };
    let (a, b) = (colour_of("phase_a"), colour_of("phase_b"));
    assert_ne!(a, b);
    let (pixels, width) = decode_png(&png);
    let layout = Layout::new(800, t.lanes.len());
    let row = (layout.lane_top(0) + layout.lane_height / 2) as usize;
    let switch_x =
        layout.left as f64 + (switch - t.start_ns) as f64 / (t.end_ns - t.start_ns) as f64 * 800.0;
    let column = |x: u32| -> [u8; 3] {
        let at = (row * width + x as usize) * 3;
        [pixels[at], pixels[at + 1], pixels[at + 2]]
    };
    let coloured = |xs: std::ops::Range<u32>| -> Vec<[u8; 3]> {
        xs.map(column).filter(|&c| c != [0xff; 3]).collect()
    };
    let left = coloured(layout.left..(switch_x as u32 - 16));
    let right = coloured((switch_x as u32 + 16)..(layout.left + 800));
    assert!(
        left.len() >= 40 && right.len() >= 40,
        "{} {}",
        left.len(),
        right.len()
    );
    assert!(
        share(&left, &a) >= 95.0 && share(&right, &b) >= 95.0,
        "switch at x={switch_x}"
    );
    // The thread's label is drawn left of its lane (with a font, as CI has).
    if correlate::render::raster::system_font().is_some() {
        let lane_rows =
            layout.lane_top(0) as usize..(layout.lane_top(0) + layout.lane_height) as usize;
        let dark = lane_rows
            .flat_map(|r| (0..layout.left as usize).map(move |c| (r, c)))
            .filter(|&(r, c)| pixels[(r * width + c) * 3] < 0x80)
            .count();
        assert!(dark >= 30, "{dark} dark pixels in the label");
    }
    // And the text rendering switches letters at the same place (blank columns aside).
    let letter_of = |proc_: &str| {
        let line = text
            .lines()
            .find(|l| l.ends_with(&format!("  {proc_}")))
            .unwrap();
        line.split_whitespace()
            .next()
            .unwrap()
            .chars()
            .next()
            .unwrap()
    };
    let lane = text.lines().next().unwrap();
    let cells: Vec<char> = lane.split('|').nth(1).unwrap().chars().collect();
    let cut = ((switch_x - layout.left as f64) / 8.0) as usize;
    let running = |cells: &[char]| {
        cells
            .iter()
            .copied()
            .filter(|&c| c != '.')
            .collect::<Vec<_>>()
    };
    let (left, right) = (running(&cells[..cut - 2]), running(&cells[cut + 2..]));
    assert!(left.len() >= 5 && right.len() >= 5, "{lane}");
    let (la, lb) = (letter_of("phase_a"), letter_of("phase_b"));
    assert!(
        share(&left, &la) >= 95.0 && share(&right, &lb) >= 95.0,
        "{lane}"
    );
    check_phase_slices(&db, &dir.join("phases.hpcdb"), depth, switch);
}

/// `--slices` finds phase_a's phase, then phase_b's, parted at the switch (to a slice), and
/// says so in its text.
fn check_phase_slices(db: &Database, file: &Path, depth: usize, switch: u64) {
    let s = slices(db, &Selection::All, Some(depth), None).unwrap();
    let row = |name: &str| s.rows.iter().position(|r| r.name == name).unwrap();
    let (a, b) = (row("phase_a"), row("phase_b"));
    let k = ((switch - s.start_ns) / s.slice_ns) as usize;
    let phases: Vec<_> = s
        .phases
        .iter()
        .filter(|p| !p.procedures.is_empty())
        .collect();
    let shown: Vec<_> = phases
        .iter()
        .map(|p| (p.first, p.last, &p.procedures))
        .collect();
    assert!(phases.len() <= 3, "switch in slice {k}: {shown:?}");
    assert_eq!(phases[0].procedures, [a], "{shown:?}");
    assert_eq!(phases[phases.len() - 1].procedures, [b], "{shown:?}");
    assert!(
        phases[0].last + 1 >= k && phases[phases.len() - 1].first <= k + 1,
        "{k} {shown:?}"
    );
    let (span_a, span_b) = (s.rows[a].span().unwrap(), s.rows[b].span().unwrap());
    assert!(
        span_a.1 <= k + 1 && span_b.0 + 1 >= k,
        "{k} {span_a:?} {span_b:?}"
    );
    let text = run_ok(tool_command("hpcview-rs").arg(file).args([
        "--slices",
        "--depth",
        &depth.to_string(),
    ]));
    let last = text.lines().last().unwrap();
    assert!(last.contains("  phase_b  "), "{text}");
}

fn decode_png(path: &Path) -> (Vec<u8>, usize) {
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut pixels).unwrap();
    assert_eq!(info.color_type, png::ColorType::Rgb);
    (pixels, info.width as usize)
}

#[test]
fn a_one_to_three_imbalance_between_two_threads_shows() {
    let dir = scratch_dir("trace-imbalance");
    let (db_path, _) = measure(&dir, "imbalance", "150");
    let profile = Profile::read(&db_path).unwrap();
    check_invariants(&profile);
    let shown = run_ok(tool_command("hpcrun-rs").arg("--show").arg(&db_path));
    // The two workers, and the main thread when its start-up (loading, creating the threads)
    // ran long enough for a sample, as it does on a loaded machine.
    let threads = profile.threads.len();
    assert!((2..=3).contains(&threads), "{threads}");
    let line = format!(
        "trace: {} samples of {threads} threads",
        profile.stats.samples
    );
    assert!(shown.contains(&line), "{shown}");
    let db = correlate(&dir, &[&db_path], "imbalance");
    let t = grid(&db, depth_of(&db, "heavy"), 100);
    let lane_of = |proc_: &str| {
        let p = t.procedures.iter().position(|p| p.0 == proc_).unwrap();
        let lane = t
            .lanes
            .iter()
            .find(|l| share(&l.samples.iter().map(|s| s.1).collect::<Vec<_>>(), &p) > 90.0);
        lane.unwrap_or_else(|| panic!("no lane mostly in {proc_}"))
    };
    let (light, heavy) = (lane_of("light"), lane_of("heavy"));
    let light_lane_thread = light.thread;
    let ratio = heavy.samples.len() as f64 / light.samples.len() as f64;
    assert!((2.5..=3.6).contains(&ratio), "{ratio}");
    // Both start together; the light thread's lane goes blank long before the heavy one's.
    let last = |l: &correlate::Lane| l.cells.iter().rposition(Option::is_some).unwrap();
    assert!(
        last(light) * 10 < last(heavy) * 7,
        "{} {}",
        last(light),
        last(heavy)
    );
    assert!(light.cells[last(light) + 5..].iter().all(Option::is_none));

    // The slices say the same: light is active in fewer slices and its span ends first.
    let s = slices(&db, &Selection::All, Some(depth_of(&db, "heavy")), None).unwrap();
    let row = |name: &str| s.rows.iter().find(|r| r.name == name).unwrap();
    let (light, heavy) = (row("light"), row("heavy"));
    assert_eq!((light.span().unwrap().0, heavy.span().unwrap().0), (0, 0));
    assert!(light.span().unwrap().1 < heavy.span().unwrap().1);
    assert!(
        light.active() * 10 < heavy.active() * 8,
        "{} {}",
        light.active(),
        heavy.active()
    );

    // --thread draws only that thread's lane.
    let light_tid = db.threads[light_lane_thread.index()].tid;
    let one = run_ok(
        tool_command("hpcview-rs")
            .arg(dir.join("imbalance.hpcdb"))
            .args(["--timeline", "--json", "--thread", &light_tid.to_string()]),
    );
    let doc: serde_json::Value = serde_json::from_str(&one).unwrap();
    let tids: Vec<u64> = doc["lanes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["tid"].as_u64().unwrap())
        .collect();
    assert_eq!(tids, [u64::from(light_tid)]);

    // --json carries the same numbers.
    let text = run_ok(
        tool_command("hpcview-rs")
            .arg(dir.join("imbalance.hpcdb"))
            .args([
                "--slices",
                "--json",
                "--depth",
                &depth_of(&db, "heavy").to_string(),
            ]),
    );
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let rows = doc["procedures"].as_array().unwrap();
    let light_json = rows
        .iter()
        .find(|r| r["name"] == "light")
        .expect("light in the JSON");
    assert_eq!(light_json["active"], light.active());
    assert_eq!(light_json["span"][1], light.span().unwrap().1);
    assert_eq!(light_json["samples"], light.total());
}
