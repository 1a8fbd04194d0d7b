//! Debug files from debuginfod servers, by GNU build-id, where the binary has no DWARF of its
//! own and none is installed (a distribution's stripped library, a program built elsewhere),
//! and binaries themselves where a profile names one that is not on this machine.
//!
//! Asked only when `DEBUGINFOD_URLS` names servers (space-separated), as elfutils' clients
//! do; a file fetched goes to elfutils' cache layout (`$DEBUGINFOD_CACHE_PATH`, else
//! `$XDG_CACHE_HOME/debuginfod_client`, else `~/.cache/debuginfod_client`, then
//! `BUILDID/debuginfo`), so gdb, perf and `debuginfod-find` share it both ways. Each request
//! has a time-out (`$DEBUGINFOD_TIMEOUT` seconds, default 90) and one line on stderr says what
//! is being fetched. `http://` and `https://` servers are spoken to (TLS by rustls, the server
//! checked against the system's certificate authorities, or those of the PEM file
//! `$SSL_CERT_FILE` names); a server named otherwise is skipped with a note.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// The time-out of one request where `$DEBUGINFOD_TIMEOUT` sets none (elfutils' default).
const DEFAULT_TIMEOUT_S: u64 = 90;

/// The debug file of the binary with build-id `build_id`, from the cache or a server, where
/// `DEBUGINFOD_URLS` asks for servers; what was fetched or not found goes to `notes`.
pub(crate) fn debuginfo(
    binary: &Path,
    build_id: &[u8],
    notes: &mut Vec<String>,
) -> Option<PathBuf> {
    artifact(
        Artifact::Debuginfo,
        &binary.display().to_string(),
        build_id,
        notes,
    )
}

/// The binary with build-id `build_id` (the module profiled at `name`, missing here), from the
/// cache or a server, where `DEBUGINFOD_URLS` asks for servers; what was fetched or not found
/// goes to `notes`. Its debug file, if the server has one, is fetched when it is analysed.
pub fn executable(name: &str, build_id: &[u8], notes: &mut Vec<String>) -> Option<PathBuf> {
    artifact(Artifact::Executable, name, build_id, notes)
}

/// What a debuginfod server serves by build-id.
#[derive(Clone, Copy)]
enum Artifact {
    Debuginfo,
    Executable,
}

impl Artifact {
    /// Its name in the server's URLs and in the cache's layout.
    fn name(self) -> &'static str {
        match self {
            Artifact::Debuginfo => profiler::debugfiles::DEBUGINFO,
            Artifact::Executable => profiler::debugfiles::EXECUTABLE,
        }
    }

    /// How a line on stderr or a note names it.
    fn what(self) -> &'static str {
        match self {
            Artifact::Debuginfo => "the debug file",
            Artifact::Executable => "the binary",
        }
    }
}

/// `kind` of the binary with build-id `build_id` (named `name`), from the cache or a server.
fn artifact(
    kind: Artifact,
    name: &str,
    build_id: &[u8],
    notes: &mut Vec<String>,
) -> Option<PathBuf> {
    let urls = std::env::var("DEBUGINFOD_URLS").unwrap_or_default();
    let servers: Vec<&str> = urls.split_whitespace().collect();
    if servers.is_empty() || build_id.is_empty() {
        return None;
    }
    let hex = profiler::debugfiles::hex(build_id);
    let dir = cache_dir()?.join(&hex);
    let cached = dir.join(kind.name());
    if fs::metadata(&cached).is_ok_and(|m| m.is_file() && m.len() > 0) {
        return Some(cached);
    }
    for server in servers {
        let server = server.trim_end_matches('/');
        if !server.starts_with("http://") && !server.starts_with("https://") {
            notes.push(format!(
                "debuginfod: {server} not asked (http:// and https:// servers are spoken to; \
                 `debuginfod-find {} {hex}` fills the same cache)",
                kind.name()
            ));
            continue;
        }
        let url = format!("{server}/buildid/{hex}/{}", kind.name());
        eprintln!(
            "debuginfod: fetching {} of {name} from {server}",
            kind.what()
        );
        match fetch(&url, &dir, &cached) {
            Ok(_) => return Some(cached),
            Err(why) => notes.push(format!(
                "debuginfod: no {} for {name} (build-id {hex}) from {server}: {why}",
                kind.what().trim_start_matches("the ")
            )),
        }
    }
    None
}

/// elfutils' client cache directory.
fn cache_dir() -> Option<PathBuf> {
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    var("DEBUGINFOD_CACHE_PATH")
        .or_else(|| var("XDG_CACHE_HOME").map(|c| c.join("debuginfod_client")))
        .or_else(|| var("HOME").map(|h| h.join(".cache/debuginfod_client")))
}

/// GET `url` into `target` (through a fresh temporary file in `dir`, renamed into place);
/// returns the bytes written.
fn fetch(url: &str, dir: &Path, target: &Path) -> Result<u64, String> {
    let timeout = std::env::var("DEBUGINFOD_TIMEOUT")
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(DEFAULT_TIMEOUT_S);
    let response = minreq::get(url)
        .with_timeout(timeout)
        .send_lazy()
        .map_err(|e| e.to_string())?;
    if response.status_code != 200 {
        return Err(format!(
            "HTTP {} {}",
            response.status_code, response.reason_phrase
        ));
    }
    fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut file = tempfile::NamedTempFile::new_in(dir).map_err(|e| e.to_string())?;
    let mut body = response;
    let bytes = io::copy(&mut body, file.as_file_mut()).map_err(|e| e.to_string())?;
    file.as_file_mut().flush().map_err(|e| e.to_string())?;
    file.persist(target).map_err(|e| e.to_string())?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_asked_without_servers() {
        // The variable is unset in the test environment unless a user set it: then skip.
        if std::env::var_os("DEBUGINFOD_URLS").is_some() {
            return;
        }
        let mut notes = Vec::new();
        assert_eq!(debuginfo(Path::new("/bin/x"), &[1, 2, 3], &mut notes), None);
        assert!(notes.is_empty());
    }
}
