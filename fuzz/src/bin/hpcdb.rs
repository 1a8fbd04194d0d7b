//! .hpcdb reader and every view: any bytes give a database or an error, never a panic, hang or
//! runaway allocation (see `hpctoolkit_fuzz::hpcdb`).

fn main() {
    afl::fuzz!(|bytes: &[u8]| hpctoolkit_fuzz::hpcdb(bytes));
}
