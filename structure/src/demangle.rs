//! Demangling link names of C++, Rust and Fortran functions into the names people read.

/// The readable form of link name `name`: Rust (v0 and legacy) without the hash, C++ with its
/// parameter list, gfortran module procedures as `module::procedure`, anything else unchanged.
pub fn demangle(name: &str) -> String {
    if let Some((module, procedure)) = fortran_module_procedure(name) {
        return format!("{module}::{procedure}");
    }
    if is_rust(name) {
        if let Ok(d) = rustc_demangle::try_demangle(name) {
            return format!("{d:#}");
        }
    }
    if name.starts_with("_Z") {
        if let Some(d) = demangle_cpp(name) {
            return d;
        }
    }
    name.to_string()
}

/// The longest C++ name given to the C++ runtime's demangler. It keeps its working arrays on
/// the stack (about 70 bytes per character of the name); longer names, rare even in heavy
/// template code, go to the `cpp_demangle` crate, which works on the heap.
const RUNTIME_DEMANGLER_MAX: usize = 4 * 1024;

/// A C++ name as GNU tools print it. The C++ runtime's `__cxa_demangle` (libstdc++, the
/// libiberty demangler that binutils, gdb and perf use) spells every name as they do; the
/// `cpp_demangle` crate differs on a few percent of names (`std::nullptr_t`, parameters of
/// forwarding constructors) and serves only names too long for the runtime's stack use.
fn demangle_cpp(name: &str) -> Option<String> {
    if name.len() > RUNTIME_DEMANGLER_MAX {
        let sym = cpp_demangle::Symbol::new(name).ok()?;
        return sym.demangle(&cpp_demangle::DemangleOptions::default()).ok();
    }
    runtime::demangle(name)
}

/// The C++ runtime's demangler, through its C ABI.
mod runtime {
    use std::ffi::{c_char, c_int, c_void, CStr, CString};

    #[link(name = "stdc++")]
    extern "C" {
        /// Itanium C++ ABI §3.4: returns a `malloc`ed NUL-terminated string, or null with
        /// `*status` < 0 (invalid name, out of memory).
        fn __cxa_demangle(
            mangled: *const c_char,
            buffer: *mut c_char,
            length: *mut usize,
            status: *mut c_int,
        ) -> *mut c_char;
    }
    extern "C" {
        fn free(ptr: *mut c_void);
    }

    /// `name` demangled, or `None` where the runtime rejects it.
    pub(super) fn demangle(name: &str) -> Option<String> {
        let mangled = CString::new(name).ok()?;
        let mut status: c_int = 0;
        // SAFETY: `mangled` is NUL-terminated and outlives the call; a null buffer asks the
        // runtime to allocate the result, which is copied and then freed exactly once.
        unsafe {
            let out = __cxa_demangle(
                mangled.as_ptr(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                &mut status,
            );
            if out.is_null() {
                return None;
            }
            let text = (status == 0).then(|| CStr::from_ptr(out).to_string_lossy().into_owned());
            free(out.cast());
            text
        }
    }
}

/// gfortran names a procedure `p` of module `m` `__m_MOD_p`.
fn fortran_module_procedure(name: &str) -> Option<(&str, &str)> {
    let (module, procedure) = name.strip_prefix("__")?.split_once("_MOD_")?;
    (!module.is_empty() && !procedure.is_empty()).then_some((module, procedure))
}

/// Rust v0 names start with `_R`; legacy ones are `_ZN...17h<16 hex digits>E`.
fn is_rust(name: &str) -> bool {
    if name.starts_with("_R") {
        return true;
    }
    let Some(body) = name.strip_prefix("_ZN").and_then(|b| b.strip_suffix('E')) else {
        return false;
    };
    body.len() > 19
        && body[body.len() - 19..].starts_with("17h")
        && body[body.len() - 16..]
            .bytes()
            .all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demangles_cpp_rust_and_leaves_c() {
        assert_eq!(demangle("_ZN2Mp3addEii"), "Mp::add(int, int)");
        assert_eq!(
            demangle("_ZN4core3fmt5write17h0123456789abcdefE"),
            "core::fmt::write"
        );
        assert_eq!(demangle("main"), "main");
        assert_eq!(
            demangle("__kernels_MOD_matmul_naive"),
            "kernels::matmul_naive"
        );
        assert_eq!(demangle("__MOD_x"), "__MOD_x");
        assert_eq!(demangle("_Zbogus"), "_Zbogus");
    }

    /// Names the `cpp_demangle` crate spells otherwise than binutils and gdb (it drops the
    /// repeated and forwarded parameters of these two constructors).
    #[test]
    fn cpp_names_read_as_gnu_tools_print_them() {
        assert_eq!(
            demangle("_ZNSt6vectorIcSaIcEEC2IPcvEET_S4_RKS0_"),
            "std::vector<char, std::allocator<char> >::vector<char*, void>(char*, char*, std::allocator<char> const&)"
        );
        assert_eq!(
            demangle("_ZNSt8functionIFbcEEC2IZ1fvEUlcE_vEEOT_"),
            "std::function<bool (char)>::function<f()::{lambda(char)#1}, void>(f()::{lambda(char)#1}&&)"
        );
    }

    /// A name too long for the runtime's stack-allocated demangler still reads, and damaged
    /// or hostile names come back unchanged.
    #[test]
    fn long_and_damaged_names() {
        let params = RUNTIME_DEMANGLER_MAX + 1;
        let long = format!("_Z1f{}", "i".repeat(params));
        assert_eq!(
            demangle(&long),
            format!("f({})", vec!["int"; params].join(", "))
        );
        for depth in [RUNTIME_DEMANGLER_MAX - 10, 100_000] {
            let deep = format!("_Z1f{}i", "P".repeat(depth));
            assert_eq!(demangle(&deep), deep);
        }
        assert_eq!(demangle("_Z1f\0i"), "_Z1f\0i");
    }
}
