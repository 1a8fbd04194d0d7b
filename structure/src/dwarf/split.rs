//! Split DWARF (`-gsplit-dwarf`): the entries of a skeleton unit, read from its `.dwo` file or
//! from a `.dwp` package.
//!
//! A binary built with `-gsplit-dwarf` keeps in its `.debug_info` only *skeleton* units (root
//! entry, code ranges, line program, `DW_AT_addr_base`, a DWO id); the procedures and inlined
//! calls are in a split unit of another file. gimli joins the two: [`gimli::Dwarf::make_dwo`]
//! (or [`gimli::DwarfPackage::find_cu`]) gives the split unit the skeleton's `.debug_addr` and
//! `.debug_ranges`, and [`gimli::Unit::copy_relocated_attributes`] its address bases. Line rows
//! still come from the skeleton's line program; `DW_AT_decl_file` and `DW_AT_call_file` of the
//! split unit index the `.dwo`'s own file table (`.debug_line.dwo`, a header without rows, as
//! GCC writes it), which [`SplitUnit`] carries as its line program, or, where the `.dwo` has
//! none (LLVM), the skeleton's.

use super::{dwarf_from, section_slice, SectionBytes, Slice};
use std::collections::HashMap;

/// Where the split units of a module's skeleton units are: `.dwo` files by DWO id, and a
/// `.dwp` package. Empty for a module without split DWARF.
#[derive(Default)]
pub struct SplitDwarf<'d> {
    files: HashMap<u64, &'d SectionBytes<'d>>,
    package: Option<gimli::DwarfPackage<Slice<'d>>>,
}

/// A skeleton unit's split unit, ready to walk.
pub(crate) struct SplitUnit<'d> {
    /// The split unit's sections, joined with the skeleton file's as gimli requires.
    pub dwarf: gimli::Dwarf<Slice<'d>>,
    /// The split unit, with the skeleton's address bases and its own file table, if it has
    /// one, as line program.
    pub unit: gimli::Unit<Slice<'d>>,
}

