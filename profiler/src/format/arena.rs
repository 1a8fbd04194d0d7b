//! Arena indices as distinct types, so an index into one table cannot be used for another.
//!
//! The tools keep their trees and tables as vectors indexed by `u32` (`profile.db`'s calling
//! context trees and module table here, the database's nodes, modules, files and threads in
//! `correlate`). [`arena_index!`](crate::arena_index) makes one type per table: a node id of a
//! profile's tree is not a node id of the database, and neither is a module id. The types are
//! `#[serde(transparent)]`, so the files they are stored in keep their bytes.

/// Define a `u32` index type for one arena: `Copy`, ordered, hashable, serialized as the bare
/// number (files do not change), displayed as the bare number (messages do not change), with
/// [`index`](#method.index) and [`from_index`](#method.from_index) to go to and from `usize`.
///
/// ```
/// profiler::arena_index! {
///     /// Index of a row in some table.
///     pub struct RowId;
/// }
/// let r = RowId::from_index(3);
/// assert_eq!((r.index(), r.to_string()), (3, "3".to_string()));
/// ```
#[macro_export]
macro_rules! arena_index {
    ($(#[$doc:meta])* $vis:vis struct $name:ident;) => {
        $(#[$doc])*
        #[derive(
            Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord,
            ::serde::Serialize, ::serde::Deserialize,
        )]
        #[serde(transparent)]
        $vis struct $name(pub u32);

        impl $name {
            /// The index as a `usize`, to index the arena with.
            pub fn index(self) -> usize {
                self.0 as usize
            }

            /// The id of the arena's slot `index` (arenas hold fewer than 2^32 entries).
            pub fn from_index(index: usize) -> Self {
                Self(index as u32)
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                ::std::fmt::Display::fmt(&self.0, f)
            }
        }
    };
}
