//! .hpcdb reader and every view: any bytes give a database or an error, never a panic, hang or
//! runaway allocation; a database that reads renders in all three views as text, JSON and
//! folded stacks.

use correlate::{callers, flat, folded, json, text, top_down, Database, Selection};

fn main() {
    afl::fuzz!(|bytes: &[u8]| {
        let path = std::path::Path::new("fuzz.hpcdb");
        let Ok(db) = Database::from_bytes(bytes, path) else {
            return;
        };
        for view in [
            top_down(&db, &Selection::All),
            callers(&db, &Selection::All),
            flat(&db, &Selection::All),
        ] {
            let mut sink = std::io::sink();
            let _ = text::render(&view, &text::TextOptions::default(), &mut sink);
            let _ = json::render(&view, &mut sink);
            let _ = folded::render(&view, 0, &mut sink);
        }
    });
}
