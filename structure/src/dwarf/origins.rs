//! Names and declarations of procedures and inlined calls, wherever their DIEs put them.
//!
//! A concrete `DW_TAG_subprogram` or a `DW_TAG_inlined_subroutine` rarely names itself: it
//! points with `DW_AT_abstract_origin` to an abstract instance, which may point with
//! `DW_AT_specification` to a declaration (a method inside its class or trait impl), and the
//! name and declaration file are on whichever of these has them. The chain may cross units,
//! as the addr2line crate follows it: within the unit (`DW_FORM_ref4`), into another unit
//! (`DW_FORM_ref_addr`: rustc's ThinLTO imports, GCC's LTO partitions), or into the
//! supplementary file (`DW_FORM_GNU_ref_alt`, `DW_FORM_ref_sup4`: dwz). A declaration file
//! named by a DIE of another unit is an index into *that* unit's line program: it is resolved
//! to a path there and added to the reading unit's files. A C++ function without a link name
//! is named by its `DW_AT_name` qualified by the scope of the DIE at the end of the chain
//! (module `scopes`).

use super::units::{DebugUnits, Section, UnitId};
use super::{lines, scopes, Slice};
use crate::demangle::demangle;
use fxhash::FxHashMap as HashMap;
use gimli::AttributeValue;
use std::sync::Arc;

/// How many references a chain may follow (the addr2line crate's limit too).
const MAX_CHAIN: u32 = 16;

/// Name and declaration of a DIE, after following its origins. The names are shared (every
/// DIE whose chain leads to one declaration, and the cache, hold the same strings).
#[derive(Clone, Default)]
pub(crate) struct Decl {
    pub name: Option<Arc<str>>,
    pub link_name: Option<Arc<str>>,
    /// What qualifies `name` (`(anonymous namespace)`, `std::vector<int>`), for a C++ function
    /// without a link name.
    pub scope: Option<Arc<str>>,
    /// The name people read: the demangled link name, else the plain name (demangled once
    /// per DIE that names itself, shared by the DIEs that take their name from it).
    pub display: Arc<str>,
    /// Declaration file, an index into the reading unit's files.
    pub file: Option<u32>,
    pub line: u32,
}

impl Decl {
    /// The link name, unless it reads the same as the display name.
    pub fn link_if_different(&self) -> Option<Arc<str>> {
        self.link_name.clone().filter(|l| *l != self.display)
    }

    /// Set `display` from the names, reusing `from`'s when the names are `from`'s.
    fn set_display(&mut self, from: Option<&Decl>) {
        self.display = match from {
            Some(f) if f.link_name == self.link_name && f.name == self.name => f.display.clone(),
            _ => match (&self.link_name, &self.name) {
                (Some(l), _) => demangle(l).into(),
                (None, Some(n)) => match &self.scope {
                    Some(scope) => format!("{scope}::{n}").into(),
                    None => n.clone(),
                },
                (None, None) => "<unknown>".into(),
            },
        };
    }
}

/// Where a DIE is: its unit and its offset there.
type Site = (UnitId, gimli::UnitOffset);

/// Declarations read on behalf of one unit (the *home* unit), with a cache of the DIEs
/// visited, and the home unit's file table extended with the files that declarations in other
/// units name.
pub(crate) struct Declarations<'u, 'a, 'd> {
    units: &'u DebugUnits<'a, 'd>,
    home: UnitId,
    cache: HashMap<(Section, usize), Decl>,
    /// Whether each unit visited is C++ (names its functions in scopes).
    cxx: HashMap<UnitId, bool>,
    files: Vec<String>,
    /// (unit, file index there) -> index in `files`.
    foreign_files: HashMap<(UnitId, u64), u32>,
}

impl<'u, 'a, 'd> Declarations<'u, 'a, 'd> {
    /// Declarations for unit `home`: a unit of the module, whose line program's files are
    /// `files`, or the split unit of one (whose declarations name files of the split unit's
    /// own file table, added to `files` as they are named).
    pub fn new(units: &'u DebugUnits<'a, 'd>, home: UnitId, files: Vec<String>) -> Self {
        Declarations {
            units,
            home,
            cache: HashMap::default(),
            cxx: HashMap::default(),
            files,
            foreign_files: HashMap::default(),
        }
    }

    /// The home unit's files, followed by those that declarations elsewhere named.
    pub fn into_files(self) -> Vec<String> {
        self.files
    }

    /// The declaration of `entry`, a DIE of the home unit.
    pub fn of(&mut self, entry: &gimli::DebuggingInformationEntry<Slice<'d>>) -> Decl {
        self.decl_of(self.home, entry, 0)
    }

