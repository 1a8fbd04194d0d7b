//! Opening the database to view: our `*.hpcdb` file, or a directory holding an HPCToolkit
//! database (v4, written by HPCToolkit's `hpcprof` or by `hpcprof-rs --hpctoolkit`).

use std::path::Path;

use correlate::{hpctoolkit, Database};

/// The database at `path`, whichever of the two formats it is in.
pub(crate) fn open(path: &Path) -> anyhow::Result<Database> {
    if hpctoolkit::is_database(path) {
        Ok(hpctoolkit::read_database(path)?)
    } else if path.is_dir() {
        anyhow::bail!(
            "{}: a directory without meta.db: neither a database nor an HPCToolkit database",
            path.display()
        )
    } else {
        Ok(Database::read(path)?)
    }
}
