//! The units of a module's DWARF and of its supplementary file, found by offset.
//!
//! A DIE may refer to a DIE of another unit: `DW_FORM_ref_addr` names an offset in the whole
//! `.debug_info` (LLVM emits it where ThinLTO or LTO imported a function from another
//! compilation unit, GCC where an LTO partition refers to the early debug information of the
//! source file), and `DW_FORM_GNU_ref_alt` / `DW_FORM_ref_sup4` an offset in the
//! supplementary file (`dwz`'s `.gnu_debugaltlink`, DWARF 5's `.debug_sup`). [`DebugUnits`]
//! finds the unit holding such an offset by binary search over the unit headers, and parses
//! each unit once, on first use, shared by all threads. The split unit of a skeleton unit
//! (`-gsplit-dwarf`, module `split`) is joined to it once, on first use, too.
//!
//! A type may live in a type unit of its own (`-fdebug-types-section`), named by its 8-byte
//! signature (`DW_FORM_ref_sig8`): in the module's `.debug_info` (DWARF 5), in its
//! `.debug_types` (DWARF 4) or, with split DWARF, in the `.dwo` file beside the split unit that
//! names it (either section) or in the `.dwp` package (its type unit index).
//! [`DebugUnits::type_unit`] finds it there.

use super::split::{SplitDwarf, SplitUnit};
use super::Slice;
use std::sync::OnceLock;

/// The units of one `.debug_info` section in section order, each parsed on first use.
pub(crate) struct UnitTable<'d> {
    headers: Vec<gimli::UnitHeader<Slice<'d>>>,
    parsed: Vec<OnceLock<gimli::Result<gimli::Unit<Slice<'d>>>>>,
}

impl<'d> UnitTable<'d> {
    /// The unit headers of `dwarf`'s `.debug_info`; a header that cannot be read ends the
    /// list (reported in `skipped`).
    fn new(dwarf: &gimli::Dwarf<Slice<'d>>, skipped: &mut Vec<String>) -> UnitTable<'d> {
        let mut iter = dwarf.units();
        UnitTable::listing(|| iter.next(), skipped)
    }

    /// The unit headers `next` gives one by one (a `.debug_info` or `.debug_types` section's).
    fn listing(
        mut next: impl FnMut() -> gimli::Result<Option<gimli::UnitHeader<Slice<'d>>>>,
        skipped: &mut Vec<String>,
    ) -> UnitTable<'d> {
        let mut headers = Vec::new();
        loop {
            match next() {
                Ok(Some(h)) => headers.push(h),
                Ok(None) => break,
                Err(e) => {
                    skipped.push(format!(
                        "DWARF unit headers unreadable after unit {}: {e}",
                        headers.len()
                    ));
                    break;
                }
            }
        }
        let parsed = headers.iter().map(|_| OnceLock::new()).collect();
        UnitTable { headers, parsed }
    }

    /// Number of units.
    pub(crate) fn len(&self) -> usize {
        self.headers.len()
    }

    /// The header of unit `i`.
    pub(crate) fn header(&self, i: usize) -> &gimli::UnitHeader<Slice<'d>> {
        &self.headers[i]
    }

    /// The type unit with signature `signature` (plain or split), if this section has one:
    /// its index and the offset of its type's DIE.
    fn type_unit(
        &self,
        signature: gimli::DebugTypeSignature,
    ) -> Option<(usize, gimli::UnitOffset)> {
        self.headers
            .iter()
            .enumerate()
            .find_map(|(i, h)| match h.type_() {
                gimli::UnitType::Type {
                    type_signature,
                    type_offset,
                }
                | gimli::UnitType::SplitType {
                    type_signature,
                    type_offset,
                } if type_signature == signature => Some((i, type_offset)),
                _ => None,
            })
    }

    /// Unit `i`, parsed (root entry, abbreviations, line program header) on first use.
    fn unit(
        &self,
        dwarf: &gimli::Dwarf<Slice<'d>>,
        i: usize,
    ) -> gimli::Result<&gimli::Unit<Slice<'d>>> {
        self.parsed[i]
            .get_or_init(|| dwarf.unit(self.headers[i]))
            .as_ref()
            .map_err(|e| *e)
    }

    /// The index of the unit holding `.debug_info` offset `offset`, and the offset within it.
    fn containing(&self, offset: gimli::DebugInfoOffset) -> Option<(usize, gimli::UnitOffset)> {
        let start = |h: &gimli::UnitHeader<Slice<'d>>| h.debug_info_offset().map_or(0, |o| o.0);
        let i = self
            .headers
            .partition_point(|h| start(h) <= offset.0)
            .checked_sub(1)?;
        Some((i, offset.to_unit_offset(&self.headers[i])?))
    }
}

