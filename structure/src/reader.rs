//! Reading HPCToolkit structure files (ours and HPCToolkit's, format 4.6 to 4.9) into scope
//! trees, one per `LM`.
//!
//! The reading follows hpcprof's rules: a first-level `A` (one whose parent is not an outer
//! alien) only switches the current file (a guard alien, or the call-site half of a double
//! alien); an `A` directly inside such an outer `A` is an inlined callee and becomes a
//! [`ScopeKind::Alien`] carrying the outer `A`'s file and line as its call site. `P` may not be
//! nested, `S` and `C` need an enclosing `P`, and every element must be one the format defines.

use crate::error::StructureError;
use crate::identity::BinaryIdentity;
use crate::scope::{FileId, Scope, ScopeId, ScopeKind, ScopeTree};
use crate::writer::{library_suffix, GUARD_NAME, UNKNOWN_FILE};
use quick_xml::events::{BytesStart, Event};
use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;

/// Read the structure file at `path`: one scope tree per load module, finished (lookups work).
pub fn read_structure_file(path: &Path) -> Result<Vec<ScopeTree>, StructureError> {
    let bytes = std::fs::read(path).map_err(|source| StructureError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let text = std::str::from_utf8(&bytes).map_err(|e| StructureError::Format {
        path: path.to_path_buf(),
        line: line_of(&bytes, e.valid_up_to()),
        message: "file is not valid UTF-8".into(),
    })?;
    read_structure(text, path)
}

/// Read a structure document held in `text` (a UTF-8 byte order mark before it is skipped);
/// `path` names it in errors.
pub fn read_structure(text: &str, path: &Path) -> Result<Vec<ScopeTree>, StructureError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut parser = Parser {
        stack: Vec::new(),
        trees: Vec::new(),
        current: None,
        seen_root: false,
        entries: HashMap::new(),
    };
    let mut reader = quick_xml::Reader::from_str(text);
    reader.config_mut().check_end_names = true;
    let fail = |pos: u64, message: String| StructureError::Format {
        path: path.to_path_buf(),
        line: line_of(text.as_bytes(), pos as usize),
        message,
    };
    loop {
        let pos = reader.buffer_position();
        let event = reader
            .read_event()
            .map_err(|e| fail(reader.error_position(), e.to_string()))?;
        match event {
            Event::Start(e) => parser.open(&e, false).map_err(|m| fail(pos, m))?,
            Event::Empty(e) => parser.open(&e, true).map_err(|m| fail(pos, m))?,
            Event::End(_) => parser.close(),
            Event::Comment(c) => parser.comment(&String::from_utf8_lossy(&c)),
            Event::Text(t) if !t.iter().all(u8::is_ascii_whitespace) => {
                return Err(fail(pos, "unexpected text between elements".into()))
            }
            Event::Eof => break,
            _ => {}
        }
    }
    if !parser.seen_root {
        return Err(fail(0, "no <HPCToolkitStructure> root element".into()));
    }
    if !parser.stack.is_empty() {
        return Err(fail(
            text.len() as u64,
            "document ends inside an open element".into(),
        ));
    }
    Ok(parser.trees)
}

