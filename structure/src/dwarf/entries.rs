//! One unit's procedures (`DW_TAG_subprogram` with code) and their trees of inlined calls
//! (`DW_TAG_inlined_subroutine`), read in one depth-first walk of its entries (those of its
//! split unit, for a skeleton unit of split DWARF).

use super::origins::{Decl, Declarations};
use super::units::DebugUnits;
use super::{lines, InlineCall, NoReturn, ProcPlan, Slice, UnitOutput};
use gimli::AttributeValue;
use std::ops::Range;
use std::sync::Arc;

/// Context of an open DIE during the walk.
#[derive(Clone, Copy)]
enum Open {
    /// Not inside concrete code.
    Nothing,
    /// Inside procedure `procs[.0]`, inlined call `.1` (if any).
    Code(usize, Option<u32>),
}

/// Whether DIEs of `tag` describe a type whose children are its members.
fn is_type(tag: gimli::DwTag) -> bool {
    matches!(
        tag,
        gimli::DW_TAG_structure_type
            | gimli::DW_TAG_class_type
            | gimli::DW_TAG_union_type
            | gimli::DW_TAG_enumeration_type
    )
}

/// What the walk collects.
struct Walk<'u, 'a, 'd> {
    unit: &'u gimli::Unit<Slice<'d>>,
    dwarf: &'u gimli::Dwarf<Slice<'d>>,
    decls: Declarations<'u, 'a, 'd>,
    in_code: &'u dyn Fn(u64) -> bool,
    procs: Vec<ProcPlan>,
    any_inline: bool,
    noreturn: NoReturn,
}

/// Read unit `index` of `units`: its line rows, procedures and inlined calls.
pub(super) fn read_unit(
    units: &DebugUnits<'_, '_>,
    index: usize,
    in_code: &dyn Fn(u64) -> bool,
) -> gimli::Result<UnitOutput> {
    // Line rows are the module's unit's, even for a skeleton unit.
    let lines_unit = units.main_unit(index)?;
    let line_offset = lines_unit
        .line_program
        .as_ref()
        .map(|p| p.header().offset().0);
    let (files, rows) = match &lines_unit.line_program {
        Some(program) => (
            lines::unit_files(units.dwarf(), lines_unit),
            lines::read_rows(program.clone(), in_code)?,
        ),
        None => (Vec::new(), Vec::new()),
    };
    let home = units.entries_unit(index)?;
    let mut walk = Walk {
        unit: units.unit(home)?,
        dwarf: units.dwarf_of(home),
        decls: Declarations::new(units, home, files),
        in_code,
        procs: Vec::new(),
        any_inline: false,
        noreturn: NoReturn::default(),
    };
    walk.entries()?;
    let noreturn_callees = Arc::new(walk.noreturn);
    for p in &mut walk.procs {
        p.unit_has_inlines = walk.any_inline;
        p.noreturn_callees = noreturn_callees.clone();
    }
    Ok(UnitOutput {
        files: walk.decls.into_files(),
        rows,
        procs: walk.procs,
        line_offset,
    })
}

impl<'d> Walk<'_, '_, 'd> {
    /// Walk all entries depth first, keeping the context of each open DIE. Only subprograms
    /// and inlined calls in code are read whole; every other entry's attributes are passed
    /// over unread (libpython: the units' reading from 1.12 to 1.05 billion instructions).
    fn entries(&mut self) -> gimli::Result<()> {
        let mut stack: Vec<(isize, Open)> = Vec::new();
        let mut raw = self.unit.entries_raw(None)?;
        let mut entry = gimli::DebuggingInformationEntry::null();
        // While inside a type: its depth. A type's members are passed over whole: no code is
        // ever defined inside a type (a member function's code is a DIE of its own outside,
        // pointing at its declaration).
        let mut members_of: Option<isize> = None;
        while !raw.is_empty() {
            let depth = raw.next_depth();
            let mut past_code = raw.clone();
            let Some(abbrev) = past_code.read_abbreviation()? else {
                raw = past_code; // the end of a DIE's children
                continue;
            };
            if members_of.is_some_and(|d| depth > d) {
                raw = past_code;
                raw.skip_attributes(abbrev.attributes())?;
                continue;
            }
            members_of = None;
            while stack.last().is_some_and(|&(d, _)| d >= depth) {
                stack.pop();
            }
            let context = stack.last().map_or(Open::Nothing, |&(_, o)| o);
            let tag = abbrev.tag();
            let open = match (tag, context) {
                (gimli::DW_TAG_subprogram, _) => {
                    raw.read_entry(&mut entry)?;
                    self.subprogram(&entry)?
                }
                (gimli::DW_TAG_inlined_subroutine, Open::Code(p, parent)) => {
                    raw.read_entry(&mut entry)?;
                    self.inlined(&entry, p, parent)?
                }
                _ => {
                    raw = past_code;
                    raw.skip_attributes(abbrev.attributes())?;
                    match tag {
                        gimli::DW_TAG_inlined_subroutine => Open::Nothing,
                        _ => context,
                    }
                }
            };
            if abbrev.has_children() {
                if is_type(tag) {
                    members_of = Some(depth);
                } else {
                    stack.push((depth, open));
                }
            }
        }
        Ok(())
    }

