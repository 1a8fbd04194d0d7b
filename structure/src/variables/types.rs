//! Type layouts: an arena of [`TypeShape`]s keyed by [`TypeId`], and the walk from a byte
//! offset in a value to the member or array element holding it ([`Part`]).
//!
//! A shape records only what naming a data address needs: sizes, member offsets, element
//! sizes and counts, and names to print. Pointers do not refer to their pointee (a pointer
//! is 8 bytes whatever it points to), so shapes form a DAG, never a cycle, and identical
//! shapes read from different compilation units are stored once (hash-consed).

use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// A type in a [`crate::DataLayout`]'s arena (an index; meaningful only with the layout that
/// gave it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TypeId(pub u32);

/// The layout of one type, as far as naming the bytes of a value of that type needs.
/// Typedefs and `const`/`volatile` qualifiers are looked through: a shape is what they name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TypeShape {
    /// A `struct` or `class` (`union: false`), or a `union`: members at byte offsets.
    Record {
        /// The tag or typedef name (empty for an anonymous one).
        name: String,
        /// Whether the members overlay each other.
        union: bool,
        /// `DW_AT_byte_size`.
        size: u64,
        /// The data members (and base classes) in declaration order.
        members: Vec<Member>,
    },
    /// An array; one of several dimensions is an array of arrays (`double[10][20]` is 10
    /// elements of `double[20]`).
    Array {
        /// The element type.
        elem: TypeId,
        /// Bytes per element.
        elem_size: u64,
        /// Elements (0 when unknown: a flexible or variable-length array).
        count: u64,
    },
    /// A base type or enumeration.
    Scalar {
        /// Its name (`long int`, `double`, an enumeration's name).
        name: String,
        /// Its size in bytes.
        size: u64,
    },
    /// A pointer or reference.
    Pointer {
        /// How it prints (`struct node *`, `char const *`).
        name: String,
        /// Its size in bytes.
        size: u64,
    },
    /// Anything else: functions, incomplete types, what could not be read.
    Other {
        /// Its name, if it has one.
        name: String,
        /// Its size in bytes (0 when unknown).
        size: u64,
    },
}

/// A data member of a [`TypeShape::Record`] (a base class is a member named after it).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Member {
    /// Its name (empty for an anonymous struct or union member, whose members are reached
    /// through it without a name of their own).
    pub name: String,
    /// Byte offset in the enclosing record (`DW_AT_data_member_location`; for a bit-field,
    /// the byte holding its first bit).
    pub offset: u64,
    /// Bytes it covers (for a bit-field, the bytes its bits touch).
    pub size: u64,
    /// Its type.
    pub ty: TypeId,
}

/// One array step on the way to a [`Part`]: which element, of how many, of what size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Element {
    /// The element's index.
    pub index: u64,
    /// Bytes per element.
    pub elem_size: u64,
    /// Elements in the array.
    pub count: u64,
}

/// The innermost member or element of a value holding one byte offset, as
/// [`crate::DataLayout::part_at`] finds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Part {
    /// How to write it after the value's name: `cold`, `inner.b`, `hot[5]`, `cells[12].hot`,
    /// `[3][4]` for an element of an array value.
    pub path: String,
    /// Where it starts, in bytes from the start of the value.
    pub offset: u64,
    /// Its size in bytes.
    pub size: u64,
    /// Its type.
    pub ty: TypeId,
    /// Every array step of `path`, outermost first (empty without one).
    pub elements: Vec<Element>,
}

/// How many members and elements [`TypeArena::part_at`] descends through at most.
const MAX_PART_DEPTH: usize = 32;

/// The shapes of a module's types, each stored once.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct TypeArena {
    shapes: Vec<TypeShape>,
}

impl TypeArena {
    /// The shape of `ty`, if it is in this arena.
    pub(crate) fn get(&self, ty: TypeId) -> Option<&TypeShape> {
        self.shapes.get(ty.0 as usize)
    }

    /// The size in bytes of a value of type `ty` (0 if unknown).
    pub(crate) fn size_of(&self, ty: TypeId) -> u64 {
        self.get(ty).map_or(0, TypeShape::size)
    }

    /// How `ty` prints: its name, or for an array its element type's with the dimensions
    /// (`double[10][20]`).
    pub(crate) fn name_of(&self, ty: TypeId) -> String {
        let mut dims = String::new();
        let mut ty = ty;
        for _ in 0..MAX_PART_DEPTH {
            match self.get(ty) {
                Some(TypeShape::Array { elem, count, .. }) => {
                    dims.push_str(&format!("[{count}]"));
                    ty = *elem;
                }
                Some(shape) => return format!("{}{dims}", shape.name()),
                None => break,
            }
        }
        format!("?{dims}")
    }

