//! Compiles the eBPF program that reads Python's frames at each sample
//! (`bpf/python_stack.bpf.c`) with clang (`$CLANG`, else `clang`) when the sampler is built.
//! Without clang the object is left empty, with a warning, and hpcrun-rs names Python
//! functions from CPython's perf trampolines alone (and says why when it runs).

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=bpf/python_stack.bpf.c");
    println!("cargo:rerun-if-env-changed=CLANG");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"))
        .join("python_stack.bpf.o");
    let _ = std::fs::remove_file(&out);
    if std::env::var_os("CARGO_FEATURE_SAMPLER").is_some() {
        let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".into());
        let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_else(|_| "x86_64".into());
        let built = Command::new(&clang)
            .args(["-O2", "-g0", "-target", "bpf", "-Wall", "-Werror"])
            .arg(format!("-I/usr/include/{arch}-linux-gnu"))
            .args(["-c", "bpf/python_stack.bpf.c", "-o"])
            .arg(&out)
            .status();
        match built {
            Ok(status) if status.success() => return,
            Ok(status) => println!(
                "cargo:warning={clang} failed ({status}) on bpf/python_stack.bpf.c: hpcrun-rs \
                 will read Python functions from CPython's perf trampolines only"
            ),
            Err(e) => println!(
                "cargo:warning=no {clang} ({e}) to build bpf/python_stack.bpf.c: hpcrun-rs \
                 will read Python functions from CPython's perf trampolines only"
            ),
        }
    }
    std::fs::write(&out, []).expect("OUT_DIR is writable");
}