/// Which file's `.debug_info` a unit belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Section {
    /// The module's own (or its separate debug file's).
    Main,
    /// The supplementary file's.
    Sup,
    /// The module's `.debug_types` (DWARF 4 type units).
    Types,
    /// The split unit (`.dwo`) of the skeleton unit of the same index in `Main`.
    Split,
    /// Unit `k` of the `.dwo` file of the skeleton unit of the same index in `Main` (a type
    /// unit beside its split unit: its `.debug_info.dwo`'s units, then its
    /// `.debug_types.dwo`'s).
    SplitType(usize),
    /// The type unit at this row of the split DWARF package's type unit index.
    PackageType(u32),
}

/// A unit: which section, and its index there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct UnitId {
    pub section: Section,
    pub index: usize,
}

/// The units of a module's DWARF, of its supplementary file (if `dwarf` has one) and the split
/// units of its skeleton units.
pub(crate) struct DebugUnits<'a, 'd> {
    dwarf: &'a gimli::Dwarf<Slice<'d>>,
    main: UnitTable<'d>,
    sup: Option<UnitTable<'d>>,
    /// The type units of `.debug_types` (DWARF 4).
    types: UnitTable<'d>,
    split: &'a SplitDwarf<'d>,
    /// The split unit of each unit of `main`, joined on first use (`None`: not a skeleton, or
    /// its split unit was not found).
    split_units: Vec<OnceLock<gimli::Result<Option<SplitUnit<'d>>>>>,
    /// The units of each split unit's `.dwo` file (its type units), listed on first use.
    split_tables: Vec<OnceLock<Option<UnitTable<'d>>>>,
    /// The type units of the split DWARF package, by their row in its index, read on first
    /// use.
    package_types: Vec<OnceLock<Option<(SplitUnit<'d>, gimli::UnitOffset)>>>,
}

impl<'a, 'd> DebugUnits<'a, 'd> {
    /// Index the unit headers of `dwarf` and of its supplementary file; skeleton units find
    /// their split units in `split`.
    pub(crate) fn new(
        dwarf: &'a gimli::Dwarf<Slice<'d>>,
        split: &'a SplitDwarf<'d>,
        skipped: &mut Vec<String>,
    ) -> DebugUnits<'a, 'd> {
        let main = UnitTable::new(dwarf, skipped);
        let sup = dwarf.sup().map(|s| UnitTable::new(s, skipped));
        let mut type_units = dwarf.type_units();
        let types = UnitTable::listing(|| type_units.next(), skipped);
        let split_units = main.headers.iter().map(|_| OnceLock::new()).collect();
        let split_tables = main.headers.iter().map(|_| OnceLock::new()).collect();
        let package_types = (0..split.package_type_rows())
            .map(|_| OnceLock::new())
            .collect();
        DebugUnits {
            dwarf,
            main,
            sup,
            types,
            split,
            split_units,
            split_tables,
            package_types,
        }
    }

    /// The module's DWARF.
    pub(crate) fn dwarf(&self) -> &'a gimli::Dwarf<Slice<'d>> {
        self.dwarf
    }

    /// The units of the module's own `.debug_info`.
    pub(crate) fn main(&self) -> &UnitTable<'d> {
        &self.main
    }

