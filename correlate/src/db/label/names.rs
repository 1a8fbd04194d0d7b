//! Shortening long C++ names for the text view ([`super::display`] with a width).
//!
//! Demangled C++ names can run to hundreds of characters of template arguments
//! (`std::_Rb_tree<int, std::pair<int const, double>, std::_Select1st<...>, ...>::_M_insert_unique`).
//! A terminal row has room for the part that identifies the code: the namespaces, class and
//! function names. [`shorten`] first spells well-known library types the way people write them,
//! then collapses the contents of the deepest `<...>` and `(...)` groups into `…`, level by level,
//! until the name fits; if even the outermost groups do not fit, it keeps the end of the name,
//! which is the most specific part.

/// Well-known spellings: what the compiler writes, and what a person would write.
const SPELLINGS: &[(&str, &str)] = &[
    (
        "std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >",
        "std::string",
    ),
    (
        "std::basic_string<char, std::char_traits<char>, std::allocator<char> >",
        "std::string",
    ),
    ("std::__cxx11::", "std::"),
    ("std::__1::", "std::"),
];

/// A bracket group is kept verbatim when it is one of these (it names a scope, not arguments).
const KEPT_GROUPS: &[&str] = &["(anonymous namespace)"];

/// `name` shortened to at most `max` characters (see the module documentation).
pub(crate) fn shorten(name: &str, max: usize) -> String {
    let mut name = name.to_string();
    for (long, short) in SPELLINGS {
        if name.contains(long) {
            name = name.replace(long, short);
        }
    }
    if char_len(&name) <= max {
        return name;
    }
    let deepest = max_depth(&name);
    for depth in (1..=deepest).rev() {
        let collapsed = collapse_below(&name, depth);
        if char_len(&collapsed) <= max {
            return collapsed;
        }
    }
    keep_tail(&collapse_below(&name, 1), max)
}

fn char_len(s: &str) -> usize {
    s.chars().count()
}

/// The characters of `name` classified by bracket depth: each entry is (char, depth before it,
/// whether it is a structural bracket). `operator<`, `operator()` and friends are not brackets.
fn scan(name: &str) -> Vec<(char, usize, bool)> {
    let chars: Vec<char> = name.chars().collect();
    let mut out = Vec::with_capacity(chars.len());
    let mut depth = 0usize;
    let mut i = 0;
    while i < chars.len() {
        if let Some(len) = kept_group_at(&chars[i..]) {
            out.extend(chars[i..i + len].iter().map(|&c| (c, depth, false)));
            i += len;
            continue;
        }
        if starts_operator(&chars, i) {
            let mut j = i + "operator".len();
            while j < chars.len() && "<>=()[]!+-*/%^&|~,".contains(chars[j]) {
                // `operator()` ends at `)`; `operator<` stops before a following template `<...>`
                // only in pathological names, which we accept printing long.
                j += 1;
                if chars[j - 1] == ')' || (chars[j - 1] == ']' && chars[j - 2] == '[') {
                    break;
                }
            }
            out.extend(chars[i..j].iter().map(|&c| (c, depth, false)));
            i = j;
            continue;
        }
        let c = chars[i];
        match c {
            '<' | '(' => {
                out.push((c, depth, true));
                depth += 1;
            }
            '>' | ')' => {
                depth = depth.saturating_sub(1);
                out.push((c, depth, true));
            }
            _ => out.push((c, depth, false)),
        }
        i += 1;
    }
    out
}

fn kept_group_at(chars: &[char]) -> Option<usize> {
    KEPT_GROUPS.iter().find_map(|g| {
        let n = g.chars().count();
        (chars.len() >= n && chars[..n].iter().copied().eq(g.chars())).then_some(n)
    })
}

fn starts_operator(chars: &[char], i: usize) -> bool {
    let word: Vec<char> = "operator".chars().collect();
    let preceded_ok = i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_');
    preceded_ok
        && chars.len() > i + word.len()
        && chars[i..i + word.len()] == word[..]
        && !(chars[i + word.len()].is_alphanumeric() || chars[i + word.len()] == '_')
}

fn max_depth(name: &str) -> usize {
    scan(name)
        .iter()
        .map(|&(_, d, b)| if b { d + 1 } else { d })
        .max()
        .unwrap_or(0)
}

/// `name` with the contents of every group opened at depth >= `depth` replaced by `…`
/// (groups opened at depth `depth - 1` keep their brackets, as in `map<…>`).
fn collapse_below(name: &str, depth: usize) -> String {
    let mut out = String::with_capacity(name.len());
    let mut elided = false;
    for (c, d, _) in scan(name) {
        if d < depth {
            out.push(c);
            elided = false;
        } else if !elided {
            out.push('…');
            elided = true;
        }
    }
    out
}

/// The last `max - 1` characters of `name`, after a leading `…`.
fn keep_tail(name: &str, max: usize) -> String {
    let n = char_len(name);
    if n <= max {
        return name.to_string();
    }
    let tail: String = name.chars().skip(n - max.saturating_sub(1)).collect();
    format!("…{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const RB_INSERT: &str = "std::_Rb_tree<int, std::pair<int const, double>, \
        std::_Select1st<std::pair<int const, double> >, std::less<int>, \
        std::allocator<std::pair<int const, double> > >::_M_insert_unique(std::pair<int const, double>&&)";

    #[test]
    fn short_names_are_unchanged() {
        assert_eq!(shorten("Mp::add(int, double)", 60), "Mp::add(int, double)");
    }

    #[test]
    fn deep_template_arguments_collapse_first() {
        let s = shorten(RB_INSERT, 120);
        assert!(s.chars().count() <= 120, "{s}");
        assert!(s.starts_with("std::_Rb_tree<int, std::pair<…>"), "{s}");
        assert!(s.contains("::_M_insert_unique("), "{s}");
    }

    #[test]
    fn outermost_groups_collapse_when_needed() {
        assert_eq!(
            shorten(RB_INSERT, 40),
            "std::_Rb_tree<…>::_M_insert_unique(…)"
        );
    }

    #[test]
    fn the_tail_is_kept_when_nothing_else_fits() {
        let s = shorten(RB_INSERT, 20);
        assert_eq!(s.chars().count(), 20);
        assert!(s.ends_with("_insert_unique(…)"), "{s}");
    }

    #[test]
    fn library_strings_are_spelled_as_people_write_them() {
        let s = shorten(
            "f(std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > const&)",
            200,
        );
        assert_eq!(s, "f(std::string const&)");
    }

    #[test]
    fn operators_and_anonymous_namespaces_are_not_brackets() {
        let name = "(anonymous namespace)::Cmp<std::vector<int, std::allocator<int> > >::operator()(int, int) const";
        let s = shorten(name, 50);
        assert_eq!(s, "(anonymous namespace)::Cmp<…>::operator()(…) const");
        let less = shorten(
            "bool std::operator< <int, std::allocator<int> >(int const&)",
            30,
        );
        assert!(less.contains("operator<"), "{less}");
    }
}
