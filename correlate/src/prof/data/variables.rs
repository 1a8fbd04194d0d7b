//! The variables of the modules a profile's data references point into, read on first use per
//! module from their DWARF or symbol tables ([`structure::DataLayout`]), and the answers the
//! data builder asks of them: which static holds an address, which local a frame offset, which
//! variable an allocation's pointer was stored into.

use std::borrow::Cow;
use std::cell::OnceCell;
use std::path::PathBuf;

use profiler::addr::Svma;
use structure::{DataLayout, Receiver, TypeId, TypeShape};

use crate::db::data::{Field, Layout};
use crate::db::database::{ModuleDesc, StructureSource};
use crate::db::ids::DbModuleId;
use crate::prof::cache::StructureCache;

/// A variable found for an address, borrowed from its module's layout. Its type's parts are
/// worked out only when an object is made of it ([`Variables::parts`]), not for every touch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct VarHit<'v> {
    /// Display name: `A`, `counter in f`, `deep::lbuf`.
    pub(crate) name: Cow<'v, str>,
    /// A static's link-time address; a local's offset from the CFA.
    pub(crate) start: u64,
    /// Bytes from the variable's start.
    pub(crate) offset: i64,
    /// Size in bytes.
    pub(crate) size: u64,
    /// Declaration file and line.
    pub(crate) file: Option<&'v str>,
    /// See [`VarHit::file`].
    pub(crate) line: Option<u32>,
    /// Its type, in its module's layout.
    pub(crate) ty: Option<TypeId>,
}

/// The modules' variables, each module read when first asked about (from the structure cache
/// when it has them, else from the binary, then cached).
pub(crate) struct Variables {
    paths: Vec<Option<PathBuf>>,
    keys: Vec<Option<String>>,
    cache: Option<StructureCache>,
    layouts: Vec<OnceCell<Option<DataLayout>>>,
}

impl Variables {
    /// Variables of `modules`, read from their files on this machine (`binaries`, one per
    /// module: a `--bundle` copy or the path it was measured at); modules whose structure
    /// could not be found (unreadable, no symbols) are not read again.
    pub(crate) fn new(
        modules: &[ModuleDesc],
        binaries: &[Option<PathBuf>],
        cache: Option<&StructureCache>,
    ) -> Variables {
        let cache = cache.filter(|c| c.refusal().is_none()).cloned();
        Variables {
            keys: modules
                .iter()
                .zip(binaries)
                .map(|(m, binary)| {
                    cache.as_ref()?;
                    StructureCache::key(binary.as_deref()?, m.build_id.as_deref(), None)
                })
                .collect(),
            cache,
            paths: modules
                .iter()
                .zip(binaries)
                .map(|(m, binary)| {
                    let readable = !matches!(m.structure, StructureSource::None(_));
                    readable.then(|| binary.clone()).flatten()
                })
                .collect(),
            layouts: modules.iter().map(|_| OnceCell::new()).collect(),
        }
    }

    fn layout(&self, module: DbModuleId) -> Option<&DataLayout> {
        let i = module.index();
        self.layouts[i]
            .get_or_init(|| {
                let path = self.paths[i].as_deref()?;
                let cached = self.cache.as_ref().zip(self.keys[i].as_deref());
                if let Some(layout) = cached.and_then(|(c, k)| c.load_data(k)) {
                    return Some(layout);
                }
                let layout = DataLayout::read(path).ok()?;
                if let Some((cache, key)) = cached {
                    // A cache that cannot be written only costs the next run the reading.
                    let _ = cache.store_data(key, &layout);
                }
                Some(layout)
            })
            .as_ref()
    }

    /// The static variable of `module` holding link-time address `addr`.
    pub(crate) fn static_at(&self, module: DbModuleId, addr: Svma) -> Option<VarHit<'_>> {
        let layout = self.layout(module)?;
        let (var, offset) = layout.static_at(addr)?;
        Some(VarHit {
            name: Cow::Borrowed(&var.name),
            start: var.addr.0,
            offset: offset as i64,
            size: var.size,
            file: var.file.as_deref(),
            line: (var.line != 0).then_some(var.line),
            ty: var.ty,
        })
    }

    /// The local of the function executing at `pc` in `module` whose slot covers
    /// `cfa_offset`, named `function::variable`.
    pub(crate) fn local_at(
        &self,
        module: DbModuleId,
        pc: Svma,
        cfa_offset: i64,
    ) -> Option<VarHit<'_>> {
        let layout = self.layout(module)?;
        let hit = layout.local_at(pc, cfa_offset)?;
        Some(VarHit {
            name: Cow::Owned(format!("{}::{}", hit.scope, hit.name)),
            start: hit.start as u64,
            offset: hit.offset as i64,
            size: hit.size,
            file: None,
            line: None,
            ty: hit.ty,
        })
    }

    /// The parts of type `ty` of `module`: a record's members, an array's elements (and their
    /// members).
    pub(crate) fn parts(&self, module: DbModuleId, ty: TypeId) -> Option<Layout> {
        parts(self.layout(module)?, ty)
    }

    /// For each return address of an allocation call in `module`, the variable the returned
    /// pointer was stored into (`grid`, `p in main`), where the code says so exactly.
    pub(crate) fn receivers(&self, module: DbModuleId, returns: &[Svma]) -> Vec<Option<String>> {
        let found = self.layout(module).and_then(|layout| {
            let path = self.paths[module.index()].as_deref()?;
            layout.receivers(path, returns).ok()
        });
        match found {
            Some(found) => found
                .into_iter()
                .map(|r| {
                    r.map(|r| match r {
                        Receiver::Static(name) => name,
                        Receiver::Local { name, function } => format!("{name} in {function}"),
                    })
                })
                .collect(),
            None => vec![None; returns.len()],
        }
    }
}

/// The parts of type `ty`: a record's members, an array's elements (and their members).
fn parts(layout: &DataLayout, ty: TypeId) -> Option<Layout> {
    match layout.type_shape(ty)? {
        TypeShape::Record { members, .. } => Some(Layout::Fields(fields(layout, members, 0, ""))),
        TypeShape::Array {
            elem,
            elem_size,
            count,
        } => {
            let fields = match layout.type_shape(*elem) {
                Some(TypeShape::Record { members, .. }) => fields(layout, members, 0, ""),
                _ => Vec::new(),
            };
            Some(Layout::Elements {
                size: *elem_size,
                count: *count,
                fields,
            })
        }
        _ => None,
    }
}

/// A record's members as fields at `base`, anonymous members' own members flattened into it.
fn fields(
    layout: &DataLayout,
    members: &[structure::Member],
    base: u64,
    prefix: &str,
) -> Vec<Field> {
    let mut out = Vec::new();
    for m in members {
        let offset = base + m.offset;
        if m.name.is_empty() {
            if let Some(TypeShape::Record { members, .. }) = layout.type_shape(m.ty) {
                out.extend(fields(layout, members, offset, prefix));
                continue;
            }
        }
        out.push(Field {
            name: format!("{prefix}{}", m.name),
            offset,
            size: m.size,
        });
    }
    out
}