impl<'d> SplitDwarf<'d> {
    /// The split units in `files` (the sections of `.dwo` files, by the DWO id of their unit)
    /// and in `package` (the sections of a `.dwp` file, if any).
    pub(crate) fn new(
        files: HashMap<u64, &'d SectionBytes<'d>>,
        package: Option<&'d SectionBytes<'d>>,
    ) -> gimli::Result<SplitDwarf<'d>> {
        let package = package
            .map(|sections| {
                let empty = gimli::EndianSlice::new(&[][..], gimli::LittleEndian);
                gimli::DwarfPackage::load(
                    |id| Ok::<_, gimli::Error>(section_slice(sections, id)),
                    empty,
                )
            })
            .transpose()?;
        Ok(SplitDwarf { files, package })
    }

    /// Whether the split unit with DWO id `id` is here, for a skeleton unit of `parent`.
    pub(crate) fn holds(&self, parent: &gimli::Dwarf<Slice<'d>>, id: gimli::DwoId) -> bool {
        self.find(parent, id).is_ok_and(|u| u.is_some())
    }

    /// The split unit of `skeleton` (a unit of `parent`), or `None` if it is not a skeleton or
    /// its split unit was not found.
    pub(crate) fn unit(
        &self,
        parent: &gimli::Dwarf<Slice<'d>>,
        skeleton: &gimli::Unit<Slice<'d>>,
    ) -> gimli::Result<Option<SplitUnit<'d>>> {
        let Some(id) = skeleton.dwo_id else {
            return Ok(None);
        };
        let Some(SplitUnit { dwarf, mut unit }) = self.find(parent, id)? else {
            return Ok(None);
        };
        unit.copy_relocated_attributes(skeleton);
        if unit.comp_dir.is_none() {
            unit.comp_dir = skeleton.comp_dir;
        }
        unit.line_program = declaration_files(&dwarf, &unit)?;
        Ok(Some(SplitUnit { dwarf, unit }))
    }

    /// The number of rows of the package's type unit index, row 0 (unused) included; 0 without
    /// a package.
    pub(crate) fn package_type_rows(&self) -> usize {
        (self.package.as_ref()).map_or(0, |p| p.tu_index.unit_count() as usize + 1)
    }

    /// The row of the package's type unit index that holds the type unit with `signature`.
    pub(crate) fn package_type_row(&self, signature: gimli::DebugTypeSignature) -> Option<u32> {
        self.package.as_ref()?.tu_index.find(signature.0)
    }

    /// The package's type unit at `row` of its index (for units of `parent`), as it reads by
    /// itself, and the offset of its type's entry: in `.debug_info.dwo` (DWARF 5) or
    /// `.debug_types.dwo` (DWARF 4).
    pub(crate) fn package_type_unit(
        &self,
        parent: &gimli::Dwarf<Slice<'d>>,
        row: u32,
    ) -> gimli::Result<Option<(SplitUnit<'d>, gimli::UnitOffset)>> {
        let Some(package) = &self.package else {
            return Ok(None);
        };
        let dwarf = package.tu_sections(row, parent)?;
        let header = match dwarf.units().next()? {
            Some(h) => Some(h),
            None => dwarf.type_units().next()?,
        };
        let Some(header) = header else {
            return Ok(None);
        };
        let (gimli::UnitType::Type { type_offset, .. }
        | gimli::UnitType::SplitType { type_offset, .. }) = header.type_()
        else {
            return Ok(None);
        };
        let unit = dwarf.unit(header)?;
        Ok(Some((SplitUnit { dwarf, unit }, type_offset)))
    }

    /// The split unit with DWO id `id`, as it reads by itself (package first, as gdb does).
    fn find(
        &self,
        parent: &gimli::Dwarf<Slice<'d>>,
        id: gimli::DwoId,
    ) -> gimli::Result<Option<SplitUnit<'d>>> {
        let from_package = match &self.package {
            Some(p) => p.find_cu(id, parent)?,
            None => None,
        };
        let dwarf = match (from_package, self.files.get(&id.0)) {
            (Some(d), _) => d,
            (None, Some(sections)) => {
                let mut d = dwarf_from(sections);
                d.make_dwo(parent);
                d
            }
            (None, None) => return Ok(None),
        };
        let unit = split_compile_unit(&dwarf, id)?;
        Ok(unit.map(|unit| SplitUnit { dwarf, unit }))
    }
}

/// The split compilation unit with DWO id `id` among the units of `dwarf` (a `.dwo` may also
/// hold type units).
fn split_compile_unit<'d>(
    dwarf: &gimli::Dwarf<Slice<'d>>,
    id: gimli::DwoId,
) -> gimli::Result<Option<gimli::Unit<Slice<'d>>>> {
    let mut headers = dwarf.units();
    while let Some(header) = headers.next()? {
        let candidate = match header.type_() {
            gimli::UnitType::SplitCompilation(found) => found == id,
            // GNU split DWARF (version 4) states the id in the root entry.
            gimli::UnitType::Compilation => true,
            _ => false,
        };
        if candidate {
            let unit = dwarf.unit(header)?;
            if unit.dwo_id == Some(id) {
                return Ok(Some(unit));
            }
        }
    }
    Ok(None)
}

/// The file table that a split unit's declarations index: the header of the `.debug_line.dwo`
/// program (the unit's own contribution, in a package).
fn declaration_files<'d>(
    dwarf: &gimli::Dwarf<Slice<'d>>,
    unit: &gimli::Unit<Slice<'d>>,
) -> gimli::Result<Option<gimli::IncompleteLineProgram<Slice<'d>>>> {
    use gimli::Section;
    if dwarf.debug_line.reader().is_empty() {
        return Ok(None);
    }
    dwarf
        .debug_line
        .program(
            gimli::DebugLineOffset(0),
            unit.header.address_size(),
            unit.comp_dir,
            unit.name,
        )
        .map(Some)
}
