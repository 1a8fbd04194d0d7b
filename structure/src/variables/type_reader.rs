//! Reading type DIEs into [`TypeShape`]s, on behalf of one unit: only the types its kept
//! variables name, each DIE read once (typedefs and qualifiers are looked through), wherever
//! the reference leads (the unit, another unit, the supplementary file).
//!
//! Type units (`DW_FORM_ref_sig8`, `-fdebug-types-section`) are followed into the module's
//! `.debug_info` (DWARF 5), its `.debug_types` (DWARF 4) and, with split DWARF, into the `.dwo`
//! file of the unit naming them (not into a `.dwp` package's type units).

use super::types::{Member, TypeId, TypeShape};
use crate::dwarf::{DebugUnits, Section, Slice, UnitId};
use gimli::AttributeValue;
use std::collections::{HashMap, HashSet};

/// A DIE: its unit and its offset there.
pub(crate) type Site = (UnitId, gimli::UnitOffset);

/// How deep type references are followed (a deeper chain is corrupt or hostile DWARF).
const MAX_DEPTH: u32 = 64;

/// The DIE that reference attribute `value` of a DIE in unit `id` points to.
pub(crate) fn reference(
    units: &DebugUnits<'_, '_>,
    id: UnitId,
    value: AttributeValue<Slice<'_>>,
) -> Option<Site> {
    match value {
        AttributeValue::UnitRef(o) => Some((id, o)),
        AttributeValue::DebugInfoRef(o) => units.locate(id.section, o),
        AttributeValue::DebugInfoRefSup(o) => units.locate(Section::Sup, o),
        AttributeValue::DebugTypesRef(signature) => units.type_unit(id, signature),
        _ => None,
    }
}

/// The types one unit's variables name, read into a unit-local arena whose shapes refer only
/// to earlier shapes (children first).
pub(crate) struct TypeReader<'u, 'a, 'd> {
    units: &'u DebugUnits<'a, 'd>,
    cache: HashMap<Site, TypeId>,
    open: HashSet<Site>,
    shapes: Vec<TypeShape>,
}

impl<'u, 'a, 'd> TypeReader<'u, 'a, 'd> {
    /// An empty arena reading from `units`.
    pub(crate) fn new(units: &'u DebugUnits<'a, 'd>) -> Self {
        TypeReader {
            units,
            cache: HashMap::new(),
            open: HashSet::new(),
            shapes: Vec::new(),
        }
    }

    /// The shapes read, children before the shapes naming them.
    pub(crate) fn into_shapes(self) -> Vec<TypeShape> {
        self.shapes
    }

    /// The size of `ty`, a type of this arena.
    pub(crate) fn size_of(&self, ty: TypeId) -> u64 {
        self.shapes.get(ty.0 as usize).map_or(0, TypeShape::size)
    }

    /// The type DIE at `site`, read (once).
    pub(crate) fn read(&mut self, site: Site) -> TypeId {
        self.read_at(site, 0)
    }

    fn read_at(&mut self, site: Site, depth: u32) -> TypeId {
        if let Some(&id) = self.cache.get(&site) {
            return id;
        }
        if depth > MAX_DEPTH || !self.open.insert(site) {
            // A reference cycle, or a chain too deep: corrupt DWARF.
            return self.push(unknown());
        }
        let id = match self.entry(site) {
            Some(entry) => self.read_entry(site.0, &entry, depth),
            None => self.push(unknown()),
        };
        self.open.remove(&site);
        self.cache.insert(site, id);
        id
    }

    fn push(&mut self, shape: TypeShape) -> TypeId {
        self.shapes.push(shape);
        TypeId((self.shapes.len() - 1) as u32)
    }