    /// The DWARF sections that unit `id` lives in.
    pub(crate) fn dwarf_of(&self, id: UnitId) -> &gimli::Dwarf<Slice<'d>> {
        match id.section {
            Section::Main | Section::Types => self.dwarf,
            Section::Sup => self.dwarf.sup().unwrap_or(self.dwarf),
            Section::Split | Section::SplitType(_) => match self.split_unit(id.index) {
                Ok(Some(s)) => &s.dwarf,
                _ => self.dwarf,
            },
            Section::PackageType(row) => self.package_type(row).map_or(self.dwarf, |t| &t.0.dwarf),
        }
    }

    fn table(&self, section: Section) -> Option<&UnitTable<'d>> {
        match section {
            Section::Main => Some(&self.main),
            Section::Sup => self.sup.as_ref(),
            Section::Types => Some(&self.types),
            Section::Split | Section::SplitType(_) | Section::PackageType(_) => None,
        }
    }

    /// Unit `id`, parsed on first use.
    pub(crate) fn unit(&self, id: UnitId) -> gimli::Result<&gimli::Unit<Slice<'d>>> {
        if id.section == Section::Split {
            let split = self.split_unit(id.index)?;
            return split.map(|s| &s.unit).ok_or(gimli::Error::MissingUnitDie);
        }
        if let Section::PackageType(row) = id.section {
            let found = self.package_type(row);
            return found.map(|t| &t.0.unit).ok_or(gimli::Error::MissingUnitDie);
        }
        if let Section::SplitType(k) = id.section {
            let table = self
                .split_table(id.index)
                .ok_or(gimli::Error::MissingUnitDie)?;
            return table.unit(self.dwarf_of(id), k);
        }
        // A unit of the supplementary file is only ever named by `locate`, which needs one.
        let table = self.table(id.section).ok_or(gimli::Error::MissingUnitDie)?;
        table.unit(self.dwarf_of(id), id.index)
    }

    /// The unit whose entries describe the code of unit `index` of the module: its split unit
    /// if it is a skeleton whose split unit was found, else itself.
    pub(crate) fn entries_unit(&self, index: usize) -> gimli::Result<UnitId> {
        let section = match self.split_unit(index)? {
            Some(_) => Section::Split,
            None => Section::Main,
        };
        Ok(UnitId { section, index })
    }

    /// Whether the file indices of unit `id` (`DW_AT_decl_file`, `DW_AT_call_file`) are those
    /// of the module's unit of the same index: a unit of the module, or a split unit without a
    /// file table of its own (LLVM's `.dwo` has none and indexes the skeleton's).
    pub(crate) fn files_are_skeletons(&self, id: UnitId) -> bool {
        match id.section {
            Section::Main => true,
            Section::Sup | Section::Types => false,
            Section::Split => self
                .split_unit(id.index)
                .is_ok_and(|s| s.is_none_or(|s| s.unit.line_program.is_none())),
            Section::SplitType(_) | Section::PackageType(_) => false,
        }
    }

    /// The units of the `.dwo` file of the skeleton unit `index`, listed on first use; `None`
    /// where it has no split unit.
    fn split_table(&self, index: usize) -> Option<&UnitTable<'d>> {
        let cell = self.split_tables.get(index)?;
        cell.get_or_init(|| {
            let split = self.split_unit(index).ok().flatten()?;
            let (mut info, mut types) = (split.dwarf.units(), split.dwarf.type_units());
            let next = || match info.next()? {
                Some(h) => Ok(Some(h)),
                None => types.next(),
            };
            Some(UnitTable::listing(next, &mut Vec::new()))
        })
        .as_ref()
    }

    /// The split DWARF package's type unit at `row` of its index, read on first use.
    fn package_type(&self, row: u32) -> Option<&(SplitUnit<'d>, gimli::UnitOffset)> {
        let cell = self.package_types.get(row as usize)?;
        cell.get_or_init(|| self.split.package_type_unit(self.dwarf, row).ok().flatten())
            .as_ref()
    }

    /// The type DIE with signature `signature` that a DIE of unit `from` names
    /// (`DW_FORM_ref_sig8`): in the `.dwo` file of a split unit or in the split DWARF package,
    /// else in the section `from` is in or, for the module's own units, in its `.debug_types`.
    pub(crate) fn type_unit(
        &self,
        from: UnitId,
        signature: gimli::DebugTypeSignature,
    ) -> Option<(UnitId, gimli::UnitOffset)> {
        let (section, table) = match from.section {
            Section::Split | Section::SplitType(_) | Section::PackageType(_) => {
                return self.split_type_unit(from.index, signature);
            }
            section => (section, self.table(section)?),
        };
        if let Some((index, offset)) = table.type_unit(signature) {
            return Some((UnitId { section, index }, offset));
        }
        let (index, offset) = (section != Section::Sup)
            .then(|| self.types.type_unit(signature))
            .flatten()?;
        let section = Section::Types;
        Some((UnitId { section, index }, offset))
    }

    /// The type DIE with signature `signature` named from the split unit of skeleton unit
    /// `index` (or a type unit beside it): in its `.dwo` file, else in the package.
    fn split_type_unit(
        &self,
        index: usize,
        signature: gimli::DebugTypeSignature,
    ) -> Option<(UnitId, gimli::UnitOffset)> {
        let beside = self.split_table(index).and_then(|t| t.type_unit(signature));
        if let Some((k, offset)) = beside {
            let section = Section::SplitType(k);
            return Some((UnitId { section, index }, offset));
        }
        let row = self.split.package_type_row(signature)?;
        let (_, offset) = self.package_type(row)?;
        let section = Section::PackageType(row);
        Some((UnitId { section, index }, *offset))
    }

    /// The split unit of unit `index` of the module, joined on first use.
    fn split_unit(&self, index: usize) -> gimli::Result<Option<&SplitUnit<'d>>> {
        let cell = self
            .split_units
            .get(index)
            .ok_or(gimli::Error::MissingUnitDie)?;
        cell.get_or_init(|| {
            let skeleton = self.main_unit(index)?;
            self.split.unit(self.dwarf, skeleton)
        })
        .as_ref()
        .map(Option::as_ref)
        .map_err(|e| *e)
    }

    /// Unit `index` of the module's own `.debug_info`.
    pub(crate) fn main_unit(&self, index: usize) -> gimli::Result<&gimli::Unit<Slice<'d>>> {
        self.unit(UnitId {
            section: Section::Main,
            index,
        })
    }

    /// The unit and offset within it of `offset` in `section`'s `.debug_info`.
    pub(crate) fn locate(
        &self,
        section: Section,
        offset: gimli::DebugInfoOffset,
    ) -> Option<(UnitId, gimli::UnitOffset)> {
        let (index, within) = self.table(section)?.containing(offset)?;
        Some((UnitId { section, index }, within))
    }
}
