//! What hpcrun-rs does for Java programs: a HotSpot JVM (OpenJDK 17 and later) names the code it
//! compiles in `/tmp/perf-PID.map` when it exits, if `-XX:+DumpPerfMapAtExit` is given, and
//! keeps a frame pointer in that code with `-XX:+PreserveFramePointer`, so that a sample's path
//! continues through the compiled Java methods to the JVM's native frames. hpcrun-rs puts both
//! in `JAVA_TOOL_OPTIONS`, which every JVM reads, for the commands it launches; hpcprof-rs reads
//! the map like any other JIT's.

use std::ffi::OsString;

/// The variable every JVM reads options from, before its command line's.
pub const TOOL_OPTIONS: &str = "JAVA_TOOL_OPTIONS";

/// The options added: JVMs before 17, which lack `DumpPerfMapAtExit`, ignore it rather than
/// refuse to start.
pub const PERF_OPTIONS: &str = "-XX:+IgnoreUnrecognizedVMOptions -XX:+UnlockDiagnosticVMOptions \
                                -XX:+DumpPerfMapAtExit -XX:+PreserveFramePointer";

/// `JAVA_TOOL_OPTIONS` for a launched command: ours, then any the user set (a JVM takes the last
/// of two contrary options, so the user's `-XX:-PreserveFramePointer` still holds).
pub fn tool_options_env() -> (OsString, OsString) {
    let mut value = OsString::from(PERF_OPTIONS);
    if let Some(theirs) = std::env::var_os(TOOL_OPTIONS).filter(|v| !v.is_empty()) {
        value.push(" ");
        value.push(theirs);
    }
    (TOOL_OPTIONS.into(), value)
}
