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
        if let Ok(sym) = cpp_demangle::Symbol::new(name) {
            if let Ok(d) = sym.demangle(&cpp_demangle::DemangleOptions::default()) {
                return d;
            }
        }
    }
    name.to_string()
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
}
