//! profile.db reader: any bytes give a profile or an error, never a panic, hang or runaway
//! allocation (see `hpctoolkit_fuzz::profile_db`).

fn main() {
    afl::fuzz!(|bytes: &[u8]| hpctoolkit_fuzz::profile_db(bytes));
}