    fn entry(&self, (id, offset): Site) -> Option<gimli::DebuggingInformationEntry<Slice<'d>>> {
        self.units.unit(id).ok()?.entry(offset).ok()
    }

    fn string(&self, id: UnitId, value: Option<AttributeValue<Slice<'d>>>) -> Option<String> {
        let unit = self.units.unit(id).ok()?;
        let s = self.units.dwarf_of(id).attr_string(unit, value?).ok()?;
        Some(s.to_string_lossy().into_owned())
    }

    /// The type `entry` (a DIE of unit `id`) names with `DW_AT_type`.
    fn target(
        &self,
        id: UnitId,
        entry: &gimli::DebuggingInformationEntry<Slice<'d>>,
    ) -> Option<Site> {
        reference(self.units, id, entry.attr_value(gimli::DW_AT_type)?)
    }

    fn read_entry(
        &mut self,
        id: UnitId,
        entry: &gimli::DebuggingInformationEntry<Slice<'d>>,
        depth: u32,
    ) -> TypeId {
        let name = self.string(id, entry.attr_value(gimli::DW_AT_name));
        let size = entry
            .attr(gimli::DW_AT_byte_size)
            .and_then(|a| a.udata_value());
        let target = self.target(id, entry);
        let shape = match entry.tag() {
            gimli::DW_TAG_typedef => {
                let Some(t) = target else {
                    return self.push(void());
                };
                let ty = self.read_at(t, depth + 1);
                // An anonymous struct is known by its typedef's name.
                return match (&self.shapes[ty.0 as usize], name) {
                    (TypeShape::Record { name: n, .. }, Some(alias)) if n.is_empty() => {
                        let mut named = self.shapes[ty.0 as usize].clone();
                        if let TypeShape::Record { name, .. } = &mut named {
                            *name = alias;
                        }
                        self.push(named)
                    }
                    _ => ty,
                };
            }
            gimli::DW_TAG_const_type
            | gimli::DW_TAG_volatile_type
            | gimli::DW_TAG_restrict_type
            | gimli::DW_TAG_atomic_type
            | gimli::DW_TAG_immutable_type
            | gimli::DW_TAG_packed_type
            | gimli::DW_TAG_shared_type => {
                return match target {
                    Some(t) => self.read_at(t, depth + 1),
                    None => self.push(void()),
                };
            }
            gimli::DW_TAG_base_type => TypeShape::Scalar {
                name: name.unwrap_or_default(),
                size: size.unwrap_or(0),
            },
            gimli::DW_TAG_enumeration_type => TypeShape::Scalar {
                name: format!("enum {}", name.unwrap_or_default()),
                size: size.unwrap_or(0),
            },
            gimli::DW_TAG_pointer_type
            | gimli::DW_TAG_reference_type
            | gimli::DW_TAG_rvalue_reference_type => {
                let sigil = match entry.tag() {
                    gimli::DW_TAG_pointer_type => "*",
                    gimli::DW_TAG_reference_type => "&",
                    _ => "&&",
                };
                TypeShape::Pointer {
                    name: format!("{} {sigil}", self.name_of(target, 0)),
                    size: size.unwrap_or(8),
                }
            }
            gimli::DW_TAG_structure_type | gimli::DW_TAG_class_type | gimli::DW_TAG_union_type => {
                let declaration =
                    entry.attr_value(gimli::DW_AT_declaration) == Some(AttributeValue::Flag(true));
                if declaration {
                    TypeShape::Other {
                        name: name.unwrap_or_default(),
                        size: 0,
                    }
                } else {
                    let union = entry.tag() == gimli::DW_TAG_union_type;
                    TypeShape::Record {
                        members: self.members((id, entry.offset()), depth),
                        name: name.unwrap_or_default(),
                        union,
                        size: size.unwrap_or(0),
                    }
                }
            }
            gimli::DW_TAG_array_type => {
                let elem = target.map(|t| self.read_at(t, depth + 1));
                match elem {
                    Some(elem) => return self.array(elem, (id, entry.offset())),
                    None => unknown(),
                }
            }
            _ => TypeShape::Other {
                name: name.unwrap_or_default(),
                size: size.unwrap_or(0),
            },
        };
        self.push(shape)
    }

    /// The data members (and base classes) of the record at `site`.
    fn members(&mut self, site: Site, depth: u32) -> Vec<Member> {
        let mut out = Vec::new();
        for child in self.children(site) {
            let Some(entry) = self.entry(child) else {
                continue;
            };
            let is_member = match entry.tag() {
                gimli::DW_TAG_member => true,
                gimli::DW_TAG_inheritance => false,
                _ => continue,
            };
            // A static member is declared in the class and defined outside it.
            let flag = |at| entry.attr_value(at) == Some(AttributeValue::Flag(true));
            if flag(gimli::DW_AT_declaration) || flag(gimli::DW_AT_external) {
                continue;
            }
            let Some(t) = self.target(site.0, &entry) else {
                continue;
            };
            let ty = self.read_at(t, depth + 1);
            let name = match is_member {
                true => self
                    .string(site.0, entry.attr_value(gimli::DW_AT_name))
                    .unwrap_or_default(),
                false => self.name_of(Some(t), 0),
            };
            let (offset, size) = match member_offset(&entry) {
                Some(Placement::Bytes(offset)) => (offset, self.size_of(ty)),
                Some(Placement::Bits { first, count }) => {
                    (first / 8, (first % 8).saturating_add(count).div_ceil(8))
                }
                None => continue,
            };
            out.push(Member {
                name,
                offset,
                size,
                ty,
            });
        }
        out
    }

    /// The array of `elem` whose dimensions are the subranges of the DIE at `site`; the
    /// last dimension varies fastest (C order).
    fn array(&mut self, elem: TypeId, site: Site) -> TypeId {
        let counts: Vec<u64> = self
            .children(site)
            .into_iter()
            .filter_map(|child| self.entry(child))
            .filter(|e| e.tag() == gimli::DW_TAG_subrange_type)
            .map(|e| subrange_count(&e))
            .collect();
        let mut ty = elem;
        for &count in counts.iter().rev().chain(counts.is_empty().then_some(&0)) {
            let elem_size = self.size_of(ty);
            ty = self.push(TypeShape::Array {
                elem: ty,
                elem_size,
                count,
            });
        }
        ty
    }

    /// The sites of the children of the DIE at `site` (empty if unreadable).
    fn children(&self, (id, offset): Site) -> Vec<Site> {
        let mut out = Vec::new();
        let Ok(unit) = self.units.unit(id) else {
            return out;
        };
        let Ok(mut tree) = unit.entries_tree(Some(offset)) else {
            return out;
        };
        let Ok(root) = tree.root() else {
            return out;
        };
        let mut children = root.children();
        while let Ok(Some(child)) = children.next() {
            out.push((id, child.entry().offset()));
        }
        out
    }

    /// How the type at `site` prints (`struct node *` prints as `node *`), without reading
    /// its shape.
    fn name_of(&self, site: Option<Site>, depth: u32) -> String {
        let Some(site) = site else {
            return "void".to_string();
        };
        let Some(entry) = self.entry(site).filter(|_| depth < 8) else {
            return "?".to_string();
        };
        let inner = || self.name_of(self.target(site.0, &entry), depth + 1);
        match entry.tag() {
            gimli::DW_TAG_pointer_type => format!("{} *", inner()),
            gimli::DW_TAG_reference_type => format!("{} &", inner()),
            gimli::DW_TAG_rvalue_reference_type => format!("{} &&", inner()),
            gimli::DW_TAG_const_type => format!("{} const", inner()),
            gimli::DW_TAG_volatile_type => format!("{} volatile", inner()),
            gimli::DW_TAG_array_type => format!("{}[]", inner()),
            gimli::DW_TAG_subroutine_type => "function".to_string(),
            gimli::DW_TAG_restrict_type | gimli::DW_TAG_atomic_type => inner(),
            _ => self
                .string(site.0, entry.attr_value(gimli::DW_AT_name))
                .unwrap_or_else(|| "<anonymous>".to_string()),
        }
    }
}

