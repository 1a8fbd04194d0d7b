//! The database's arena indices: one type per table of a [`Database`](crate::Database), each
//! distinct from the profile side's ([`profiler::db::CctNodeId`],
//! [`profiler::db::ProfileModuleId`]) and from a scope tree's ([`structure::FileId`]), so an
//! index cannot reach into the wrong table. Stored as bare `u32`s (`#[serde(transparent)]`).

profiler::arena_index! {
    /// Index of a node in [`Database::nodes`](crate::Database::nodes); node 0 ([`DbNodeId::ROOT`]) is the program
    /// root. Database side: a node of a profile's tree is a [`profiler::db::CctNodeId`].
    pub struct DbNodeId;
}

impl DbNodeId {
    /// The program root, `nodes[0]`.
    pub const ROOT: DbNodeId = DbNodeId(0);
}

profiler::arena_index! {
    /// Index of a module in [`Database::modules`](crate::Database::modules). Database side: the modules of one profile
    /// are numbered by [`profiler::db::ProfileModuleId`].
    pub struct DbModuleId;
}

profiler::arena_index! {
    /// Index of a source file in [`Database::files`](crate::Database::files). Database side: a scope tree numbers its
    /// own files with [`structure::FileId`].
    pub struct DbFileId;
}

profiler::arena_index! {
    /// Index of a thread in [`Database::threads`](crate::Database::threads) (not the OS thread id; see
    /// [`ThreadDesc::tid`](crate::ThreadDesc::tid)).
    pub struct ThreadIdx;
}
