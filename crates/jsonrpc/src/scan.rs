//! The structural scan behind [`crate::Envelope::peek`].
//!
//! One pass over the line checks it against the JSON grammar and finds the
//! routing members on the way, without building anything. A string is
//! skipped to its next quote or backslash eight bytes at a time while it is
//! short, then with `memchr`; a line's control characters and non-ASCII
//! bytes are found once up front, in a loop the compiler vectorizes, so
//! that the usual line (ASCII, no raw control characters) needs neither a
//! UTF-8 pass nor a byte-by-byte look inside its strings.
//!
//! The scan answers only for what it fully handles. Anything else is left
//! to the serde path ([`crate::envelope::Fields::parse`]): invalid JSON
//! (whose error message serde writes), escapes in a member name or in the
//! method, a duplicate envelope member, a `params` or `_meta` of an unusual
//! type, nesting deeper than [`MAX_DEPTH`]. So the scan must never accept a
//! line that serde rejects, and must find the same members when it accepts
//! one; the tests compare the two on edge cases and on random lines.
//!
//! The same scan reads a message's whole `params` object for
//! [`crate::envelope::params_object`], on the same terms: its members' values
//! are cut from the line as the text the scan has checked, where serde would
//! check each again to borrow it as a `RawValue`.

use std::borrow::Cow;

use crate::Raw;
use crate::envelope::{Fields, ParamsFields, ParamsObject};

/// Room for a `params` object's members, taken at its first member: a
/// call's params have two or three (`name`, `arguments`, perhaps
/// `_meta`), and growing member by member costs more than the allocation.
const MEMBERS: usize = 4;

/// Containers nested deeper than this are left to serde.
const MAX_DEPTH: u32 = 64;

/// The routing members of `line`, an object, if the scan can vouch for the
/// whole line; `None` leaves the line to serde.
pub(crate) fn fields(line: &[u8]) -> Option<Fields<'_>> {
    let (low, high) = extremes(line);
    // A line that is not ASCII is checked as UTF-8 whole, once, and the few
    // pieces borrowed as text (the method, ids) are cut from it; otherwise
    // each of them is checked on its own (a few bytes each).
    let text = if high >= 0x80 {
        Some(std::str::from_utf8(line).ok()?)
    } else {
        None
    };
    let mut scan = Scan::<false> {
        bytes: line,
        text,
        pos: 0,
        controls: low < 0x20,
        members: None,
    };
    let fields = scan.envelope()?;
    scan.end().then_some(fields)
}

/// [`fields`], and in the same pass the `params` object as
/// [`params_object`] reads it: `Some(None)` when the line has none.
pub(crate) fn fields_and_params(line: &[u8]) -> Option<(Fields<'_>, Option<ParamsObject<'_>>)> {
    let (low, _) = extremes(line);
    // As in `params_object`: the values are cut as text, one check of the
    // whole line is the cheaper.
    let mut scan = Scan::<true> {
        bytes: line,
        text: Some(std::str::from_utf8(line).ok()?),
        pos: 0,
        controls: low < 0x20,
        members: None,
    };
    let fields = scan.envelope()?;
    let params = scan.members.take();
    scan.end().then_some((fields, params))
}

/// The `params` object of `line`, an object, if the scan can vouch for the
/// whole line: `Some(None)` when it has none (no `params`, or one that is
/// not an object); `None` leaves the line to serde.
pub(crate) fn params_object(line: &[u8]) -> Option<Option<ParamsObject<'_>>> {
    let (low, _) = extremes(line);
    // The members' values are cut from the line as text, and they are most
    // of it: one check of the whole line costs less than one per value.
    let mut scan = Scan::<false> {
        bytes: line,
        text: Some(std::str::from_utf8(line).ok()?),
        pos: 0,
        controls: low < 0x20,
        members: None,
    };
    let params = scan.params_line()?;
    scan.end().then_some(params)
}

/// The members of `text`, a whole JSON object (whitespace around it
/// allowed), if the scan can vouch for it: as [`params_object`] reads a
/// `params` object. `None` when it is not an object, or leaves it to serde.
pub(crate) fn object(text: &str) -> Option<ParamsObject<'_>> {
    let bytes = text.as_bytes();
    let (low, _) = extremes(bytes);
    let mut scan = Scan::<false> {
        bytes,
        text: Some(text),
        pos: 0,
        controls: low < 0x20,
        members: None,
    };
    scan.ws();
    let object = scan.params_object()??;
    scan.end().then_some(object)
}

/// Bytes looked at together in [`extremes`]: four SSE2 registers, so that
/// the loop's own instructions are spread over more bytes.
const LANES: usize = 64;

/// The smallest and the largest byte of `bytes`, lane by lane over chunks
/// with no early exit, so that the compiler vectorizes it.
fn extremes(bytes: &[u8]) -> (u8, u8) {
    let mut low = [u8::MAX; LANES];
    let mut high = [u8::MIN; LANES];
    let mut fold = |chunk: &[u8]| {
        for i in 0..LANES {
            low[i] = low[i].min(chunk[i]);
            high[i] = high[i].max(chunk[i]);
        }
    };
    let mut chunks = bytes.chunks_exact(LANES);
    chunks.by_ref().for_each(&mut fold);
    // The rest as one more chunk, padded with a byte that changes neither
    // answer (a space is neither a control character nor non-ASCII).
    let rest = chunks.remainder();
    let mut last = [b' '; LANES];
    last[..rest.len()].copy_from_slice(rest);
    fold(&last);
    (
        low.into_iter().fold(u8::MAX, u8::min),
        high.into_iter().fold(u8::MIN, u8::max),
    )
}

