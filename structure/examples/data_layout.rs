//! Read a binary's data layout ([`structure::DataLayout`]) and print how long reading took,
//! how much was read, how large its postcard encoding is and how long that takes to decode;
//! with `--list`, every static variable (address, size, name, type); with `--query`, answers
//! the questions on standard input, one a line (`static ADDR`, `local PC CFA_OFFSET`,
//! `frame PC`; numbers in hex with `0x`, else decimal), to compare with another tool's. The
//! figures for `DataLayout::read` on a large binary come from here.
//!
//! ```text
//! cargo run -p structure --release --example data_layout -- [--list] [--query] BINARY
//! ```

use anyhow::{bail, Context, Result};
use profiler::addr::Svma;
use std::io::BufRead;
use std::path::Path;
use std::time::Instant;
use structure::DataLayout;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |f: &str| args.iter().any(|a| a == f);
    let (list, query) = (flag("--list"), flag("--query"));
    let Some(path) = args.iter().find(|a| !a.starts_with("--")) else {
        bail!("usage: data_layout [--list] [--query] BINARY");
    };
    let start = Instant::now();
    let layout = DataLayout::read(Path::new(path)).with_context(|| format!("reading {path}"))?;
    let read = start.elapsed();
    let (statics, scopes, locals, types) = layout.counts();
    println!(
        "{path}: read in {:.3} s: {statics} statics, {scopes} scopes, {locals} locals, {types} type shapes",
        read.as_secs_f64()
    );
    let start = Instant::now();
    let bytes = postcard::to_allocvec(&layout).context("encoding")?;
    let encoded = start.elapsed();
    let start = Instant::now();
    let back: DataLayout = postcard::from_bytes(&bytes).context("decoding")?;
    let decoded = start.elapsed();
    println!(
        "postcard: {} bytes, encoded in {:.3} s, decoded in {:.3} s, round trip {}",
        bytes.len(),
        encoded.as_secs_f64(),
        decoded.as_secs_f64(),
        if back == layout { "equal" } else { "DIFFERENT" }
    );
    for note in layout.notes() {
        println!("note: {note}");
    }
    if list {
        for s in layout.statics() {
            let ty = s.ty.map(|t| layout.type_name(t)).unwrap_or_default();
            println!("{:#x} {:>8} {} {ty}", s.addr.0, s.size, s.name);
        }
    }
    if query {
        for line in std::io::stdin().lock().lines() {
            println!("{}", answer(&layout, &line?));
        }
    }
    Ok(())
}

/// The answer to one `--query` line.
fn answer(layout: &DataLayout, line: &str) -> String {
    let number = |s: &str| match s.strip_prefix("0x") {
        Some(hex) => i64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    };
    let words: Vec<&str> = line.split_whitespace().collect();
    let nums: Vec<i64> = words.iter().skip(1).filter_map(|w| number(w)).collect();
    let none = || "-".to_string();
    match (words.first().copied(), nums.as_slice()) {
        (Some("static"), &[addr]) => layout
            .static_at(Svma(addr as u64))
            .map_or_else(none, |(v, off)| {
                format!("{} +{off} size {}", v.name, v.size)
            }),
        (Some("local"), &[pc, off]) => layout
            .local_at(Svma(pc as u64), off)
            .map_or_else(none, |h| {
                format!("{} in {} +{} size {}", h.name, h.scope, h.offset, h.size)
            }),
        (Some("frame"), &[pc]) => layout
            .frame_name(Svma(pc as u64))
            .map_or_else(none, str::to_string),
        _ => format!("? {line}"),
    }
}