/// Where a member lies in its record.
enum Placement {
    Bytes(u64),
    Bits { first: u64, count: u64 },
}

/// A member's placement: `DW_AT_data_member_location` (a constant, or the DWARF 2 form
/// `DW_OP_plus_uconst n`; absent means 0, as for a union's members), and for a bit-field
/// `DW_AT_data_bit_offset` (DWARF 4 and later) or `DW_AT_bit_offset` (DWARF 2 and 3: from the
/// most significant bit of a storage unit of `DW_AT_byte_size` bytes, little-endian here).
/// `None` when it cannot be known (a location computed from the object: a virtual base).
fn member_offset(entry: &gimli::DebuggingInformationEntry<Slice<'_>>) -> Option<Placement> {
    let udata = |at| entry.attr(at).and_then(|a| a.udata_value());
    let byte = match entry.attr_value(gimli::DW_AT_data_member_location) {
        Some(AttributeValue::Exprloc(expr)) => plus_uconst(expr)?,
        Some(v) => v.udata_value()?,
        None => 0,
    };
    let Some(count) = udata(gimli::DW_AT_bit_size) else {
        return Some(Placement::Bytes(byte));
    };
    if let Some(first) = udata(gimli::DW_AT_data_bit_offset) {
        return Some(Placement::Bits { first, count });
    }
    let unit_bits = udata(gimli::DW_AT_byte_size)?.checked_mul(8)?;
    let from_msb = udata(gimli::DW_AT_bit_offset).unwrap_or(0);
    let first = byte
        .checked_mul(8)?
        .checked_add(unit_bits)?
        .checked_sub(from_msb.checked_add(count)?)?;
    Some(Placement::Bits { first, count })
}