/// The first quote or backslash at or after `from`.
#[inline(always)]
fn stop(bytes: &[u8], from: usize) -> Option<usize> {
    // Most strings are short (member names, methods, ids): a word at a time,
    // their end is found before `memchr` would have set up.
    let mut at = from;
    for _ in 0..SHORT_WORDS {
        let Some(word) = bytes.get(at..).and_then(<[u8]>::first_chunk::<8>) else {
            let rest = bytes.get(at..)?;
            return rest
                .iter()
                .position(|&b| b == b'"' || b == b'\\')
                .map(|i| at + i);
        };
        let word = u64::from_le_bytes(*word);
        let hits = bytes_equal(word, b'"') | bytes_equal(word, b'\\');
        if hits != 0 {
            return Some(at + (hits.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    memchr::memchr2(b'"', b'\\', bytes.get(at..)?).map(|i| at + i)
}

/// Words looked at one by one before a string is handed to `memchr`.
const SHORT_WORDS: usize = 16;

/// The high bit of each byte of `word` that equals `b`, and perhaps of
/// bytes above one that does: the lowest bit set is always exact.
#[inline(always)]
fn bytes_equal(word: u64, b: u8) -> u64 {
    const ONES: u64 = u64::from_le_bytes([1; 8]);
    let x = word ^ (ONES * u64::from(b));
    x.wrapping_sub(ONES) & !x & (ONES << 7)
}

/// Past the escape whose backslash is at `at`.
fn escape_end(bytes: &[u8], at: usize) -> Option<usize> {
    match bytes.get(at + 1)? {
        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => Some(at + 2),
        b'u' => {
            let hex = bytes.get(at + 2..at + 6)?;
            hex.iter().all(u8::is_ascii_hexdigit).then_some(at + 6)
        }
        _ => None,
    }
}

/// A position in a line known to be UTF-8. `KEEP`: the envelope scan
/// keeps the `params` object's members too ([`fields_and_params`]); without
/// it the code that keeps them is not there at all.
struct Scan<'a, const KEEP: bool> {
    bytes: &'a [u8],
    /// The line as text, when it was checked whole (it is not ASCII).
    text: Option<&'a str>,
    pos: usize,
    /// Whether the line has any byte under 0x20: whitespace between tokens
    /// (tab, carriage return) or, inside a string, an error.
    controls: bool,
    /// The `params` object's members, once the envelope scan has kept
    /// them (`KEEP` only).
    members: Option<ParamsObject<'a>>,
}

impl<'a, const KEEP: bool> Scan<'a, KEEP> {
    #[inline(always)]
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    /// Skips JSON whitespace (which is not `u8::is_ascii_whitespace`: no
    /// form feed).
    #[inline(always)]
    fn ws(&mut self) {
        // Compact JSON has none: one comparison says so (every whitespace
        // byte is at most a space).
        if self.peek().is_none_or(|b| b > b' ') {
            return;
        }
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    /// The top-level object. Duplicate envelope members are serde's to
    /// reject.
    fn envelope(&mut self) -> Option<Fields<'a>> {
        self.ws();
        if self.peek()? != b'{' {
            return None;
        }
        self.pos += 1;
        let mut fields = Fields::default();
        if self.empty(b'}') {
            return Some(fields);
        }
        let (mut id, mut method, mut params, mut result, mut error) = Default::default();
        loop {
            let name = self.member()?;
            match name {
                b"id" => {
                    once(&mut id)?;
                    fields.id = Some(self.raw()?);
                }
                b"method" => {
                    once(&mut method)?;
                    fields.method = Some(self.method()?);
                }
                b"params" => {
                    once(&mut params)?;
                    fields.params = self.params()?;
                }
                b"result" => {
                    once(&mut result)?;
                    self.ws();
                    let start = self.pos;
                    self.value()?;
                    fields.result = Some(start..self.pos);
                }
                b"error" => {
                    once(&mut error)?;
                    self.value()?;
                    fields.error = true;
                }
                _ => self.value()?,
            }
            if !self.more()? {
                return Some(fields);
            }
        }
    }

    /// Past the top-level value: whether only whitespace is left.
    fn end(&mut self) -> bool {
        self.ws();
        self.pos == self.bytes.len()
    }

    /// The top-level object, for its `params` object. Only a repeated
    /// `params` is an error to serde here (other members are skipped), and
    /// it is left to serde.
    fn params_line(&mut self) -> Option<Option<ParamsObject<'a>>> {
        self.ws();
        if self.peek()? != b'{' {
            return None;
        }
        self.pos += 1;
        let mut params = None;
        if self.empty(b'}') {
            return Some(params);
        }
        let mut seen = false;
        loop {
            // An escaped name may spell `params`: serde's to decode.
            if self.member()? == b"params" {
                once(&mut seen)?;
                params = self.params_object()?;
            } else {
                self.value()?;
            }
            if !self.more()? {
                return Some(params);
            }
        }
    }

    /// A `params` value: its members when it is an object, none otherwise.
    fn params_object(&mut self) -> Option<Option<ParamsObject<'a>>> {
        let start = self.pos;
        if self.peek()? != b'{' {
            return self.value().map(|()| None);
        }
        self.pos += 1;
        let mut members = Vec::new();
        if !self.empty(b'}') {
            members.reserve_exact(MEMBERS);
            loop {
                // Repeated names are all kept, in order, as serde's map
                // visitor gets them.
                let name = self.name()?;
                let value = self.pos;
                self.value()?;
                members.push((name, self.text(value, self.pos).map(Raw::checked)?));
                if !self.more()? {
                    break;
                }
            }
        }
        let text = self.text(start, self.pos)?;
        Some(Some(ParamsObject {
            text,
            members,
            meta: None,
        }))
    }

    /// A member's name, borrowed when it has no escapes, and its colon, up
    /// to its value.
    fn name(&mut self) -> Option<Cow<'a, str>> {
        self.ws();
        let start = self.pos;
        let (name, escaped) = self.any_member()?;
        let end = start + 1 + name.len();
        if !escaped {
            return self.text(start + 1, end).map(Cow::Borrowed);
        }
        // Decoded by serde itself, so that it is the name serde would give,
        // and refused where serde refuses it (a lone surrogate).
        let quoted = self.text(start, end + 1)?;
        serde_json::from_str::<String>(quoted).ok().map(Cow::Owned)
    }

    /// `method`: a string without escapes, borrowed.
    fn method(&mut self) -> Option<Cow<'a, str>> {
        if self.peek()? != b'"' {
            return None;
        }
        let (text, escaped) = self.string()?;
        if escaped {
            return None;
        }
        let end = self.pos - 1;
        self.text(end - text.len(), end).map(Cow::Borrowed)
    }

    /// `params`: its routing members when it is an object, none when it is
    /// an array or null.
    fn params(&mut self) -> Option<ParamsFields<'a>> {
        let mut params = ParamsFields::default();
        let start = self.pos;
        match self.peek()? {
            b'{' => self.pos += 1,
            b'[' => return self.value().map(|()| params),
            b'n' => return self.literal(b"null").map(|()| params),
            _ => return None,
        }
        // Kept as `params_object` keeps them, when asked: every member in
        // order, a repeated name as many times as it appears.
        let mut members = KEEP.then(Vec::new);
        // `_meta`'s members, kept with the rest; a repeated `_meta` keeps none.
        let mut meta: Option<Vec<(Cow<'a, str>, Raw<'a>)>> = None;
        let mut metas = 0;
        if !self.empty(b'}') {
            if let Some(members) = members.as_mut() {
                members.reserve_exact(MEMBERS);
            }
            loop {
                // A repeated member overwrites the earlier one, as in serde.
                let name = self.member()?;
                let value = self.pos;
                match name {
                    b"requestId" => params.request_id = Some(self.raw()?),
                    b"progressToken" => params.progress_token = Some(self.raw()?),
                    b"_meta" => {
                        metas += 1;
                        let mut kept = KEEP.then(Vec::new);
                        params.meta_token = self.meta(kept.as_mut())?;
                        meta = kept.filter(|_| self.bytes.get(value) == Some(&b'{'));
                    }
                    _ => self.value()?,
                }
                if let Some(members) = members.as_mut() {
                    let name = self.cut(name)?;
                    let value = self.text(value, self.pos).map(Raw::checked)?;
                    members.push((Cow::Borrowed(name), value));
                }
                if !self.more()? {
                    break;
                }
            }
        }
        if let Some(members) = members {
            let text = self.text(start, self.pos)?;
            self.members = Some(ParamsObject {
                text,
                members,
                meta: meta.filter(|_| metas == 1),
            });
        }
        Some(params)
    }

    /// `params._meta`: its `progressToken` (`null` is none), when it is an
    /// object or null; its members go to `kept` when given.
    fn meta(
        &mut self,
        mut kept: Option<&mut Vec<(Cow<'a, str>, Raw<'a>)>>,
    ) -> Option<Option<Raw<'a>>> {
        match self.peek()? {
            b'{' => self.pos += 1,
            b'n' => return self.literal(b"null").map(|()| None),
            _ => return None,
        }
        let mut token = None;
        if self.empty(b'}') {
            return Some(token);
        }
        let mut seen = false;
        loop {
            let name = self.member()?;
            let value = self.pos;
            if name == b"progressToken" {
                once(&mut seen)?;
                token = match self.peek()? {
                    b'n' => self.literal(b"null").map(|()| None)?,
                    _ => Some(self.raw()?),
                };
            } else {
                self.value()?;
            }
            if let Some(kept) = kept.as_deref_mut() {
                let name = self.cut(name)?;
                let value = self.text(value, self.pos).map(Raw::checked)?;
                kept.push((Cow::Borrowed(name), value));
            }
            if !self.more()? {
                return Some(token);
            }
        }
    }

    /// The next value, as the text the scan has just checked.
    fn raw(&mut self) -> Option<Raw<'a>> {
        let start = self.pos;
        self.value()?;
        self.text(start, self.pos).map(Raw::checked)
    }

    /// The line's bytes from `start` to `end` as text.
    fn text(&self, start: usize, end: usize) -> Option<&'a str> {
        match self.text {
            Some(text) => text.get(start..end),
            None => std::str::from_utf8(self.bytes.get(start..end)?).ok(),
        }
    }

    /// `part`, a piece of the line, as text: cut from the line's text
    /// when it was checked whole, else checked on its own.
    fn cut(&self, part: &'a [u8]) -> Option<&'a str> {
        match self.text {
            Some(text) => {
                let start = (part.as_ptr() as usize).checked_sub(self.bytes.as_ptr() as usize)?;
                text.get(start..start + part.len())
            }
            None => std::str::from_utf8(part).ok(),
        }
    }

    /// Past a container's opening bracket: whether it closes at once with
    /// `close` (and if so, past it).
    #[inline(always)]
    fn empty(&mut self, close: u8) -> bool {
        self.ws();
        let empty = self.peek() == Some(close);
        if empty {
            self.pos += 1;
        }
        empty
    }

    /// After a member of an object: whether another follows (past the
    /// comma) or the object ends (past its brace).
    #[inline(always)]
    fn more(&mut self) -> Option<bool> {
        self.ws();
        let more = match self.peek()? {
            b',' => true,
            b'}' => false,
            _ => return None,
        };
        self.pos += 1;
        Some(more)
    }

    /// A member's name and colon, up to its value. A name with escapes is
    /// serde's to decode.
    #[inline(always)]
    fn member(&mut self) -> Option<&'a [u8]> {
        let (name, escaped) = self.any_member()?;
        (!escaped).then_some(name)
    }

    /// A member's name (and whether it has escapes) and colon, up to its
    /// value.
    #[inline(always)]
    fn any_member(&mut self) -> Option<(&'a [u8], bool)> {
        self.ws();
        if self.peek()? != b'"' {
            return None;
        }
        let name = self.string()?;
        self.ws();
        if self.peek()? != b':' {
            return None;
        }
        self.pos += 1;
        self.ws();
        Some(name)
    }

    /// The string whose opening quote is at `pos`: its contents, and whether
    /// they hold escapes.
    #[inline(always)]
    fn string(&mut self) -> Option<(&'a [u8], bool)> {
        let start = self.pos + 1;
        let mut at = start;
        let mut escaped = false;
        loop {
            let end = stop(self.bytes, at)?;
            if self.controls && extremes(&self.bytes[at..end]).0 < 0x20 {
                return None;
            }
            at = end;
            if self.bytes[at] == b'"' {
                self.pos = at + 1;
                return Some((&self.bytes[start..at], escaped));
            }
            escaped = true;
            at = escape_end(self.bytes, at)?;
        }
    }

    /// Past one value of any kind, however nested (up to [`MAX_DEPTH`]).
    #[inline(always)]
    fn value(&mut self) -> Option<()> {
        // Strings and numbers are the usual values (ids are one or the
        // other), and short: they are read here, not in `any_value`'s loop.
        match self.peek()? {
            b'"' => self.string().map(drop),
            b'-' | b'0'..=b'9' => self.number(),
            _ => self.any_value(),
        }
    }

    /// [`Self::value`], out of line.
    fn any_value(&mut self) -> Option<()> {
        // One bit per open container, the innermost lowest: 1 for an object.
        let mut open = 0u64;
        let mut depth = 0;
        loop {
            self.ws();
            match self.peek()? {
                open_with @ (b'{' | b'[') => {
                    self.pos += 1;
                    let object = open_with == b'{';
                    if !self.empty(if object { b'}' } else { b']' }) {
                        if depth == MAX_DEPTH {
                            return None;
                        }
                        depth += 1;
                        open = open << 1 | u64::from(object);
                        if object {
                            self.any_member()?;
                        }
                        continue;
                    }
                }
                b'"' => {
                    self.string()?;
                }
                b't' => self.literal(b"true")?,
                b'f' => self.literal(b"false")?,
                b'n' => self.literal(b"null")?,
                b'-' | b'0'..=b'9' => self.number()?,
                _ => return None,
            }
            // A value has ended: close the containers it ends, up to the
            // next element or member.
            loop {
                if depth == 0 {
                    return Some(());
                }
                self.ws();
                let object = open & 1 == 1;
                match self.peek()? {
                    b',' => {
                        self.pos += 1;
                        if object {
                            self.any_member()?;
                        }
                        break;
                    }
                    b'}' if object => {}
                    b']' if !object => {}
                    _ => return None,
                }
                self.pos += 1;
                open >>= 1;
                depth -= 1;
            }
        }
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.pos + word.len();
        (self.bytes.get(self.pos..end)? == word).then(|| self.pos = end)
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`. A digit right
    /// after a leading zero is left for the caller to reject, as whatever
    /// follows a value must be a delimiter.
    fn number(&mut self) -> Option<()> {
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek()? {
            b'0' => self.pos += 1,
            b'1'..=b'9' => {
                self.digits();
            }
            _ => return None,
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            self.some_digits()?;
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            self.some_digits()?;
        }
        Some(())
    }

    /// Skips digits; how many.
    fn digits(&mut self) -> usize {
        let start = self.pos;
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
        self.pos - start
    }

    fn some_digits(&mut self) -> Option<()> {
        (self.digits() > 0).then_some(())
    }
}

/// Marks a member seen; `None` the second time.
fn once(seen: &mut bool) -> Option<()> {
    (!std::mem::replace(seen, true)).then_some(())
}

#[cfg(test)]
mod tests {
    //! The scan against serde, the reference: whenever the scan accepts a
    //! line, serde must accept it too and find the same members, borrowed
    //! from the same bytes.

    use super::*;

    /// A value's text and where it lies.
    type Place<'a> = Option<(usize, &'a str)>;
    type View<'a> = (
        Place<'a>,
        Option<String>,
        Place<'a>,
        Place<'a>,
        Place<'a>,
        Option<std::ops::Range<usize>>,
        bool,
    );

    fn raw(r: Option<Raw<'_>>) -> Place<'_> {
        r.map(|r| (r.get().as_ptr() as usize, r.get()))
    }

    fn view<'a>(f: &Fields<'a>) -> View<'a> {
        (
            raw(f.id),
            f.method.as_deref().map(str::to_owned),
            raw(f.params.request_id),
            raw(f.params.progress_token),
            raw(f.params.meta_token),
            f.result.clone(),
            f.error,
        )
    }

    /// Compares the scan with serde on `line`; returns whether the scan
    /// answered for it. The scan that keeps the params too must answer for
    /// the same lines, with the same fields, and the params as
    /// `params_object` reads them.
    fn agrees(line: &[u8]) -> bool {
        let both = fields_and_params(line);
        let Some(fast) = fields(line) else {
            assert!(both.is_none(), "{:?}", String::from_utf8_lossy(line));
            return false;
        };
        let (again, params) = both.expect("the same scan");
        assert_eq!(view(&again), view(&fast));
        let alone =
            params_object(line).expect("params_object answers where the envelope scan does");
        assert_eq!(
            params.map(|p| (p.text, p.members)),
            alone.map(|p| (p.text, p.members)),
            "{:?}",
            String::from_utf8_lossy(line)
        );
        let shown = String::from_utf8_lossy(line);
        assert!(
            serde_json::from_slice::<serde::de::IgnoredAny>(line).is_ok(),
            "the scan accepted a line that is not JSON: {shown:?}"
        );
        match Fields::parse(line) {
            Ok(slow) => assert_eq!(view(&fast), view(&slow), "on {shown:?}"),
            Err(e) => panic!("the scan accepted a line serde rejects ({e}): {shown:?}"),
        }
        true
    }

    const TYPICAL: &[&str] = &[
        r#"{"jsonrpc":"2.0","id":1,"method":"bench/echo","params":{"s":"0000000000000001abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789ab"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"result":{"s":"0000000000000001abc"}}"#,
        r#"{"jsonrpc":"2.0","id":"call-7f3a","method":"tools/call","params":{"name":"search_notes","arguments":{"query":"quarterly \"Q3\"","limit":20,"tags":["work","planning"],"x":null,"y":true,"z":-1.5e-3},"_meta":{"progressToken":"7f3a"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"7f3a","progress":40,"total":100,"message":"é 😀 \u00e9 \ud83d\ude00"}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"call-7f3a","reason":"User pressed escape"}}"#,
        r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}}"#,
        r#" { "id" : 7 , "result" : [ ] , "params" : null }	"#,
        "{\"id\":0,\"method\":\"m\",\"params\":[1,{\"a\":[]},\"\\n\"]}\r",
        r#"{"method":"m","params":{"_meta":null,"progressToken":null,"requestId":{"a":[1,2]}}}"#,
        r#"{"method":"m","id":2,"params":{"_meta":{"progressToken":null,"other":{}}}}"#,
        r#"{"method":"m","params":{"_meta":{"progressToken":1},"_meta":{}}}"#,
        r#"{}"#,
        r#"{"id":1}"#,
    ];

    #[test]
    fn typical_messages_are_scanned() {
        for line in TYPICAL {
            assert!(agrees(line.as_bytes()), "left to serde: {line}");
        }
    }

    /// A result whose string holds `inner` after 300 plain bytes.
    fn long(inner: &[u8]) -> Vec<u8> {
        let mut line = b"{\"id\":1,\"result\":\"".to_vec();
        line.extend_from_slice(&[b'a'; 300]);
        line.extend_from_slice(inner);
        line.extend_from_slice(b"z\"}");
        line
    }

    #[test]
    fn edge_cases_agree_with_serde() {
        let cases: &[&[u8]] = &[
            // Not JSON.
            b"{",
            b"{\"id\":1",
            b"{\"id\":1,}",
            b"{,}",
            b"{\"id\" 1}",
            b"{\"id\":1}}",
            b"{\"id\":1} x",
            b"{\"id\":[1}",
            b"{\"id\":{1:2}}",
            b"{\"id\":{\"a\"}}",
            b"{\"id\":[1,]}",
            b"{\"id\":1,\"result\":[1}}",
            b"{\"id\":1,\"result\":{\"a\":1]}",
            b"{\"id\":1,\"result\":[[1]}]}",
            b"{\"id\":[,1]}",
            b"{\"id\":01}",
            b"{\"id\":-01}",
            b"{\"id\":1.}",
            b"{\"id\":.5}",
            b"{\"id\":1e}",
            b"{\"id\":1e+}",
            b"{\"id\":-}",
            b"{\"id\":+1}",
            b"{\"id\":1.5.3}",
            b"{\"id\":tru}",
            b"{\"id\":nul}",
            b"{\"id\":nulll}",
            b"{\"id\":True}",
            b"{\"id\":\"a\x01b\"}",
            &long(b"\x01"),
            &long(b"\t"),
            &long(b"\\q"),
            &long(b"\\u00e9\\\""),
            b"{\"id\":\"a\tb\"}",
            b"{\"id\":\"a\\qb\"}",
            b"{\"id\":\"a\\u12G4\"}",
            b"{\"id\":\"a\\u12\"}",
            b"{\"id\":1,\"result\":\"a\\x1234\"}",
            b"{\"id\":1,\"result\":\"a\\U1234\"}",
            b"{\"id\":1,\"result\":\"\\a\"}",
            b"{\"id\":1,\"result\":\"\\'\"}",
            b"{\"id\":1,\"result\":\"\\0\"}",
            b"{\"id\":\"a\\",
            b"{\"id\":\"\xff\"}",
            b"{\"id\":\"\xc3\"}",
            b"{\"\xc3\xa9\":1,\"id\":1}\xa9",
            b"\x0c{\"id\":1,\"result\":1}",
            b"{\"id\":1,\"result\":1}\x0c",
            b"{\"id\":1\x01,\"result\":1}",
            // JSON, scanned or left to serde.
            b"{\"id\":\"a\\u12aF\\/\\b\\f\\n\\r\\t\\\"\\\\\",\"result\":1}",
            b"{\t\"id\"\r:\t1 ,\"result\":{}}",
            b"{\"id\":-0.0e+00,\"result\":1E5}",
            b"{\"id\":18446744073709551616123,\"result\":1e999}",
            b"{\"id\":\"\xc3\xa9\xf0\x9f\x98\x80\",\"result\":\"\"}",
            b"{\"id\":1,\"id\":2,\"result\":1}",
            b"{\"method\":\"a\",\"method\":\"b\"}",
            b"{\"method\":\"a\",\"params\":null,\"params\":{}}",
            b"{\"id\":1,\"result\":1,\"result\":2}",
            b"{\"id\":1,\"error\":1,\"error\":2}",
            b"{\"\\u0069d\":1,\"result\":1}",
            b"{\"id\":1,\"re\\u0073ult\":1}",
            b"{\"method\":\"notifications/m\\u0065ssage\"}",
            b"{\"method\":\"\\ud800\"}",
            b"{\"method\":\"x\",\"params\":{\"x\":\"\\ud800\"}}",
            b"{\"method\":1}",
            b"{\"method\":null}",
            b"{\"method\":\"m\",\"params\":\"x\"}",
            b"{\"method\":\"m\",\"params\":1}",
            b"{\"method\":\"m\",\"params\":true}",
            b"{\"method\":\"m\",\"params\":[1,2]}",
            b"{\"method\":\"m\",\"params\":{\"_meta\":[\"t\"]}}",
            b"{\"method\":\"m\",\"params\":{\"_meta\":[]}}",
            b"{\"method\":\"m\",\"params\":{\"_meta\":[1,2]}}",
            b"{\"method\":\"m\",\"params\":{\"_meta\":\"x\"}}",
            b"{\"method\":\"m\",\"id\":1,\"params\":{\"_meta\":{\"progressToken\":1,\"progressToken\":2}}}",
            b"{\"method\":\"m\",\"params\":{\"requestId\":1,\"requestId\":2}}",
            b"{\"method\":\"m\",\"params\":{\"request\\u0049d\":1}}",
            b"{\"method\":\"m\",\"params\":{\"_meta\":{\"progress\\u0054oken\":1}}}",
            b"{\"\":1,\"id\":1,\"result\":null}",
        ];
        for line in cases {
            agrees(line);
        }
    }

    #[test]
    fn every_cut_of_a_message_agrees() {
        for line in TYPICAL {
            for end in 0..=line.len() {
                // Cuts inside a multi-byte character are not UTF-8.
                agrees(&line.as_bytes()[..end]);
            }
        }
    }

    #[test]
    fn deep_nesting_is_left_to_serde_past_the_limit() {
        for depth in [1, 63, 64, 65, 200] {
            let line = format!(
                "{{\"id\":1,\"result\":{}1{}}}",
                "[".repeat(depth),
                "]".repeat(depth)
            );
            assert_eq!(agrees(line.as_bytes()), depth <= MAX_DEPTH as usize);
            assert!(Fields::parse(line.as_bytes()).is_ok());
        }
    }

    /// A `params` object as serde reads it: its text and its members.
    type Members<'a> = (&'a str, Vec<(Cow<'a, str>, &'a str)>);

    /// The serde reading of a line's `params` object: an error when serde
    /// rejects the line or a member name, `None` when there is no object.
    fn slow_params(line: &[u8]) -> Result<Option<Members<'_>>, String> {
        use serde::de::{Deserializer, MapAccess, Visitor};

        #[derive(serde::Deserialize)]
        struct Line<'a> {
            #[serde(default, borrow)]
            params: Option<&'a serde_json::value::RawValue>,
        }
        struct Map;
        impl<'de> Visitor<'de> for Map {
            type Value = Vec<(Cow<'de, str>, &'de str)>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut members = Vec::new();
                while let Some(Name(name)) = map.next_key()? {
                    members.push((
                        name,
                        map.next_value::<&serde_json::value::RawValue>()?.get(),
                    ));
                }
                Ok(members)
            }
        }
        struct Name<'a>(Cow<'a, str>);
        impl<'de> serde::Deserialize<'de> for Name<'de> {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct Visit;
                impl<'de> Visitor<'de> for Visit {
                    type Value = Name<'de>;
                    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        f.write_str("a name")
                    }
                    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                        Ok(Name(Cow::Borrowed(v)))
                    }
                    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                        Ok(Name(Cow::Owned(v.to_owned())))
                    }
                }
                d.deserialize_str(Visit)
            }
        }

        let text = std::str::from_utf8(line).map_err(|e| e.to_string())?;
        let params = serde_json::from_str::<Line<'_>>(text).map_err(|e| e.to_string())?;
        let Some(params) = params.params.filter(|p| p.get().starts_with('{')) else {
            return Ok(None);
        };
        let members = serde_json::Deserializer::from_str(params.get())
            .deserialize_map(Map)
            .map_err(|e| e.to_string())?;
        Ok(Some((params.get(), members)))
    }

    /// A params reading with where each text starts, so that borrowing from
    /// the line (not from a copy) is compared too, and whether each name is
    /// borrowed.
    type Placed<'a> = (usize, &'a str, Vec<(Cow<'a, str>, bool, usize, &'a str)>);

    fn placed<'a>((text, members): &Members<'a>) -> Placed<'a> {
        let at = |s: &str| s.as_ptr() as usize;
        let members = members
            .iter()
            .map(|(k, v)| (k.clone(), matches!(k, Cow::Borrowed(_)), at(v), *v))
            .collect();
        (at(text), text, members)
    }

    /// Compares the params scan with serde on `line`; returns whether the
    /// scan answered for it.
    fn params_agree(line: &[u8]) -> bool {
        let Some(fast) = params_object(line) else {
            return false;
        };
        let shown = String::from_utf8_lossy(line);
        assert!(
            serde_json::from_slice::<serde::de::IgnoredAny>(line).is_ok(),
            "the params scan accepted a line that is not JSON: {shown:?}"
        );
        match slow_params(line) {
            Ok(slow) => {
                let fast = fast.map(|p| {
                    let members = p.members.into_iter().map(|(k, v)| (k, v.get()));
                    (p.text, members.collect())
                });
                assert_eq!(
                    fast.as_ref().map(placed),
                    slow.as_ref().map(placed),
                    "on {shown:?}"
                );
            }
            Err(e) => panic!("the params scan accepted a line serde rejects ({e}): {shown:?}"),
        }
        true
    }

    /// The `_meta` members kept by the envelope's scan are those `object`
    /// reads from the `_meta` member's text, when kept at all.
    #[test]
    fn meta_members_kept_with_the_params_are_the_meta_object_s() {
        let lines: &[&str] = &[
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"x":{}},"progressToken":3}}}"#,
            r#"{"id":1,"method":"m","params":{"_meta":{}}}"#,
            r#"{"id":1,"method":"m","params":{"_meta": { "a" : [1,2] , "b":null } }}"#,
            r#"{"id":1,"method":"m","params":{"_meta":null}}"#,
            r#"{"id":1,"method":"m","params":{"_meta":{"a":1},"_meta":{"b":2}}}"#,
            r#"{"id":1,"method":"m","params":{"a":1}}"#,
        ];
        let mut kept = 0;
        for line in lines {
            let (_, params) = fields_and_params(line.as_bytes()).expect("scanned");
            let params = params.expect("params");
            let metas: Vec<_> = params
                .members
                .iter()
                .filter(|(k, _)| k == "_meta")
                .collect();
            match &params.meta {
                Some(meta) => {
                    kept += 1;
                    assert_eq!(metas.len(), 1, "{line}");
                    let read = object(metas[0].1.get()).expect("an object");
                    let a: Vec<_> = meta.iter().map(|(k, v)| (k.clone(), v.get())).collect();
                    let b: Vec<_> = read
                        .members
                        .iter()
                        .map(|(k, v)| (k.clone(), v.get()))
                        .collect();
                    assert_eq!(a, b, "{line}");
                }
                None => assert!(
                    metas.len() != 1 || !metas[0].1.get().starts_with('{'),
                    "{line}"
                ),
            }
        }
        assert_eq!(kept, 3);
    }

    #[test]
    fn typical_params_are_scanned() {
        for line in TYPICAL {
            assert!(params_agree(line.as_bytes()), "left to serde: {line}");
        }
    }

    #[test]
    fn params_edge_cases_agree_with_serde() {
        let cases: &[&[u8]] = &[
            b"{\"params\":{}}",
            b"{\"params\": { } }",
            b"{\"params\":{\"a\":1}",
            b"{\"params\":{\"a\":1}}}",
            b"{\"params\":{\"a\":1,}}",
            b"{\"params\":{\"a\"}}",
            b"{\"params\":{\"a\":}}",
            b"{\"params\":{a:1}}",
            b"{\"params\":{\"a\":01}}",
            b"{\"params\":{\"a\":\"\\q\"}}",
            b"{\"params\":{\"a\":\"\x01\"}}",
            b"{\"params\":{\"a\x01\":1}}",
            b"{\"params\":{\"a\":\"\xff\"}}",
            b"{\"params\":{\"a\":1}} x",
            b"{\"params\":{\"a\":1}}\x0c",
            b"[{\"a\":1}]",
            b"[]",
            b"\"params\"",
            b"{\"params\":null}",
            b"{\"params\":[1,{\"a\":2}]}",
            b"{\"params\":\"{}\"}",
            b"{\"params\":1}",
            b"{\"params\":true}",
            b"{\"params\":{\"a\":1},\"params\":{\"b\":2}}",
            b"{\"params\":null,\"params\":{\"b\":2}}",
            b"{\"par\\u0061ms\":{\"a\":1}}",
            b"{\"id\":1,\"id\":2,\"params\":{\"a\":1}}",
            b"{\"x\":{\"params\":{\"a\":1}},\"params\":{\"b\":[]}}",
            b"{\"params\":{\"a\":1,\"a\":2,\"b\":{\"a\":3},\"a\":4}}",
            b"{\"params\":{\"\\u0061\":1,\"b\\\"c\":2,\"\\ud83d\\ude00\":3,\"\":4}}",
            b"{\"params\":{\"\\ud800\":1}}",
            b"{\"params\":{\"\\udc00x\":1}}",
            b"{\"params\":{\"\\ud83d\\u0041\":1}}",
            b"{\"params\":{\"a\":\"\\ud800\"}}",
            b"{\"params\":{\"\xc3\xa9\":\"\xf0\x9f\x98\x80\",\"b\":\"\\u00e9\"}}",
            b"{\"params\":{\"\xc3\xa9\":1}}\xa9",
            b"{\"params\":{\n\t\"a\"\r:\t1 ,\"b\" : [ ] \n}\r\n}",
            b"{\"params\":{\"a\":-0.0e+00,\"b\":18446744073709551616123,\"c\":1e999}}",
        ];
        for line in cases {
            params_agree(line);
        }
        // What the scan answers for itself, not leaving it to serde.
        for line in [
            &b"{\"params\":{}}"[..],
            b"{\"params\":null}",
            b"{\"params\":[1]}",
            b"{\"id\":1}",
            b"{\"params\":{\"a\":1,\"a\":2}}",
            b"{\"params\":{\"\\u0061\":1}}",
            b"{\"params\":{\"\xc3\xa9\":\"\xf0\x9f\x98\x80\",\"b\":\"\\u00e9\"}}",
        ] {
            assert!(params_agree(line), "{}", String::from_utf8_lossy(line));
        }
        // What it leaves to serde though serde reads it (or fails to read
        // a name).
        for line in [
            &b"{\"params\":{\"\\ud800\":1}}"[..],
            b"{\"params\":{},\"params\":{}}",
            b"{\"par\\u0061ms\":{}}",
        ] {
            assert!(
                params_object(line).is_none(),
                "{}",
                String::from_utf8_lossy(line)
            );
        }
    }

    #[test]
    fn every_cut_of_a_message_agrees_on_params() {
        for line in TYPICAL {
            for end in 0..=line.len() {
                params_agree(&line.as_bytes()[..end]);
            }
        }
    }

    #[test]
    fn deep_params_are_left_to_serde_past_the_limit() {
        for depth in [1, 63, 64, 65, 200] {
            let line = format!(
                "{{\"params\":{{\"a\":{}1{}}}}}",
                "[".repeat(depth),
                "]".repeat(depth)
            );
            assert_eq!(params_agree(line.as_bytes()), depth <= MAX_DEPTH as usize);
            assert!(slow_params(line.as_bytes()).is_ok_and(|p| p.is_some()));
        }
    }

    /// `object` reads a `params` object the scan of its line accepted as
    /// that scan did, with whitespace around it too, and refuses what is
    /// not one whole object.
    fn object_agrees(line: &[u8]) {
        let Some(Some(p)) = params_object(line) else {
            return;
        };
        let want = (p.text, p.members);
        for text in [p.text.to_owned(), format!(" \t{}\r\n ", p.text)] {
            let got = object(&text).map(|o| (o.text, o.members));
            assert_eq!(got.as_ref(), Some(&want), "{text:?}");
        }
        for broken in [format!("{} x", p.text), format!("[{}]", p.text)] {
            assert!(object(&broken).is_none(), "{broken:?}");
        }
    }

    #[test]
    fn objects_are_read_as_params_are() {
        for line in TYPICAL {
            object_agrees(line.as_bytes());
        }
        let mut cases = crate::differential::Cases::new(0x6F62_6A65_6374);
        for _ in 0..10_000 {
            object_agrees(&cases.next_params_line());
        }
        for text in [
            "",
            "1",
            "[]",
            "\"{}\"",
            "{",
            "{\"a\":1,}",
            "{\"\\ud800\":1}",
        ] {
            assert!(object(text).is_none(), "{text:?}");
        }
    }

    #[test]
    fn random_params_agree_with_serde() {
        let mut cases = crate::differential::Cases::new(0x9E37_79B9_7F4A_7C15);
        let (mut scanned, mut valid) = (0, 0);
        for _ in 0..30_000 {
            let line = cases.next_params_line();
            valid += usize::from(slow_params(&line).is_ok());
            scanned += usize::from(params_agree(&line));
        }
        // Most lines serde reads are the scan's own.
        assert!(
            scanned * 2 > valid,
            "the params scan answered for {scanned} of {valid} valid lines"
        );
    }

    #[test]
    fn random_lines_agree_with_serde() {
        let mut cases = crate::differential::Cases::new(0x2545_F491_4F6C_DD1D);
        let (mut scanned, mut valid) = (0, 0);
        for _ in 0..30_000 {
            let line = cases.next_line();
            valid += usize::from(Fields::parse(&line).is_ok());
            scanned += usize::from(agrees(&line));
            params_agree(&line);
        }
        // Most valid lines are the scan's own, not serde's.
        assert!(
            scanned * 2 > valid,
            "the scan answered for {scanned} of {valid} valid lines"
        );
    }
}