    /// The part of a value of type `ty` holding byte `offset`: down through members and array
    /// elements to a scalar, a pointer, or where the way down is not unique (a union whose
    /// members overlap there). `None` when `offset` is outside the value or the type has no
    /// parts there (a scalar, or padding).
    pub(crate) fn part_at(&self, ty: TypeId, offset: u64) -> Option<Part> {
        let mut part = Part {
            path: String::new(),
            offset: 0,
            size: self.size_of(ty),
            ty,
            elements: Vec::new(),
        };
        let mut within = offset;
        if within >= part.size {
            return None;
        }
        let mut steps = 0;
        while steps < MAX_PART_DEPTH {
            let Some(step) = self.step(part.ty, within) else {
                break;
            };
            steps += 1;
            match step {
                Step::Member(m) => {
                    if !m.name.is_empty() {
                        if !part.path.is_empty() {
                            part.path.push('.');
                        }
                        part.path.push_str(&m.name);
                    }
                    within -= m.offset;
                    part.offset += m.offset;
                    part.size = m.size;
                    part.ty = m.ty;
                }
                Step::Element(e, elem) => {
                    part.path.push_str(&format!("[{}]", e.index));
                    within -= e.index * e.elem_size;
                    part.offset += e.index * e.elem_size;
                    part.size = e.elem_size;
                    part.ty = elem;
                    part.elements.push(e);
                }
            }
        }
        (steps > 0).then_some(part)
    }

    /// One step down from a value of type `ty` toward byte `within` of it.
    fn step(&self, ty: TypeId, within: u64) -> Option<Step<'_>> {
        match self.get(ty)? {
            TypeShape::Record { members, .. } => {
                let mut covering = members
                    .iter()
                    .filter(|m| m.offset <= within && within - m.offset < m.size);
                let first = covering.next()?;
                // Overlapping members (a union's, bit-fields sharing bytes): no single answer.
                covering.next().is_none().then_some(Step::Member(first))
            }
            &TypeShape::Array {
                elem,
                elem_size,
                count,
            } => {
                let index = within.checked_div(elem_size)?;
                (index < count).then_some(Step::Element(
                    Element {
                        index,
                        elem_size,
                        count,
                    },
                    elem,
                ))
            }
            _ => None,
        }
    }

    /// Add the shapes of `other` (whose member and element types refer to `other`'s own
    /// earlier shapes), storing each shape once; returns where each of `other`'s ids went.
    pub(crate) fn absorb(
        &mut self,
        other: Vec<TypeShape>,
        index: &mut HashMap<TypeShape, TypeId>,
    ) -> Vec<TypeId> {
        let mut map: Vec<TypeId> = Vec::with_capacity(other.len());
        for mut shape in other {
            shape.remap(|t| map.get(t.0 as usize).copied().unwrap_or(t));
            let id = *index.entry(shape).or_insert_with_key(|shape| {
                self.shapes.push(shape.clone());
                TypeId((self.shapes.len() - 1) as u32)
            });
            map.push(id);
        }
        map
    }

    /// Number of shapes.
    pub(crate) fn len(&self) -> usize {
        self.shapes.len()
    }
}

/// One step of [`TypeArena::part_at`].
enum Step<'a> {
    Member(&'a Member),
    Element(Element, TypeId),
}

impl TypeShape {
    /// The size in bytes of a value of this type (0 if unknown).
    pub fn size(&self) -> u64 {
        match self {
            TypeShape::Record { size, .. }
            | TypeShape::Scalar { size, .. }
            | TypeShape::Pointer { size, .. }
            | TypeShape::Other { size, .. } => *size,
            TypeShape::Array {
                elem_size, count, ..
            } => elem_size.saturating_mul(*count),
        }
    }

    /// Its name (empty for an anonymous record and for an array, which
    /// [`crate::DataLayout::type_name`] spells from its element type).
    pub fn name(&self) -> &str {
        match self {
            TypeShape::Record { name, .. }
            | TypeShape::Scalar { name, .. }
            | TypeShape::Pointer { name, .. }
            | TypeShape::Other { name, .. } => name,
            TypeShape::Array { .. } => "",
        }
    }

