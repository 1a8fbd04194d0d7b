//! Unwinding: which module each runtime address belongs to (the load map, the one place runtime
//! addresses become link-time ones), the modules' images and their unwind tables, one sampled
//! stack walked with framehop (and through the stubs it cannot unwind), and the walked path put into its thread's calling-context tree.

pub(crate) mod cct;
pub(crate) mod image;
pub(crate) mod jitcode;
pub(crate) mod loadmap;
pub(crate) mod namespaces;
pub(crate) mod stubs;
pub(crate) mod unwind;
