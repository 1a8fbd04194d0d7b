//! One unit's variables, read in one depth-first walk of its entries (those of its split
//! unit, for a skeleton unit of split DWARF): statics wherever they are declared, and the
//! scopes of concrete code (functions, inlined functions, lexical blocks) with their locals.

use super::frames::{LocalVar, ScopeDraft, UnitFrames};
use super::location::{frame_base_is_cfa, locate, Located};
use super::type_reader::{reference, Site, TypeReader};
use super::types::{TypeId, TypeShape};
use super::StaticVar;
use crate::dwarf::{unit_files, DebugUnits, Declarations, Slice, UnitId};
use profiler::addr::Svma;
use std::ops::Range;

/// How many `DW_AT_abstract_origin` / `DW_AT_specification` links are followed for a
/// variable's name and type (the limit the crate's other chains keep).
const MAX_CHAIN: u32 = 16;

/// What one unit yields; type ids refer to `types`.
pub(crate) struct UnitVars {
    /// Static variables with their declaration file as a path.
    pub statics: Vec<StaticVar>,
    pub frames: UnitFrames,
    pub types: Vec<TypeShape>,
}

/// What the DIEs enclosing an entry say about it.
#[derive(Clone, Copy)]
struct Ctx {
    /// The nearest enclosing `DW_TAG_subprogram` (abstract or concrete), to name the statics
    /// declared in it.
    function: Option<gimli::UnitOffset>,
    /// The nearest enclosing scope of concrete code, an index in `frames.scopes`.
    scope: Option<u32>,
    /// Whether that code's function has `DW_OP_call_frame_cfa` as its frame base.
    cfa_base: bool,
}

/// The walk's state.
struct Walk<'u, 'a, 'd> {
    units: &'u DebugUnits<'a, 'd>,
    home: UnitId,
    unit: &'u gimli::Unit<Slice<'d>>,
    dwarf: &'u gimli::Dwarf<Slice<'d>>,
    decls: Declarations<'u, 'a, 'd>,
    types: TypeReader<'u, 'a, 'd>,
    in_code: &'u dyn Fn(u64) -> bool,
    frames: UnitFrames,
    /// Statics, with their declaration file as an index into `decls`' files.
    statics: Vec<(StaticVar, Option<u32>)>,
}

/// Read the variables of unit `index` of `units`.
pub(crate) fn read_unit(
    units: &DebugUnits<'_, '_>,
    index: usize,
    in_code: &dyn Fn(u64) -> bool,
) -> gimli::Result<UnitVars> {
    let lines_unit = units.main_unit(index)?;
    let files = unit_files(units.dwarf(), lines_unit);
    let home = units.entries_unit(index)?;
    let mut walk = Walk {
        units,
        home,
        unit: units.unit(home)?,
        dwarf: units.dwarf_of(home),
        decls: Declarations::new(units, home, files),
        types: TypeReader::new(units),
        in_code,
        frames: UnitFrames::default(),
        statics: Vec::new(),
    };
    walk.entries()?;
    let files = walk.decls.into_files();
    let statics = walk
        .statics
        .into_iter()
        .map(|(mut s, file)| {
            s.file = file.and_then(|f| files.get(f as usize).cloned());
            s
        })
        .collect();
    Ok(UnitVars {
        statics,
        frames: walk.frames,
        types: walk.types.into_shapes(),
    })
}

impl<'d> Walk<'_, '_, 'd> {
    /// Walk all entries depth first, keeping the context of each open DIE.
    fn entries(&mut self) -> gimli::Result<()> {
        let outside = Ctx {
            function: None,
            scope: None,
            cfa_base: false,
        };
        let mut stack: Vec<(isize, Ctx)> = Vec::new();
        let mut cursor = self.unit.entries();
        while let Some(entry) = cursor.next_dfs()? {
            let depth = entry.depth();
            while stack.last().is_some_and(|&(d, _)| d >= depth) {
                stack.pop();
            }
            let ctx = stack.last().map_or(outside, |&(_, c)| c);
            let inner = match entry.tag() {
                gimli::DW_TAG_subprogram => self.subprogram(entry)?,
                gimli::DW_TAG_inlined_subroutine => self.inlined(entry, ctx)?,
                gimli::DW_TAG_lexical_block
                | gimli::DW_TAG_try_block
                | gimli::DW_TAG_catch_block => self.block(entry, ctx)?,
                gimli::DW_TAG_variable | gimli::DW_TAG_formal_parameter => {
                    self.variable(entry, ctx);
                    ctx
                }
                gimli::DW_TAG_namespace | gimli::DW_TAG_module | gimli::DW_TAG_compile_unit => ctx,
                // Inside a type or anything else, no local is declared.
                _ => Ctx { scope: None, ..ctx },
            };
            if entry.has_children() {
                stack.push((depth, inner));
            }
        }
        Ok(())
    }

    /// A `DW_TAG_subprogram`: a new outermost scope if it has code.
    fn subprogram(
        &mut self,
        entry: &gimli::DebuggingInformationEntry<Slice<'d>>,
    ) -> gimli::Result<Ctx> {
        let ranges = self.ranges(entry)?;
        let scope = match ranges.is_empty() {
            true => None,
            false => {
                let name = self.decls.of(entry).display.to_string();
                Some(self.add_scope(None, Some(name), ranges))
            }
        };
        Ok(Ctx {
            function: Some(entry.offset()),
            scope,
            cfa_base: frame_base_is_cfa(self.unit, entry.attr_value(gimli::DW_AT_frame_base)),
        })
    }

