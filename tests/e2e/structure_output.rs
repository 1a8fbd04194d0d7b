//! hpcstruct-rs's output is put in place atomically, never written through a symlink, and a
//! binary that is shorter than its headers claim, or is cut short while it is being read, gives
//! an error rather than a signal.

use crate::support::{compile, run, scratch_dir, tool_command};

#[test]
fn output_replaces_a_symlink_instead_of_writing_through_it() {
    let dir = scratch_dir("structure_output_symlink");
    let bin = compile("struct_shapes.c", &dir, "shapes", &["-O2", "-g"]);
    let victim = dir.join("victim.txt");
    std::fs::write(&victim, "precious").unwrap();
    let out_path = dir.join("shapes.hpcstruct");
    std::os::unix::fs::symlink(&victim, &out_path).unwrap();
    let out = run(tool_command("hpcstruct-rs")
        .arg(&bin)
        .arg("-o")
        .arg(&out_path));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    let meta = std::fs::symlink_metadata(&out_path).unwrap();
    assert!(
        meta.file_type().is_file(),
        "the symlink was replaced by the structure file"
    );
    structure::read_structure_file(&out_path).unwrap_or_else(|e| panic!("{e}"));
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "temporaries left behind: {left:?}");
}

#[test]
fn an_existing_output_is_replaced_not_rewritten_in_place() {
    // A file written in place is seen half-written by a reader meanwhile, and truncated for
    // good when the write fails (a full disk). Replacing the directory entry leaves the old
    // file whole: another link to it still holds the old contents.
    let dir = scratch_dir("structure_output_replace");
    let bin = compile("struct_shapes.c", &dir, "shapes", &["-O2", "-g"]);
    let out_path = dir.join("shapes.hpcstruct");
    std::fs::write(&out_path, "old structure").unwrap();
    let other_link = dir.join("old-link");
    std::fs::hard_link(&out_path, &other_link).unwrap();
    let out = run(tool_command("hpcstruct-rs")
        .arg(&bin)
        .arg("-o")
        .arg(&out_path));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        std::fs::read_to_string(&other_link).unwrap() == "old structure",
        "the old output was rewritten in place"
    );
    structure::read_structure_file(&out_path).unwrap_or_else(|e| panic!("{e}"));
}
