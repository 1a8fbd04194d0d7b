//! How big a database is against the values it holds: prints its file size, its calling
//! contexts, its (context, thread) cost entries, and the bytes of its non-zero values at 8 bytes
//! each (a cost's sample count and its value, per metric), with the ratio of the file to them.
//! `scripts/bench-scale` uses it for the "database <= 1.5x its non-zero values".
//!
//!     cargo run -p correlate --example db_values -- DATABASE

use std::path::PathBuf;

fn main() -> anyhow::Result<()> {
    let path: PathBuf = std::env::args_os()
        .nth(1)
        .ok_or_else(|| anyhow::anyhow!("usage: db_values DATABASE"))?
        .into();
    let db = correlate::Database::read(&path)?;
    let (mut entries, mut values) = (0u64, 0u64);
    for node in &db.nodes {
        for (_, costs) in node.costs.iter() {
            entries += 1;
            values += costs
                .map(|c| u64::from(c.samples != 0) + u64::from(c.value != 0))
                .sum::<u64>();
        }
    }
    let file = std::fs::metadata(&path)?.len();
    let value_bytes = 8 * values;
    println!(
        "{file} bytes; {} contexts; {entries} entries; {values} non-zero values ({value_bytes} bytes); file / values {:.2}",
        db.nodes.len(),
        file as f64 / value_bytes.max(1) as f64
    );
    Ok(())
}