/// `n` from the one-operation expression `DW_OP_plus_uconst n`.
fn plus_uconst(expr: gimli::Expression<Slice<'_>>) -> Option<u64> {
    let mut r = expr.0;
    use gimli::Reader;
    (r.read_u8().ok()? == gimli::DW_OP_plus_uconst.0)
        .then(|| r.read_uleb128().ok())
        .flatten()
        .filter(|_| r.is_empty())
}

/// The element count of a `DW_TAG_subrange_type`: `DW_AT_count`, else `DW_AT_upper_bound -
/// DW_AT_lower_bound + 1` (lower bound 0 if absent); 0 when not a constant (a flexible or
/// variable-length array).
fn subrange_count(entry: &gimli::DebuggingInformationEntry<Slice<'_>>) -> u64 {
    let constant = |at| match entry.attr_value(at)? {
        AttributeValue::Sdata(v) => Some(v),
        AttributeValue::Udata(v) => i64::try_from(v).ok(),
        AttributeValue::Data1(v) => Some(i64::from(v)),
        AttributeValue::Data2(v) => Some(i64::from(v)),
        AttributeValue::Data4(v) => Some(i64::from(v as i32)),
        AttributeValue::Data8(v) => Some(v as i64),
        _ => None,
    };
    if let Some(count) = constant(gimli::DW_AT_count) {
        return u64::try_from(count).unwrap_or(0);
    }
    let lower = constant(gimli::DW_AT_lower_bound).unwrap_or(0);
    match constant(gimli::DW_AT_upper_bound) {
        Some(upper) => upper
            .checked_sub(lower)
            .and_then(|d| u64::try_from(d).ok())
            .map_or(0, |d| d.saturating_add(1)),
        None => 0,
    }
}

fn unknown() -> TypeShape {
    TypeShape::Other {
        name: "?".to_string(),
        size: 0,
    }
}

fn void() -> TypeShape {
    TypeShape::Other {
        name: "void".to_string(),
        size: 0,
    }
}
