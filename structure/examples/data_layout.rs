//! Read a binary's data layout ([`structure::DataLayout`]) and print how long reading took,
//! how much was read, how large its postcard encoding is and how long that takes to decode;
//! with `--list`, every static variable (address, size, name, type). The figures for
//! `DataLayout::read` on a large binary come from here.
//!
//! ```text
//! cargo run -p structure --release --example data_layout -- [--list] BINARY
//! ```

use anyhow::{bail, Context, Result};
use std::path::Path;
use std::time::Instant;
use structure::DataLayout;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let list = args.iter().any(|a| a == "--list");
    let Some(path) = args.iter().find(|a| *a != "--list") else {
        bail!("usage: data_layout [--list] BINARY");
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
    Ok(())
}
