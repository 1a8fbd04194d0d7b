//! Structure-file reader: any text gives scope trees or an error, never a panic or hang (see
//! `hpctoolkit_fuzz::structure_xml`).

fn main() {
    afl::fuzz!(|bytes: &[u8]| hpctoolkit_fuzz::structure_xml(bytes));
}