    /// A `DW_TAG_inlined_subroutine`: a scope inside the enclosing one; without code (all
    /// of it optimized away) nothing inside it is located.
    fn inlined(
        &mut self,
        entry: &gimli::DebuggingInformationEntry<Slice<'d>>,
        ctx: Ctx,
    ) -> gimli::Result<Ctx> {
        let Some(parent) = ctx.scope else {
            return Ok(ctx);
        };
        let ranges = self.ranges(entry)?;
        let scope = match ranges.is_empty() {
            true => None,
            false => {
                let name = self.decls.of(entry).display.to_string();
                Some(self.add_scope(Some(parent), Some(name), ranges))
            }
        };
        Ok(Ctx { scope, ..ctx })
    }

    /// A lexical block: a scope inside the enclosing one if it states its code; one that
    /// does not shares its parent's.
    fn block(
        &mut self,
        entry: &gimli::DebuggingInformationEntry<Slice<'d>>,
        ctx: Ctx,
    ) -> gimli::Result<Ctx> {
        let Some(parent) = ctx.scope else {
            return Ok(ctx);
        };
        let ranges = self.ranges(entry)?;
        if ranges.is_empty() {
            return Ok(ctx);
        }
        let scope = self.add_scope(Some(parent), None, ranges);
        Ok(Ctx {
            scope: Some(scope),
            ..ctx
        })
    }

    fn add_scope(
        &mut self,
        parent: Option<u32>,
        name: Option<String>,
        ranges: Vec<Range<u64>>,
    ) -> u32 {
        self.frames.scopes.push(ScopeDraft {
            parent,
            name,
            ranges,
        });
        (self.frames.scopes.len() - 1) as u32
    }

    /// A variable or parameter: a static if its location is an address, a local of the
    /// enclosing scope if it is a CFA slot or a register somewhere in it.
    fn variable(&mut self, entry: &gimli::DebuggingInformationEntry<Slice<'d>>, ctx: Ctx) {
        let Some(location) = entry.attr_value(gimli::DW_AT_location) else {
            return;
        };
        match locate(self.dwarf, self.unit, location, ctx.cfa_base) {
            Located::Static(addr) if addr != 0 => self.add_static(entry, addr, ctx),
            Located::Places(places) if !places.is_empty() => {
                let Some(scope) = ctx.scope else {
                    return;
                };
                let (name, ty) = self.name_and_type(entry);
                let ty = ty.map(|t| self.types.read(t));
                self.frames.vars.push((
                    scope,
                    LocalVar {
                        name: name.unwrap_or_else(|| "<unnamed>".to_string()),
                        size: ty.map_or(0, |t| self.types.size_of(t)),
                        ty,
                        places,
                    },
                ));
            }
            _ => {}
        }
    }

    /// A static variable at `addr`: named by its declaration (`Class::member`, `ns::x`), or
    /// `counter in f` when declared in function `f`.
    fn add_static(
        &mut self,
        entry: &gimli::DebuggingInformationEntry<Slice<'d>>,
        addr: u64,
        ctx: Ctx,
    ) {
        let decl = self.decls.of(entry);
        let function = ctx
            .function
            .and_then(|f| self.unit.entry(f).ok())
            .map(|f| self.decls.of(&f).display.to_string());
        let name = match function {
            Some(f) => format!("{} in {f}", decl.name.as_deref().unwrap_or(&decl.display)),
            None => decl.display.to_string(),
        };
        let ty: Option<TypeId> = self.name_and_type(entry).1.map(|t| self.types.read(t));
        let var = StaticVar {
            name,
            addr: Svma(addr),
            size: ty.map_or(0, |t| self.types.size_of(t)),
            file: None,
            line: decl.line,
            ty,
        };
        self.statics.push((var, decl.file));
    }

    /// The name and type DIE of a variable, following its abstract origin or specification
    /// to the DIE that states them.
    fn name_and_type(
        &self,
        entry: &gimli::DebuggingInformationEntry<Slice<'d>>,
    ) -> (Option<String>, Option<Site>) {
        let mut name = None;
        let mut ty = None;
        let mut id = self.home;
        let mut current = entry.clone();
        for _ in 0..MAX_CHAIN {
            if name.is_none() {
                name = current.attr_value(gimli::DW_AT_name).and_then(|v| {
                    let unit = self.units.unit(id).ok()?;
                    let s = self.units.dwarf_of(id).attr_string(unit, v).ok()?;
                    Some(s.to_string_lossy().into_owned())
                });
            }
            if ty.is_none() {
                ty = current
                    .attr_value(gimli::DW_AT_type)
                    .and_then(|v| reference(self.units, id, v));
            }
            if name.is_some() && ty.is_some() {
                break;
            }
            let origin = current
                .attr_value(gimli::DW_AT_abstract_origin)
                .or_else(|| current.attr_value(gimli::DW_AT_specification))
                .and_then(|v| reference(self.units, id, v));
            let Some(next) =
                origin.and_then(|(u, o)| Some((u, self.units.unit(u).ok()?.entry(o).ok()?)))
            else {
                break;
            };
            (id, current) = next;
        }
        (name, ty)
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
}
