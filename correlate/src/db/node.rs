//! The enriched calling-context tree's node model: what a node stands for ([`NodeKind`]), what
//! it holds ([`Node`], with its self costs per thread, [`NodeCosts`]), the identity under which
//! siblings merge ([`NodeKey`]) and the index that merges them while a tree is built
//! ([`ChildIndex`]). The tree itself is [`Database::nodes`](crate::Database::nodes).

use fxhash::FxHashMap;
use serde::{Deserialize, Serialize};

use crate::db::ids::{DbFileId, DbModuleId, DbNodeId};
use crate::db::node_costs::NodeCosts;

/// What a node of the enriched tree (or of a view tree) stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum NodeKind {
    /// `<program root>`: the database's root (threads are merged under it).
    Root,
    /// `<partial call paths>`: paths that could not be unwound to the thread's root.
    Partial,
    /// A procedure frame (an activation of a function).
    Procedure,
    /// An inlined frame: code of `name` inlined into its parent at `call_file:call_line`.
    Inlined,
    /// A loop; `line` is its header's begin line.
    Loop,
    /// A source line (statement); also the call site under which callees hang.
    Statement,
    /// `<unknown procedure> 0xADDR [module]`: an address no structure covers.
    Unknown,
    /// `<kernel>`: time in the kernel on behalf of the context above.
    Kernel,
    /// Flat view only: a load module.
    Module,
    /// Flat view only: a source file.
    File,
    /// Data views only: a data object (a variable, heap blocks of one allocation context, a
    /// region of memory).
    DataObject,
}

impl NodeKind {
    /// Whether the node is a frame a call chain is made of: a procedure activation, an inlined
    /// frame, an unknown procedure or the kernel. Loops and statements are not frames.
    pub fn is_frame(self) -> bool {
        matches!(
            self,
            NodeKind::Procedure | NodeKind::Inlined | NodeKind::Unknown | NodeKind::Kernel
        )
    }

    /// Whether the node starts a new activation (a call edge leads to it): procedure frames,
    /// unknown procedures and the kernel. Exclusive costs never cross such an edge.
    pub fn is_activation(self) -> bool {
        matches!(
            self,
            NodeKind::Procedure | NodeKind::Unknown | NodeKind::Kernel
        )
    }
}

/// One node of the enriched calling-context tree.
///
/// `name` is the raw name: the procedure's (demangled) name for procedure and inlined frames,
/// the full label for `Root`, `Partial`, `Unknown` and `Kernel`, empty for loops and statements.
/// [`Database::label`](crate::Database::label) gives the hpcviewer-style display label.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    /// Parent node (the root is its own parent).
    pub parent: DbNodeId,
    /// Children, in insertion order (views sort them).
    pub children: Vec<DbNodeId>,
    /// What the node stands for.
    pub kind: NodeKind,
    /// Raw name (see the type's documentation).
    pub name: String,
    /// The load module the node's code is in.
    pub module: Option<DbModuleId>,
    /// Source file: of the procedure (its declaration), the inlined callee, the loop or the line.
    pub file: Option<DbFileId>,
    /// Begin line (declaration line of a procedure, header line of a loop, the line itself).
    pub line: Option<u32>,
    /// End line, where structure knows it.
    pub end_line: Option<u32>,
    /// For procedure and inlined frames: the call site in the parent (file).
    pub call_file: Option<DbFileId>,
    /// For procedure and inlined frames: the call site in the parent (line).
    pub call_line: Option<u32>,
    /// Costs sampled exactly at this node, per thread (only threads with a sample here).
    pub costs: NodeCosts,
}

/// The identity under which sibling nodes merge: same kind, name, module and source position.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NodeKey {
    /// Kind.
    pub kind: NodeKind,
    /// Raw name.
    pub name: String,
    /// Module.
    pub module: Option<DbModuleId>,
    /// File.
    pub file: Option<DbFileId>,
    /// Begin line.
    pub line: Option<u32>,
    /// End line.
    pub end_line: Option<u32>,
    /// Call-site file.
    pub call_file: Option<DbFileId>,
    /// Call-site line.
    pub call_line: Option<u32>,
}

impl NodeKey {
    /// The key of a node known only by kind and name (the root, `<partial call paths>`,
    /// `<kernel>`, unknown procedures): no module or source position.
    pub fn pseudo(kind: NodeKind, name: impl Into<String>) -> NodeKey {
        NodeKey {
            kind,
            name: name.into(),
            module: None,
            file: None,
            line: None,
            end_line: None,
            call_file: None,
            call_line: None,
        }
    }
}

impl Node {
    /// The node's identity (the inverse of [`Node::from_key`]), to insert a copy of it in
    /// another tree.
    pub(crate) fn key(&self) -> NodeKey {
        NodeKey {
            kind: self.kind,
            name: self.name.clone(),
            module: self.module,
            file: self.file,
            line: self.line,
            end_line: self.end_line,
            call_file: self.call_file,
            call_line: self.call_line,
        }
    }

    /// A node below `parent` with identity `key` and no costs yet.
    pub(crate) fn from_key(parent: DbNodeId, key: NodeKey) -> Node {
        Node {
            parent,
            children: Vec::new(),
            kind: key.kind,
            name: key.name,
            module: key.module,
            file: key.file,
            line: key.line,
            end_line: key.end_line,
            call_file: key.call_file,
            call_line: key.call_line,
            costs: NodeCosts::default(),
        }
    }
}

/// The (parent, key) -> child map used while building a tree, so siblings that land in the
/// same scope merge. Not stored in the file.
#[derive(Debug, Default)]
pub struct ChildIndex {
    pub(crate) map: FxHashMap<(DbNodeId, NodeKey), DbNodeId>,
}

impl ChildIndex {
    /// The index of a tree built already (`nodes[0]` its root), to add to it or move within it.
    pub(crate) fn of(nodes: &[Node]) -> ChildIndex {
        let mut index = ChildIndex::default();
        for (i, node) in nodes.iter().enumerate().skip(1) {
            index
                .map
                .insert((node.parent, node.key()), DbNodeId::from_index(i));
        }
        index
    }
}
