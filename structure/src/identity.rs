//! Which build of a binary a scope tree describes: its GNU build-id, or for a file without
//! one the CRC-32 of its bytes ([`profiler::db::file_checksum`], what `profile.db` records for
//! such modules). hpcstruct-rs writes it into the structure file as a comment after the `LM`
//! start tag (`<!-- hpcstruct-rs build-id 0a1b... -->` or `<!-- hpcstruct-rs crc32 0x... -->`),
//! which HPCToolkit's readers skip; hpcprof-rs compares it with the profile's module, so a
//! structure file of another build is refused even when only lines moved and every function
//! kept its address.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The build of a binary, as recorded in a structure file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BinaryIdentity {
    /// The binary's GNU build-id.
    BuildId(Vec<u8>),
    /// CRC-32 of the whole file, for a binary without a build-id.
    Checksum(u32),
}

/// The comment's opening words.
const TAG: &str = "hpcstruct-rs";

impl BinaryIdentity {
    /// The identity of the binary parsed as `file`; `checksum` gives the CRC-32 of its bytes
    /// ([`profiler::db::file_checksum`]), asked only where it has no build-id.
    pub(crate) fn of(file: &object::File<'_>, checksum: impl FnOnce() -> u32) -> BinaryIdentity {
        use object::Object;
        match file.build_id() {
            Ok(Some(id)) => BinaryIdentity::BuildId(id.to_vec()),
            _ => BinaryIdentity::Checksum(checksum()),
        }
    }

    /// Whether a module profiled with `build_id` (else `checksum`) is this build; `None` when
    /// the profile recorded neither (an old profile).
    pub fn matches(&self, build_id: Option<&[u8]>, checksum: Option<u32>) -> Option<bool> {
        match (self, build_id, checksum) {
            (BinaryIdentity::BuildId(mine), Some(theirs), _) => Some(mine == theirs),
            (BinaryIdentity::Checksum(mine), None, Some(theirs)) => Some(*mine == theirs),
            (_, None, None) => None,
            _ => Some(false),
        }
    }

    /// The text of the comment that records it (without `<!--` and `-->`).
    pub(crate) fn comment(&self) -> String {
        format!(" {TAG} {self} ")
    }

    /// The identity a comment's text records, if it is such a comment.
    pub(crate) fn from_comment(text: &str) -> Option<BinaryIdentity> {
        let mut words = text.split_whitespace();
        if words.next() != Some(TAG) {
            return None;
        }
        match (words.next()?, words.next()?) {
            ("build-id", hex) if hex.len() % 2 == 0 => (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
                .collect::<Option<Vec<u8>>>()
                .map(BinaryIdentity::BuildId),
            ("crc32", hex) => u32::from_str_radix(hex.strip_prefix("0x")?, 16)
                .ok()
                .map(BinaryIdentity::Checksum),
            _ => None,
        }
    }
}

impl fmt::Display for BinaryIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BinaryIdentity::BuildId(id) => {
                f.write_str("build-id ")?;
                id.iter().try_for_each(|b| write!(f, "{b:02x}"))
            }
            BinaryIdentity::Checksum(sum) => write!(f, "crc32 {sum:#010x}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_round_trip_and_others_are_ignored() {
        for id in [
            BinaryIdentity::BuildId(vec![0x0a, 0xff, 0x00]),
            BinaryIdentity::Checksum(0xdead_beef),
        ] {
            assert_eq!(BinaryIdentity::from_comment(&id.comment()), Some(id));
        }
        for other in [
            " written by hpcstruct ",
            " hpcstruct-rs build-id 0g ",
            " hpcstruct-rs",
        ] {
            assert_eq!(BinaryIdentity::from_comment(other), None);
        }
    }

    #[test]
    fn a_build_is_matched_by_its_own_kind_of_identity() {
        let id = BinaryIdentity::BuildId(vec![1, 2]);
        assert_eq!(id.matches(Some(&[1, 2]), None), Some(true));
        assert_eq!(id.matches(Some(&[1, 3]), None), Some(false));
        assert_eq!(id.matches(None, Some(7)), Some(false));
        assert_eq!(id.matches(None, None), None);
        let sum = BinaryIdentity::Checksum(7);
        assert_eq!(sum.matches(None, Some(7)), Some(true));
        assert_eq!(sum.matches(None, Some(8)), Some(false));
        assert_eq!(sum.matches(Some(&[1]), None), Some(false));
    }
}
