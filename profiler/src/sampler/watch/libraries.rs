//! The shared libraries of the watched process, for traps in their code: `memcpy` in libc, the
//! interpreter's functions in libpython. Each library is read (symbols, code) the first time a
//! trap lands in it, and found again by the address ranges it is mapped at.

use std::path::PathBuf;

use super::code::{self, Access, Executable};

/// One file mapped into the process, read once.
struct Library {
    /// Runtime ranges of its mappings.
    ranges: Vec<(u64, u64)>,
    /// `<basename>`, the name of its code when its symbols do not tell.
    label: String,
    /// Its symbols and code with the difference between runtime and link-time addresses, or
    /// `None` when it could not be read.
    image: Option<(Executable, u64)>,
}

/// The libraries traps have landed in so far.
#[derive(Default)]
pub(crate) struct Libraries {
    known: Vec<Library>,
}

impl Libraries {
    /// The function (a symbol's name, else `<basename>` of the file, else `<unknown>`) of the
    /// instruction ending at runtime address `next` in process `pid`, and its access when it
    /// can be decoded.
    pub(crate) fn access_before(&mut self, pid: i32, next: u64) -> (String, Option<Access>) {
        let at = next.wrapping_sub(1);
        let Some(lib) = self.find(pid, at) else {
            return ("<unknown>".to_string(), None);
        };
        let Some((image, bias)) = &lib.image else {
            return (lib.label.clone(), None);
        };
        let link = next.wrapping_sub(*bias);
        if let Some((name, access)) = image.access_before(link) {
            return (name.to_string(), Some(access));
        }
        match image.function(link.wrapping_sub(1)) {
            Some((_, name)) => (name.to_string(), None),
            None => (lib.label.clone(), None),
        }
    }

    /// The library mapped at `addr`, read on first use.
    fn find(&mut self, pid: i32, addr: u64) -> Option<&Library> {
        let inside = |l: &Library| l.ranges.iter().any(|&(lo, hi)| lo <= addr && addr < hi);
        if let Some(i) = self.known.iter().position(inside) {
            return self.known.get(i);
        }
        let mappings = code::mappings(pid);
        let path = (mappings.iter())
            .find(|m| m.path.starts_with('/') && m.holds(addr))
            .map(|m| m.path.clone())?;
        let ranges = (mappings.iter())
            .filter(|m| m.path == path)
            .map(|m| (m.start, m.end))
            .collect();
        let label = format!("<{}>", path.rsplit('/').next().unwrap_or(&path));
        let image = Executable::read(&PathBuf::from(&path))
            .ok()
            .and_then(|exe| {
                let load = code::load_address(&mappings, &path)?;
                let bias = load.wrapping_sub(exe.first_page);
                Some((exe, bias))
            });
        self.known.push(Library {
            ranges,
            label,
            image,
        });
        self.known.last()
    }
}
