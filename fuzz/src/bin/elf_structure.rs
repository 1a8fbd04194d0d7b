//! ELF and DWARF through the structure analysis: any file gives a scope tree or an error, never
//! a panic or hang (see `hpctoolkit_fuzz::elf_structure`).

fn main() {
    let dir = tempfile::tempdir().expect("a private scratch directory");
    let path = dir.path().join("input.elf");
    afl::fuzz!(|bytes: &[u8]| hpctoolkit_fuzz::elf_structure(bytes, &path));
}