    /// A `DW_TAG_subprogram`: noted if it never returns, a procedure if it has code.
    fn subprogram(
        &mut self,
        entry: &gimli::DebuggingInformationEntry<Slice<'d>>,
    ) -> gimli::Result<Open> {
        let noreturn = entry.attr_value(gimli::DW_AT_noreturn) == Some(AttributeValue::Flag(true));
        let ranges = self.ranges(entry)?;
        if noreturn || !ranges.is_empty() {
            let decl = self.decls.of(entry);
            if noreturn {
                let name = decl.link_name.clone().or(decl.name.clone());
                self.noreturn
                    .names
                    .extend(name.as_deref().map(str::to_string));
            }
            if !ranges.is_empty() {
                self.add_procedure(entry, ranges, decl);
                if noreturn {
                    self.noreturn
                        .entries
                        .push(self.procs[self.procs.len() - 1].entry);
                }
                return Ok(Open::Code(self.procs.len() - 1, None));
            }
        }
        Ok(Open::Nothing)
    }

    fn add_procedure(
        &mut self,
        entry: &gimli::DebuggingInformationEntry<Slice<'d>>,
        ranges: Vec<Range<u64>>,
        decl: Decl,
    ) {
        let entry_pc = self
            .entry_pc(entry)
            .filter(|pc| ranges.iter().any(|r| r.contains(pc)));
        self.procs.push(ProcPlan {
            entry: entry_pc.unwrap_or(ranges[0].start),
            ranges,
            link_name: decl.link_if_different().as_deref().map(str::to_string),
            name: decl.display.to_string(),
            file: decl.file,
            line: decl.line,
            inlines: Vec::new(),
            unit_has_inlines: false,
            from_dwarf: true,
            main_program: entry.attr_value(gimli::DW_AT_main_subprogram)
                == Some(AttributeValue::Flag(true)),
            noreturn_callees: Arc::default(),
        });
    }

    /// A `DW_TAG_inlined_subroutine` inside procedure `p`, in inlined call `parent` if any.
    fn inlined(
        &mut self,
        entry: &gimli::DebuggingInformationEntry<Slice<'d>>,
        p: usize,
        parent: Option<u32>,
    ) -> gimli::Result<Open> {
        self.any_inline = true;
        let ranges = self.ranges(entry)?;
        let decl = self.decls.of(entry);
        let udata = |at| entry.attr(at).and_then(|a| a.udata_value());
        let call_file = udata(gimli::DW_AT_call_file).and_then(|f| self.decls.home_file(f));
        let call_line = udata(gimli::DW_AT_call_line).unwrap_or(0) as u32;
        let inlines = &mut self.procs[p].inlines;
        let depth = parent.map_or(1, |q| inlines[q as usize].depth + 1);
        inlines.push(InlineCall {
            parent,
            depth,
            ranges,
            link_name: decl.link_if_different(),
            name: decl.display,
            file: decl.file,
            line: decl.line,
            call_file,
            call_line,
        });
        Ok(Open::Code(p, Some((inlines.len() - 1) as u32)))
    }

    /// The code ranges of `entry` inside the code.
    fn ranges(
        &self,
        entry: &gimli::DebuggingInformationEntry<Slice<'d>>,
    ) -> gimli::Result<Vec<Range<u64>>> {
        let mut out = Vec::new();
        let mut iter = self.dwarf.die_ranges(self.unit, entry)?;
        while let Some(r) = iter.next()? {
            if r.begin < r.end && (self.in_code)(r.begin) {
                out.push(r.begin..r.end);
            }
        }
        Ok(out)
    }

    /// `DW_AT_entry_pc`, else `DW_AT_low_pc`.
    fn entry_pc(&self, entry: &gimli::DebuggingInformationEntry<Slice<'d>>) -> Option<u64> {
        let attr = entry
            .attr(gimli::DW_AT_entry_pc)
            .or_else(|| entry.attr(gimli::DW_AT_low_pc))?;
        self.dwarf
            .attr_address(self.unit, attr.value())
            .ok()
            .flatten()
    }
}
