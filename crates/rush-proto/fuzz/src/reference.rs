//! A second chunked decoder, the oracle of the `chunked` target.
//!
//! It is written for obviousness, not speed: it reads the whole input at
//! once, one chunk-size line, one chunk and one trailer line at a time, by
//! the grammar of RFC 9112 section 7.1 with the strict choices rush-proto
//! documents (CRLF only; whitespace after the size only before a `;`;
//! extensions by the chunk-ext grammar, trailer values of field-value
//! bytes; trailer names of tchar, none of the fields a request's trailer
//! must not carry; no line folding) and its three limits. It shares no code with
//! rush-proto's state machine.
//!
//! On input that stops early it says "need more", unless what it has
//! already read breaks a rule or a limit: a streaming decoder refuses at the
//! first bad byte, so the whole input's answer must not depend on how much
//! came after it.

use rush_proto::Limits;

/// What the whole input amounts to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The body ends after `consumed` bytes.
    Done {
        /// The decoded body.
        body: Vec<u8>,
        /// Bytes up to and including the final CRLF.
        consumed: usize,
    },
    /// Valid so far; the body decoded up to the end of the input.
    NeedMore {
        /// Chunk data decoded so far, partial chunks included.
        body: Vec<u8>,
    },
    /// A rule or a limit is broken by the bytes present.
    Refused,
}

/// An early return: the input either ran out or broke a rule.
enum Stop {
    NeedMore,
    Refused,
}

fn is_tchar(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte)
}

fn is_field_value_byte(byte: u8) -> bool {
    byte == b'\t' || byte == b' ' || byte.is_ascii_graphic() || byte >= 0x80
}

/// Decodes `input` as a chunked body under `limits`.
pub fn decode(input: &[u8], limits: &Limits) -> Verdict {
    let mut body = Vec::new();
    match decode_into(input, limits, &mut body) {
        Ok(consumed) => Verdict::Done { body, consumed },
        Err(Stop::NeedMore) => Verdict::NeedMore { body },
        Err(Stop::Refused) => Verdict::Refused,
    }
}

fn decode_into(input: &[u8], limits: &Limits, body: &mut Vec<u8>) -> Result<usize, Stop> {
    let mut at = 0;
    loop {
        let size = size_line(input, &mut at, limits)?;
        if size == 0 {
            return trailers(input, at, limits);
        }
        let total = (body.len() as u64).checked_add(size);
        if total.is_none_or(|total| total > limits.max_body_size) {
            return Err(Stop::Refused);
        }
        // The size is now known to fit in memory (it is under the body limit).
        let size = size as usize;
        let available = input.len() - at;
        if available < size {
            body.extend_from_slice(&input[at..]);
            return Err(Stop::NeedMore);
        }
        body.extend_from_slice(&input[at..at + size]);
        at += size;
        expect(input, &mut at, b'\r')?;
        expect(input, &mut at, b'\n')?;
    }
}

/// The byte at `*at` must be `wanted`; advances past it.
fn expect(input: &[u8], at: &mut usize, wanted: u8) -> Result<(), Stop> {
    match input.get(*at) {
        None => Err(Stop::NeedMore),
        Some(&byte) if byte == wanted => {
            *at += 1;
            Ok(())
        }
        Some(_) => Err(Stop::Refused),
    }
}

/// How the text of a size line after the size (and its whitespace) stands
/// against RFC 9112 7.1.1's `chunk-ext`.
#[derive(Debug, PartialEq, Eq)]
enum Extensions {
    /// One or more whole extensions, nothing after them.
    Whole,
    /// Not whole, but more bytes could make it so.
    Prefix,
    /// No continuation is valid.
    Broken,
}

/// `chunk-ext = *( BWS ";" BWS chunk-ext-name [ BWS "=" BWS chunk-ext-val ] )`,
/// `chunk-ext-val = token / quoted-string`, read one production at a time.
fn extensions(text: &[u8]) -> Extensions {
    let end = text.len();
    let blanks = |at: usize| {
        at + text[at..]
            .iter()
            .take_while(|&&byte| byte == b' ' || byte == b'\t')
            .count()
    };
    let tokens = |at: usize| {
        at + text[at..]
            .iter()
            .take_while(|&&byte| is_tchar(byte))
            .count()
    };
    let mut at = 0;
    loop {
        // Here every extension before `at` is whole.
        let whole_until = at;
        at = blanks(at);
        if at == end {
            return if at == whole_until && at > 0 {
                Extensions::Whole
            } else {
                Extensions::Prefix
            };
        }
        if text[at] != b';' {
            return Extensions::Broken;
        }
        at = blanks(at + 1);
        let name_end = tokens(at);
        if name_end == end {
            return if name_end > at {
                Extensions::Whole
            } else {
                Extensions::Prefix
            };
        }
        if name_end == at {
            return Extensions::Broken;
        }
        at = blanks(name_end);
        if at == end {
            return Extensions::Prefix;
        }
        if text[at] == b';' {
            at = name_end;
            continue;
        }
        if text[at] != b'=' {
            return Extensions::Broken;
        }
        at = blanks(at + 1);
        if at == end {
            return Extensions::Prefix;
        }
        if text[at] != b'"' {
            let value_end = tokens(at);
            if value_end == at {
                return Extensions::Broken;
            }
            at = value_end;
            continue;
        }
        // quoted-string: qdtext and quoted-pairs up to the closing DQUOTE.
        at += 1;
        loop {
            match text.get(at) {
                None => return Extensions::Prefix,
                Some(b'"') => break,
                Some(b'\\') => match text.get(at + 1) {
                    None => return Extensions::Prefix,
                    Some(&byte) if is_field_value_byte(byte) => at += 2,
                    Some(_) => return Extensions::Broken,
                },
                Some(&byte) if is_field_value_byte(byte) => at += 1,
                Some(_) => return Extensions::Broken,
            }
        }
        at += 1;
    }
}

