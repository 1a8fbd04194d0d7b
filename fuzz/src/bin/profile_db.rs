//! profile.db reader: any bytes give a profile or an error, never a panic, hang or runaway
//! allocation; a profile that reads is well formed enough to walk every thread's tree.

fn main() {
    afl::fuzz!(|bytes: &[u8]| {
        let path = std::path::Path::new("fuzz.db");
        if let Ok(profile) = profiler::db::Profile::from_bytes(bytes, path) {
            let _ = format!("{profile:?}");
        }
    });
}