    /// The declaration of the DIE at `site`, from the cache or read.
    fn decl_at(&mut self, site: Site, depth: u32) -> Decl {
        let (id, offset) = site;
        let Ok(unit) = self.units.unit(id) else {
            return Decl::default();
        };
        let key = offset
            .to_debug_info_offset(&unit.header)
            .map_or(usize::MAX, |o| o.0);
        if let Some(d) = self.cache.get(&(id.section, key)) {
            return d.clone();
        }
        let decl = match unit.entry(offset) {
            Ok(entry) => self.decl_of(id, &entry, depth),
            Err(_) => Decl::default(),
        };
        self.cache.insert((id.section, key), decl.clone());
        decl
    }

    /// The declaration of `entry`, a DIE of unit `id`, completed from its origin.
    fn decl_of(
        &mut self,
        id: UnitId,
        entry: &gimli::DebuggingInformationEntry<Slice<'d>>,
        depth: u32,
    ) -> Decl {
        let mut d = Decl::default();
        let mut origin = None;
        for attr in entry.attrs() {
            match attr.name() {
                gimli::DW_AT_name => d.name = self.string(id, attr.value()),
                gimli::DW_AT_linkage_name | gimli::DW_AT_MIPS_linkage_name => {
                    d.link_name = self.string(id, attr.value())
                }
                gimli::DW_AT_decl_file => {
                    d.file = attr.udata_value().and_then(|f| self.file(id, f))
                }
                gimli::DW_AT_decl_line => d.line = attr.udata_value().unwrap_or(0) as u32,
                gimli::DW_AT_abstract_origin | gimli::DW_AT_specification => {
                    origin = Some(attr.value())
                }
                _ => {}
            }
        }
        let target = origin.and_then(|v| self.target(id, v));
        let from = target
            .filter(|_| depth < MAX_CHAIN)
            .map(|site| self.decl_at(site, depth + 1));
        match &from {
            Some(from) => {
                d.name = d.name.or_else(|| from.name.clone());
                d.link_name = d.link_name.or_else(|| from.link_name.clone());
                d.scope = from.scope.clone();
                if d.file.is_none() {
                    d.file = from.file;
                    d.line = from.line;
                }
            }
            None if d.link_name.is_none() && d.name.is_some() => {
                d.scope = self.cxx_scope(id, entry.offset())
            }
            None => {}
        }
        d.set_display(from.as_ref());
        d
    }

    /// What qualifies the name of the DIE at `offset` of unit `id`, if that is a C++ unit.
    fn cxx_scope(&mut self, id: UnitId, offset: gimli::UnitOffset) -> Option<Arc<str>> {
        let unit = self.units.unit(id).ok()?;
        let cxx = *self.cxx.entry(id).or_insert_with(|| scopes::is_cxx(unit));
        let dwarf = self.units.dwarf_of(id);
        cxx.then(|| scopes::qualifier(dwarf, unit, offset).ok().flatten())
            .flatten()
            .map(Arc::from)
    }

    /// The DIE a reference attribute of a DIE in unit `id` points to.
    fn target(&self, id: UnitId, value: AttributeValue<Slice<'d>>) -> Option<Site> {
        match value {
            AttributeValue::UnitRef(o) => Some((id, o)),
            AttributeValue::DebugInfoRef(o) => self.units.locate(id.section, o),
            AttributeValue::DebugInfoRefSup(o) => self.units.locate(Section::Sup, o),
            _ => None,
        }
    }

    fn string(&self, id: UnitId, value: AttributeValue<Slice<'d>>) -> Option<Arc<str>> {
        let unit = self.units.unit(id).ok()?;
        let s = self.units.dwarf_of(id).attr_string(unit, value).ok()?;
        Some(Arc::from(s.to_string_lossy().as_ref()))
    }

    /// File `index` of the home unit's file table (`DW_AT_call_file`), as an index into the
    /// files.
    pub fn home_file(&mut self, index: u64) -> Option<u32> {
        self.file(self.home, index)
    }

    /// File `index` of unit `id`'s line program, as an index into the home unit's files.
    fn file(&mut self, id: UnitId, index: u64) -> Option<u32> {
        if id == self.home && self.units.files_are_skeletons(id) {
            return u32::try_from(index).ok();
        }
        if let Some(&f) = self.foreign_files.get(&(id, index)) {
            return Some(f);
        }
        let unit = self.units.unit(id).ok()?;
        let path = lines::unit_file(self.units.dwarf_of(id), unit, index)?;
        self.files.push(path);
        let f = (self.files.len() - 1) as u32;
        self.foreign_files.insert((id, index), f);
        Some(f)
    }
}