/// 1-based line number of byte offset `pos`.
fn line_of(bytes: &[u8], pos: usize) -> usize {
    1 + bytes[..pos.min(bytes.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
}

/// One open element.
struct Frame {
    tag: Tag,
    /// The scope it created, or the nearest enclosing one.
    scope: ScopeId,
    /// The current source file inside this element.
    file: Option<FileId>,
    /// Line attribute (call-site line for an outer alien).
    line: u32,
    /// Whether an enclosing element is a `P`.
    in_procedure: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Tag {
    Root,
    Module,
    File,
    Procedure,
    /// A first-level `A`: switches file; its child `A`s are inlined callees.
    OuterAlien,
    /// An `A` inside an outer `A`: an inlined callee.
    InnerAlien,
    Loop,
    Statement,
}

struct Parser {
    stack: Vec<Frame>,
    trees: Vec<ScopeTree>,
    /// Index in `trees` of the LM being read.
    current: Option<usize>,
    seen_root: bool,
    /// Procedure entry addresses of the current LM (they must be unique).
    entries: HashMap<u64, String>,
}

type Attrs = HashMap<String, String>;

impl Parser {
    fn open(&mut self, e: &BytesStart, empty: bool) -> Result<(), String> {
        let name = String::from_utf8_lossy(e.name().as_ref()).into_owned();
        let attrs = attributes(e)?;
        let frame = match name.as_str() {
            "HPCToolkitStructure" => self.root(&attrs)?,
            "LM" => self.module(&attrs)?,
            "F" => self.file(&attrs)?,
            "P" => self.procedure(&attrs)?,
            "A" => self.alien(&attrs)?,
            "L" => self.loop_(&attrs)?,
            "S" | "C" => self.statement(&name, &attrs)?,
            other => return Err(format!("unknown element <{other}>")),
        };
        if empty {
            self.close_frame(frame);
        } else {
            self.stack.push(frame);
        }
        Ok(())
    }

    /// A comment directly inside an `LM` may record which build it describes.
    fn comment(&mut self, text: &str) {
        let in_module = self.stack.last().is_some_and(|f| f.tag == Tag::Module);
        if let (true, Some(identity)) = (in_module, BinaryIdentity::from_comment(text)) {
            self.tree().set_identity(identity);
        }
    }

    fn close(&mut self) {
        if let Some(frame) = self.stack.pop() {
            self.close_frame(frame);
        }
    }

    fn close_frame(&mut self, frame: Frame) {
        if frame.tag == Tag::Module {
            if let Some(t) = self.current.take() {
                self.trees[t].finish();
            }
            self.entries.clear();
        }
    }

    fn top(&self, element: &str) -> Result<&Frame, String> {
        self.stack
            .last()
            .ok_or_else(|| format!("<{element}> outside the <HPCToolkitStructure> root"))
    }

    fn tree(&mut self) -> &mut ScopeTree {
        let t = self.current.expect("inside an LM");
        &mut self.trees[t]
    }

    fn require_parent(&self, element: &str, allowed: &[Tag]) -> Result<&Frame, String> {
        let top = self.top(element)?;
        if allowed.contains(&top.tag) {
            Ok(top)
        } else {
            Err(format!("<{element}> not allowed here"))
        }
    }

    fn root(&mut self, _attrs: &Attrs) -> Result<Frame, String> {
        if self.seen_root {
            return Err("second <HPCToolkitStructure> root".into());
        }
        self.seen_root = true;
        Ok(Frame {
            tag: Tag::Root,
            scope: ScopeId(0),
            file: None,
            line: 0,
            in_procedure: false,
        })
    }

    fn module(&mut self, attrs: &Attrs) -> Result<Frame, String> {
        self.require_parent("LM", &[Tag::Root])?;
        let path = required(attrs, "LM", "n")?;
        self.trees.push(ScopeTree::new(path));
        self.current = Some(self.trees.len() - 1);
        Ok(Frame {
            tag: Tag::Module,
            scope: ScopeId(0),
            file: None,
            line: 0,
            in_procedure: false,
        })
    }

    fn file(&mut self, attrs: &Attrs) -> Result<Frame, String> {
        self.require_parent("F", &[Tag::Module])?;
        let path = required(attrs, "F", "n")?;
        let tree = self.tree();
        let file = tree.intern_file(path);
        let mut scope = Scope::new(ScopeKind::File);
        scope.name = path.into();
        scope.file = Some(file);
        let id = tree.add(tree.root(), scope);
        Ok(Frame {
            tag: Tag::File,
            scope: id,
            file: Some(file),
            line: 0,
            in_procedure: false,
        })
    }

    fn procedure(&mut self, attrs: &Attrs) -> Result<Frame, String> {
        let parent = self.top("P")?;
        if parent.in_procedure {
            return Err("<P> nested inside another procedure".into());
        }
        let parent = self.require_parent("P", &[Tag::Module, Tag::File])?;
        let (parent_scope, file) = (parent.scope, parent.file);
        let name = required(attrs, "P", "n")?.to_string();
        let ranges = ranges_attr(attrs, "P")?;
        let entry = match ranges.as_slice() {
            [r] if r.end == r.start + 1 => r.start,
            _ => {
                return Err(format!(
                    "<P n=\"{name}\"> v must be exactly one byte, the entry"
                ))
            }
        };
        if let Some(other) = self.entries.insert(entry, name.clone()) {
            return Err(format!(
                "<P n=\"{name}\"> has the same entry {entry:#x} as <P n=\"{other}\">"
            ));
        }
        let line = line_attr(attrs, "P")?;
        let suffix = library_suffix(self.tree().module_path());
        let mut scope = Scope::new(ScopeKind::Procedure);
        scope.name = match name.strip_suffix(suffix.as_str()) {
            Some(plain) => {
                self.tree().set_shared_library(true);
                plain.into()
            }
            None => name.as_str().into(),
        };
        scope.link_name = (attrs.get("ln"))
            .filter(|ln| ln.as_str() != &*scope.name)
            .map(|ln| ln.as_str().into());
        scope.file = file;
        scope.line = line;
        scope.entry = Some(entry);
        let id = self.tree().add(parent_scope, scope);
        Ok(Frame {
            tag: Tag::Procedure,
            scope: id,
            file,
            line,
            in_procedure: true,
        })
    }

    fn alien(&mut self, attrs: &Attrs) -> Result<Frame, String> {
        let parent = self.require_parent(
            "A",
            &[Tag::Procedure, Tag::OuterAlien, Tag::InnerAlien, Tag::Loop],
        )?;
        let (parent_tag, parent_scope, parent_file, parent_line) =
            (parent.tag, parent.scope, parent.file, parent.line);
        let line = line_attr(attrs, "A")?;
        let file_attr = attrs.get("f").map(String::as_str).filter(|f| !f.is_empty());
        let tree = self.tree();
        let file = match file_attr {
            Some(UNKNOWN_FILE) => None,
            Some(f) => Some(tree.intern_file(f)),
            None => parent_file,
        };
        if parent_tag != Tag::OuterAlien {
            return Ok(Frame {
                tag: Tag::OuterAlien,
                scope: parent_scope,
                file,
                line,
                in_procedure: true,
            });
        }
        let name = attrs.get("n").cloned().unwrap_or_default();
        if name == GUARD_NAME {
            return Err("guard alien <A n=\"<inline>\"> directly inside another <A>".into());
        }
        let mut scope = Scope::new(ScopeKind::Alien {
            call_file: parent_file,
            call_line: parent_line,
        });
        scope.link_name = (attrs.get("ln"))
            .filter(|ln| **ln != name)
            .map(|ln| ln.as_str().into());
        scope.name = name.into();
        scope.file = file;
        scope.line = line;
        let id = tree.add(parent_scope, scope);
        Ok(Frame {
            tag: Tag::InnerAlien,
            scope: id,
            file,
            line,
            in_procedure: true,
        })
    }

    fn loop_(&mut self, attrs: &Attrs) -> Result<Frame, String> {
        let parent = self.top("L")?;
        if !parent.in_procedure {
            return Err("<L> outside a procedure".into());
        }
        let (parent_scope, parent_file) = (parent.scope, parent.file);
        let line = line_attr(attrs, "L")?;
        let ranges = ranges_attr(attrs, "L")?;
        let tree = self.tree();
        let file = match attrs.get("f").map(String::as_str) {
            Some(f) if !f.is_empty() && f != UNKNOWN_FILE => Some(tree.intern_file(f)),
            _ => parent_file,
        };
        let mut scope = Scope::new(ScopeKind::Loop);
        scope.file = file;
        scope.line = line;
        scope.entry = ranges.first().map(|r| r.start);
        let id = tree.add(parent_scope, scope);
        Ok(Frame {
            tag: Tag::Loop,
            scope: id,
            file,
            line,
            in_procedure: true,
        })
    }

    fn statement(&mut self, element: &str, attrs: &Attrs) -> Result<Frame, String> {
        let parent = self.top(element)?;
        if !parent.in_procedure {
            return Err(format!("<{element}> outside a procedure"));
        }
        let (parent_scope, file) = (parent.scope, parent.file);
        let mut scope = Scope::new(ScopeKind::Statement);
        scope.line = line_attr(attrs, element)?;
        scope.ranges = ranges_attr(attrs, element)?;
        scope.file = file;
        let id = self.tree().add(parent_scope, scope);
        Ok(Frame {
            tag: Tag::Statement,
            scope: id,
            file,
            line: 0,
            in_procedure: true,
        })
    }
}

/// The element's attributes, unescaped.
fn attributes(e: &BytesStart) -> Result<Attrs, String> {
    let mut out = HashMap::new();
    for attr in e.attributes() {
        let attr = attr.map_err(|err| format!("bad attribute: {err}"))?;
        let key = String::from_utf8_lossy(attr.key.as_ref()).into_owned();
        let value = attr
            .unescape_value()
            .map_err(|err| format!("bad value of attribute {key}: {err}"))?;
        out.insert(key, value.into_owned());
    }
    Ok(out)
}

fn required<'a>(attrs: &'a Attrs, element: &str, key: &str) -> Result<&'a str, String> {
    attrs
        .get(key)
        .map(String::as_str)
        .ok_or_else(|| format!("<{element}> lacks the required attribute {key}"))
}

/// The `l` attribute: a line number, or a `beg-end` pair (the DTD allows it; we keep `beg`).
fn line_attr(attrs: &Attrs, element: &str) -> Result<u32, String> {
    let Some(text) = attrs.get("l") else {
        return Ok(0);
    };
    let first = text.split('-').next().unwrap_or("").trim();
    if first.is_empty() {
        return Ok(0);
    }
    first
        .parse()
        .map_err(|_| format!("<{element}> has a bad line l=\"{text}\""))
}

fn ranges_attr(attrs: &Attrs, element: &str) -> Result<Vec<Range<u64>>, String> {
    match attrs.get("v") {
        None => Ok(Vec::new()),
        Some(v) => {
            parse_ranges(v).ok_or_else(|| format!("<{element}> has a bad range set v=\"{v}\""))
        }
    }
}

/// Parse a `v` attribute such as `{[0x1129-0x1131) [0x1147-0x1172)}`.
pub fn parse_ranges(text: &str) -> Option<Vec<Range<u64>>> {
    let inner = text.trim().strip_prefix('{')?.strip_suffix('}')?;
    let mut out = Vec::new();
    let mut rest = inner.trim_start();
    while !rest.is_empty() {
        let body = rest.strip_prefix('[')?;
        let close = body.find(')')?;
        let (lo, hi) = body[..close].split_once('-')?;
        let (lo, hi) = (parse_hex(lo)?, parse_hex(hi)?);
        if hi < lo {
            return None;
        }
        out.push(lo..hi);
        rest = body[close + 1..].trim_start();
    }
    Some(out)
}

fn parse_hex(s: &str) -> Option<u64> {
    let s = s.trim();
    let digits = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s);
    u64::from_str_radix(digits, 16).ok()
}

#[cfg(test)]
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;

    #[test]
    fn parses_range_sets() {
        assert_eq!(parse_ranges("{}"), Some(vec![]));
        assert_eq!(
            parse_ranges("{[0x1129-0x1131) [0x1147-0x1172)}"),
            Some(vec![0x1129..0x1131, 0x1147..0x1172])
        );
        assert_eq!(parse_ranges("{[0-0x10)}"), Some(vec![0..0x10]));
        assert_eq!(parse_ranges("{[0x10-0x8)}"), None);
        assert_eq!(parse_ranges("[0x10-0x18)"), None);
        assert_eq!(parse_ranges("{[zz-0x18)}"), None);
    }
}
