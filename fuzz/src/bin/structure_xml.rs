//! Structure-file reader: any text gives scope trees or an error, never a panic or hang; every
//! tree that reads answers lookups.

use profiler::addr::Svma;

fn main() {
    afl::fuzz!(|bytes: &[u8]| {
        let Ok(text) = std::str::from_utf8(bytes) else {
            return;
        };
        let path = std::path::Path::new("fuzz.hpcstruct");
        if let Ok(trees) = structure::read_structure(text, path) {
            for tree in &trees {
                for id in tree.ids() {
                    if let Some(&at) = tree.get(id).ranges.first().map(|r| &r.start) {
                        let _ = tree.lookup(Svma(at)).map(|s| tree.ancestors(s).count());
                    }
                }
            }
        }
    });
}
