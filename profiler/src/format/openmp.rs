//! Which load modules are OpenMP runtimes. A program that maps one is traced by the recorder
//! (every sample's time and context, as `-t` does) so that the correlator can graft its
//! worker threads' samples under the parallel regions that ran them, by time where one
//! outlined function is entered from several calling contexts.

/// Whether the module at `path` is an OpenMP runtime: GCC's `libgomp`, LLVM's `libomp` or
/// Intel's `libiomp5`, judged by the file name.
pub fn is_runtime(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    ["libgomp.so", "libgomp-", "libomp.so", "libiomp5.so"]
        .iter()
        .any(|p| name.starts_with(p))
}

#[cfg(test)]
mod tests {
    use super::is_runtime;

    #[test]
    fn runtimes_are_known_by_their_file_names() {
        assert!(is_runtime("/usr/lib/x86_64-linux-gnu/libgomp.so.1.0.0"));
        assert!(is_runtime("/usr/lib/llvm-14/lib/libomp.so.5"));
        assert!(is_runtime("/opt/intel/lib/libiomp5.so"));
        assert!(!is_runtime("/usr/lib/x86_64-linux-gnu/libompitrace.so.40"));
        assert!(!is_runtime("/home/u/libgomp_wrapper_test"));
        assert!(!is_runtime("/usr/lib/libc.so.6"));
    }
}