/// Reads `chunk-size [ chunk-ext ] CRLF` at `*at`, leaving `*at` after the LF.
fn size_line(input: &[u8], at: &mut usize, limits: &Limits) -> Result<u64, Stop> {
    let rest = &input[*at..];
    let cr = rest.iter().position(|&byte| byte == b'\r');
    let line = &rest[..cr.unwrap_or(rest.len())];
    let terminated = cr.is_some();
    if line.len() > limits.max_chunk_line {
        return Err(Stop::Refused);
    }

    let digits = line
        .iter()
        .take_while(|byte| byte.is_ascii_hexdigit())
        .count();
    if digits == 0 {
        // Nothing but a size may start the line, not even the CR.
        return Err(if line.is_empty() && !terminated {
            Stop::NeedMore
        } else {
            Stop::Refused
        });
    }
    let mut size: u64 = 0;
    for &digit in &line[..digits] {
        let value = (digit as char).to_digit(16).expect("a hex digit") as u64;
        size = size
            .checked_mul(16)
            .and_then(|size| size.checked_add(value))
            .ok_or(Stop::Refused)?;
    }

    let after = &line[digits..];
    let blanks = after
        .iter()
        .take_while(|&&byte| byte == b' ' || byte == b'\t')
        .count();
    if blanks == after.len() {
        // Bare size, or whitespace that must still lead to a ';'.
        if terminated && blanks > 0 {
            return Err(Stop::Refused);
        }
    } else {
        match extensions(&after[blanks..]) {
            Extensions::Broken => return Err(Stop::Refused),
            Extensions::Prefix if terminated => return Err(Stop::Refused),
            _ => {}
        }
    }
    if !terminated {
        return Err(Stop::NeedMore);
    }
    *at += line.len() + 1;
    expect(input, at, b'\n')?;
    Ok(size)
}

/// Whether a request's trailer must not carry the field `name`. The list
/// is rush-proto's own (a policy, RFC 9110 6.5.1's categories, not grammar:
/// a second copy here would check nothing); what this reference decides
/// independently is where a trailer field's name starts and ends.
fn is_forbidden_trailer(name: &[u8]) -> bool {
    rush_proto::FORBIDDEN_TRAILER_FIELDS
        .iter()
        .any(|forbidden| forbidden.as_bytes().eq_ignore_ascii_case(name))
}

/// Reads the trailer section and the final CRLF from `at`; returns the end.
fn trailers(input: &[u8], mut at: usize, limits: &Limits) -> Result<usize, Stop> {
    let mut counted = 0usize;
    // Counts one byte of a field line (CR and LF included) against the limit.
    let mut count = || {
        counted += 1;
        if counted > limits.max_trailer_size {
            Err(Stop::Refused)
        } else {
            Ok(())
        }
    };
    loop {
        // The start of a field line, or the final empty line.
        match input.get(at) {
            None => return Err(Stop::NeedMore),
            Some(b'\r') => {
                at += 1;
                expect(input, &mut at, b'\n')?;
                return Ok(at);
            }
            Some(&byte) if is_tchar(byte) => {}
            Some(_) => return Err(Stop::Refused),
        }
        // name ":" value CR LF, byte by byte.
        let name_start = at;
        let mut in_value = false;
        loop {
            let Some(&byte) = input.get(at) else {
                return Err(Stop::NeedMore);
            };
            at += 1;
            count()?;
            if !in_value {
                if byte == b':' {
                    if is_forbidden_trailer(&input[name_start..at - 1]) {
                        return Err(Stop::Refused);
                    }
                    in_value = true;
                } else if !is_tchar(byte) {
                    return Err(Stop::Refused);
                }
            } else if byte == b'\r' {
                break;
            } else if !is_field_value_byte(byte) {
                return Err(Stop::Refused);
            }
        }
        match input.get(at) {
            None => return Err(Stop::NeedMore),
            Some(b'\n') => {
                at += 1;
                count()?;
            }
            Some(_) => return Err(Stop::Refused),
        }
    }
}
