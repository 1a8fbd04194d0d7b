//! Tagged sections: a file's body as a list of (section id, length, bytes), so that a format
//! grows by adding a section rather than by a version ladder in its reader. A reader takes the
//! sections it knows, skips the ids it does not know (written by a newer tool: what it adds is
//! not needed to read what is there), and names a section it needs but does not find.
//!
//! Layout of each section: the id (`u32`, little-endian), the length of its bytes (`u64`,
//! little-endian), then the bytes. The body ends after the last section.

/// One section of a body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Section<'b> {
    /// What the bytes hold (each format numbers its own sections).
    pub id: u32,
    /// The section's bytes.
    pub bytes: &'b [u8],
}

/// Bytes before each section's own: its id and length.
pub const SECTION_HEADER: usize = 4 + 8;

/// `sections` (id and bytes each, in order) as one body.
pub fn join(sections: &[(u32, &[u8])]) -> Vec<u8> {
    let size = sections.iter().map(|(_, b)| SECTION_HEADER + b.len()).sum();
    let mut body = Vec::with_capacity(size);
    for (id, bytes) in sections {
        body.extend_from_slice(&header(*id, bytes.len() as u64));
        body.extend_from_slice(bytes);
    }
    body
}

/// What comes before a section's `len` bytes of id `id`: for writers that stream a section
/// rather than hold it.
pub fn header(id: u32, len: u64) -> [u8; SECTION_HEADER] {
    let mut header = [0; SECTION_HEADER];
    header[..4].copy_from_slice(&id.to_le_bytes());
    header[4..].copy_from_slice(&len.to_le_bytes());
    header
}

/// The sections of `body`, in order; why not when a section's header or bytes run past the end.
pub fn split(body: &[u8]) -> Result<Vec<Section<'_>>, String> {
    let mut sections = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        let at = body.len() - rest.len();
        let cut = || format!("section at byte {at} runs past the end of the file");
        let (id, after) = rest.split_first_chunk::<4>().ok_or_else(cut)?;
        let (len, after) = after.split_first_chunk::<8>().ok_or_else(cut)?;
        let len = usize::try_from(u64::from_le_bytes(*len)).map_err(|_| cut())?;
        let bytes = after.get(..len).ok_or_else(cut)?;
        sections.push(Section {
            id: u32::from_le_bytes(*id),
            bytes,
        });
        rest = &after[len..];
    }
    Ok(sections)
}

/// Why the sections of a body could not be taken.
#[derive(Debug)]
pub enum TakeError {
    /// A section's bytes do not decode.
    Corrupt(postcard::Error),
    /// The sections are cut short or hold bytes after their values.
    Malformed(String),
}

/// Hand the sections of `body` to `take`, which decodes section `id` from the front of the
/// bytes it is given and returns the bytes after it. `untagged`: the body of an older version,
/// the first `n` sections untagged, one after the other, in id order; `None`: tagged sections,
/// of which those with ids 1 to `known` are taken and the others (a newer writer's) skipped.
pub fn take_all<'b>(
    body: &'b [u8],
    untagged: Option<u32>,
    known: u32,
    mut take: impl FnMut(u32, &'b [u8]) -> Result<&'b [u8], postcard::Error>,
) -> Result<(), TakeError> {
    if let Some(n) = untagged {
        let mut rest = body;
        for id in 1..=n {
            rest = take(id, rest).map_err(TakeError::Corrupt)?;
        }
        return match rest.is_empty() {
            true => Ok(()),
            false => Err(TakeError::Malformed("bytes after the last part".into())),
        };
    }
    for section in split(body).map_err(TakeError::Malformed)? {
        if !(1..=known).contains(&section.id) {
            continue;
        }
        let rest = take(section.id, section.bytes).map_err(TakeError::Corrupt)?;
        if !rest.is_empty() {
            let why = format!("section {} holds bytes after its value", section.id);
            return Err(TakeError::Malformed(why));
        }
    }
    Ok(())
}

/// Decode one value from the front of `bytes` into `slot`; returns the bytes after it.
pub fn decode_into<'b, T: serde::Deserialize<'b>>(
    slot: &mut Option<T>,
    bytes: &'b [u8],
) -> Result<&'b [u8], postcard::Error> {
    let (value, rest) = postcard::take_from_bytes(bytes)?;
    *slot = Some(value);
    Ok(rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_come_back_in_order_and_a_cut_one_is_refused() {
        let body = join(&[(1, b"abc"), (7, b""), (3, b"xy")]);
        let back = split(&body).unwrap();
        let pairs: Vec<(u32, &[u8])> = back.iter().map(|s| (s.id, s.bytes)).collect();
        assert_eq!(pairs, [(1, &b"abc"[..]), (7, b""), (3, b"xy")]);
        assert_eq!(split(&[]).unwrap(), []);
        for cut in 1..body.len() {
            if split(&body[..cut]).is_ok() {
                // Only cuts at a section's end leave whole sections.
                assert!([15, 27].contains(&cut), "{cut}");
            }
        }
        let err = split(&body[..body.len() - 1]).unwrap_err();
        assert_eq!(err, "section at byte 27 runs past the end of the file");
    }
}
