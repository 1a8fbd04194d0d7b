//! The allocation-sites view ([`AllocView`]) as a DHAT file (`dhatFileVersion` 2, mode
//! `heap`), the format valgrind's DHAT writes and its viewer `dh_view.html` reads.
//!
//! One program point (`pps` entry) per allocation site, its frames (`fs`) indices into the
//! frame table (`ftbl`, `[root]` first), innermost first, as `function (file:line)`: the
//! enriched tree keeps no instruction addresses, so the frames lack DHAT's `0xADDR: ` prefix.
//! Sites whose frames read the same are merged (the viewer refuses a repeated location).
//!
//! Times are in ns (`tu` `ns`, `Mtu` `ms`); `te` is the measured wall-clock time. Per point:
//! `tb`/`tbk` bytes and blocks allocated, `tl` the summed lifetimes of the *freed* blocks
//! (DHAT also counts blocks live at the end, up to the end), `mb` the peak live bytes (summed
//! over threads), `eb`/`ebk` bytes and blocks live at the end. What the measurement does not
//! record is `null`, which the viewer shows as 0: `mbk` (blocks at the peak), `gb`/`gbk` and
//! `tg` (the global peak and its time). Block accesses are not recorded (`bkacc` false, no
//! `rb`/`wb`). `tuth` (short-lived blocks) is 1 µs.

use std::collections::HashMap;
use std::io::{self, Write};

use serde::Serialize;

use crate::view::data::AllocView;

/// The short-lived threshold, ns.
const SHORT_LIVED_NS: u64 = 1_000;

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Header<'a> {
    dhat_file_version: u32,
    mode: &'static str,
    verb: &'static str,
    bklt: bool,
    bkacc: bool,
    tu: &'static str,
    #[serde(rename = "Mtu")]
    mtu: &'static str,
    tuth: u64,
    cmd: String,
    pid: u32,
    te: u64,
    tg: Option<u64>,
    pps: Vec<ProgramPoint>,
    ftbl: Vec<&'a str>,
}

/// One `pps` entry.
#[derive(Serialize)]
struct ProgramPoint {
    tb: u64,
    tbk: u64,
    tl: u64,
    mb: u64,
    mbk: Option<u64>,
    gb: Option<u64>,
    gbk: Option<u64>,
    eb: u64,
    ebk: u64,
    fs: Vec<usize>,
}

/// Write `view` as a DHAT file.
pub fn render(view: &AllocView, out: &mut dyn Write) -> io::Result<()> {
    let mut ftbl: Vec<&str> = vec!["[root]"];
    let mut frame_ids: HashMap<&str, usize> = HashMap::new();
    let mut pps: Vec<ProgramPoint> = Vec::new();
    let mut by_frames: HashMap<Vec<usize>, usize> = HashMap::new();
    for row in &view.rows {
        let fs: Vec<usize> = row
            .path
            .iter()
            .map(|frame| {
                *frame_ids.entry(frame).or_insert_with(|| {
                    ftbl.push(frame);
                    ftbl.len() - 1
                })
            })
            .collect();
        let at = *by_frames.entry(fs.clone()).or_insert_with(|| {
            pps.push(ProgramPoint {
                tb: 0,
                tbk: 0,
                tl: 0,
                mb: 0,
                mbk: None,
                gb: None,
                gbk: None,
                eb: 0,
                ebk: 0,
                fs,
            });
            pps.len() - 1
        });
        let pp = &mut pps[at];
        pp.tb += row.counts.bytes;
        pp.tbk += row.counts.calls;
        pp.tl += row.counts.lifetime_ns;
        pp.mb += row.counts.peak_live;
        pp.eb += row.counts.live_at_end;
        pp.ebk += row.counts.blocks_at_end();
    }
    let header = Header {
        dhat_file_version: 2,
        mode: "heap",
        verb: "Allocated",
        bklt: true,
        bkacc: false,
        tu: "ns",
        mtu: "ms",
        tuth: SHORT_LIVED_NS,
        cmd: view.command.join(" "),
        pid: view.pid.unwrap_or(0),
        te: view.elapsed_ns,
        tg: None,
        pps,
        ftbl,
    };
    serde_json::to_writer(&mut *out, &header)?;
    writeln!(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::data::{DataObjectId, SiteCounts};
    use crate::view::data::AllocRow;

    fn row(object: usize, path: &[&str], calls: u64, bytes: u64) -> AllocRow {
        AllocRow {
            object: DataObjectId::from_index(object),
            path: path.iter().map(|s| s.to_string()).collect(),
            counts: SiteCounts {
                calls,
                bytes,
                frees: calls - 1,
                peak_live: bytes / 2,
                live_at_end: 16,
                size_min: 16,
                size_max: 16,
                lifetime_ns: 100,
            },
            costs: Vec::new(),
        }
    }

    #[test]
    fn program_points_share_a_frame_table_and_repeated_locations_merge() {
        let view = AllocView {
            metrics: Vec::new(),
            rows: vec![
                row(0, &["make_small (m.c:11)", "main (m.c:17)"], 30, 480),
                row(1, &["make_big (m.c:12)", "main (m.c:17)"], 10, 160),
                row(2, &["make_small (m.c:11)", "main (m.c:17)"], 5, 80),
            ],
            command: vec!["./m".into(), "100".into()],
            pid: Some(42),
            elapsed_ns: 5_000_000,
            records: 0,
            lost: 0,
            heap_unavailable: Vec::new(),
        };
        let mut out = Vec::new();
        render(&view, &mut out).unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(doc["dhatFileVersion"], 2);
        assert_eq!(doc["Mtu"], "ms");
        assert_eq!(doc["cmd"], "./m 100");
        assert!(doc["tg"].is_null() && doc["bklt"] == true && doc["bkacc"] == false);
        let ftbl = doc["ftbl"].as_array().unwrap();
        assert_eq!(ftbl[0], "[root]");
        assert_eq!(ftbl.len(), 4);
        let pps = doc["pps"].as_array().unwrap();
        assert_eq!(pps.len(), 2);
        assert_eq!(
            (&pps[0]["tbk"], &pps[0]["tb"], &pps[0]["ebk"]),
            (&35.into(), &560.into(), &2.into())
        );
        assert_eq!(pps[0]["fs"], serde_json::json!([1, 2]));
        assert_eq!(pps[1]["fs"], serde_json::json!([3, 2]));
        assert!(pps[1]["mbk"].is_null() && pps[1].get("rb").is_none());
    }
}