    /// Rewrite the type ids this shape refers to.
    fn remap(&mut self, f: impl Fn(TypeId) -> TypeId) {
        match self {
            TypeShape::Record { members, .. } => {
                for m in members {
                    m.ty = f(m.ty);
                }
            }
            TypeShape::Array { elem, .. } => *elem = f(*elem),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scalar(name: &str, size: u64) -> TypeShape {
        TypeShape::Scalar {
            name: name.into(),
            size,
        }
    }

    fn member(name: &str, offset: u64, size: u64, ty: u32) -> Member {
        Member {
            name: name.into(),
            offset,
            size,
            ty: TypeId(ty),
        }
    }

    /// `struct split { long hot[64]; long cold; }` and `struct cell { int hot; int cold;
    /// double w; } cells[100]`, as a unit's arena holds them (children first).
    fn arena() -> (TypeArena, TypeId, TypeId) {
        let shapes = vec![
            scalar("long int", 8),
            TypeShape::Array {
                elem: TypeId(0),
                elem_size: 8,
                count: 64,
            },
            TypeShape::Record {
                name: "split".into(),
                union: false,
                size: 520,
                members: vec![member("hot", 0, 512, 1), member("cold", 512, 8, 0)],
            },
            scalar("int", 4),
            scalar("double", 8),
            TypeShape::Record {
                name: "cell".into(),
                union: false,
                size: 16,
                members: vec![
                    member("hot", 0, 4, 3),
                    member("cold", 4, 4, 3),
                    member("w", 8, 8, 4),
                ],
            },
            TypeShape::Array {
                elem: TypeId(5),
                elem_size: 16,
                count: 100,
            },
        ];
        let mut arena = TypeArena::default();
        let map = arena.absorb(shapes, &mut HashMap::new());
        (arena, map[2], map[6])
    }

    #[test]
    fn members_and_elements_by_offset() {
        let (arena, split, cells) = arena();
        let cold = arena.part_at(split, 512).unwrap();
        assert_eq!(
            (cold.path.as_str(), cold.offset, cold.size),
            ("cold", 512, 8)
        );
        let hot = arena.part_at(split, 8 * 5 + 3).unwrap();
        assert_eq!((hot.path.as_str(), hot.offset, hot.size), ("hot[5]", 40, 8));
        assert_eq!(
            hot.elements,
            vec![Element {
                index: 5,
                elem_size: 8,
                count: 64
            }]
        );
        let cell = arena.part_at(cells, 12 * 16 + 5).unwrap();
        assert_eq!((cell.path.as_str(), cell.offset), ("[12].cold", 196));
        assert_eq!(arena.part_at(split, 520), None, "past the end");
        assert_eq!(arena.name_of(cells), "cell[100]");
    }

    #[test]
    fn overlapping_union_members_stop_the_descent() {
        let shapes = vec![
            scalar("long int", 8),
            scalar("double", 8),
            scalar("char", 1),
            TypeShape::Array {
                elem: TypeId(2),
                elem_size: 1,
                count: 16,
            },
            TypeShape::Record {
                name: "either".into(),
                union: true,
                size: 16,
                members: vec![
                    member("l", 0, 8, 0),
                    member("d", 0, 8, 1),
                    member("bytes", 0, 16, 3),
                ],
            },
        ];
        let mut arena = TypeArena::default();
        let map = arena.absorb(shapes, &mut HashMap::new());
        assert_eq!(arena.part_at(map[4], 3), None, "three members hold byte 3");
        let tail = arena.part_at(map[4], 12).unwrap();
        assert_eq!(tail.path, "bytes[12]", "only `bytes` reaches byte 12");
    }

    #[test]
    fn identical_shapes_are_stored_once() {
        let (mut arena, split, _) = arena();
        let before = arena.len();
        let again = arena.absorb(
            vec![
                scalar("long int", 8),
                TypeShape::Array {
                    elem: TypeId(0),
                    elem_size: 8,
                    count: 64,
                },
            ],
            &mut arena_index(&arena),
        );
        assert_eq!(arena.len(), before);
        assert_eq!(arena.get(again[1]), arena.get(TypeId(1)));
        assert!(arena.get(split).is_some());
    }

    fn arena_index(arena: &TypeArena) -> HashMap<TypeShape, TypeId> {
        (0..arena.len() as u32)
            .map(|i| (arena.get(TypeId(i)).unwrap().clone(), TypeId(i)))
            .collect()
    }
}
