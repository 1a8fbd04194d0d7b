//! The C++ scope of a function that has no link name: the namespaces and classes enclosing
//! its declaration, which qualify its name as they would qualify the demangled link name.
//!
//! GCC gives no `DW_AT_linkage_name` to some functions (static functions and those of an
//! anonymous namespace, template instances taking a lambda, a lambda's `operator()`); their
//! `DW_AT_name` alone (`sorted_sum`, `__push_heap<...>`) does not say that they are
//! `(anonymous namespace)::sorted_sum` or `std::__push_heap<...>`. The scope is found as gdb
//! finds it (`determine_prefix`): the enclosing namespaces (`(anonymous namespace)` for a
//! nameless one) and named classes, structures and unions, from the outermost in; an
//! enclosing function or nameless class (a lambda's closure type) starts the scope afresh, as
//! the names of what is local to a function are not qualified by it.

use super::Slice;

/// `DW_LANG_C_plus_plus*`: the languages whose names [`qualifier`] qualifies.
pub(super) fn is_cxx(unit: &gimli::Unit<Slice<'_>>) -> bool {
    let Ok(mut entries) = unit.entries_tree(None) else {
        return false;
    };
    let language = entries
        .root()
        .ok()
        .and_then(|root| root.entry().attr_value(gimli::DW_AT_language));
    matches!(
        language,
        Some(gimli::AttributeValue::Language(
            gimli::DW_LANG_C_plus_plus
                | gimli::DW_LANG_C_plus_plus_03
                | gimli::DW_LANG_C_plus_plus_11
                | gimli::DW_LANG_C_plus_plus_14
        ))
    )
}

/// The scope qualifying the name of the DIE at `target` in `unit` (`a::b`), `None` if nothing
/// does. The unit's tree is searched from its root, each level's children skipped over by
/// their `DW_AT_sibling` up to the one whose subtree holds `target`.
pub(super) fn qualifier<'d>(
    dwarf: &gimli::Dwarf<Slice<'d>>,
    unit: &gimli::Unit<Slice<'d>>,
    target: gimli::UnitOffset,
) -> gimli::Result<Option<String>> {
    let mut scope: Vec<String> = Vec::new();
    let mut parent = None;
    loop {
        let mut tree = unit.entries_tree(parent)?;
        let mut children = tree.root()?.children();
        let mut holder = None;
        while let Some(child) = children.next()? {
            let offset = child.entry().offset();
            if offset == target {
                return Ok((!scope.is_empty()).then(|| scope.join("::")));
            }
            if offset > target {
                break;
            }
            holder = Some(offset);
        }
        let Some(offset) = holder else {
            return Ok(None);
        };
        let entry = unit.entry(offset)?;
        let name = entry
            .attr_value(gimli::DW_AT_name)
            .and_then(|v| dwarf.attr_string(unit, v).ok())
            .map(|s| s.to_string_lossy().into_owned());
        match (entry.tag(), name) {
            (gimli::DW_TAG_namespace, name) => {
                scope.push(name.unwrap_or_else(|| "(anonymous namespace)".to_string()))
            }
            (
                gimli::DW_TAG_class_type
                | gimli::DW_TAG_structure_type
                | gimli::DW_TAG_union_type
                | gimli::DW_TAG_interface_type,
                Some(name),
            ) => scope.push(name),
            (
                gimli::DW_TAG_class_type
                | gimli::DW_TAG_structure_type
                | gimli::DW_TAG_union_type
                | gimli::DW_TAG_interface_type
                | gimli::DW_TAG_subprogram,
                _,
            ) => scope.clear(),
            _ => {}
        }
        parent = Some(offset);
    }
}
