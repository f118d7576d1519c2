//! The strict-JSON scan itself: one pass over a document's bytes, no tree built, no
//! recursion. Nesting lives on an explicit stack on the heap, so the depth a document may
//! reach (orjson's 1,024 levels) never depends on the stack of the thread that calls it:
//! the recursive scanner this replaces needed 256-384 KiB of stack at 1,024 levels
//! (issue 33).

use std::borrow::Cow;
use std::collections::HashSet;

/// orjson's own nesting limit: a document nested deeper is not JSON it reads.
pub const ORJSON_MAX_DEPTH: usize = 1024;
/// Above this many keys an object's keys go into a hash set (below, a scan is cheaper).
const LINEAR_KEYS: usize = 16;

/// What is wrong with a document, as `(kind, detail)`; `None` from `scan` means nothing.
/// kinds: "json" (not strict JSON: detail is the message), "type" (not an object: detail
/// is the JSON type's name), "depth" (too deep), "integer" (detail: the literal),
/// "duplicate_key" (detail: the key).
pub type Verdict = (&'static str, String);

/// Read `value` once: `None` when the project can carry it, else the first problem in the
/// reference's order: strict JSON, then (when `object` is asked for) an object, then the
/// depth its walk of the tree finds, then the integer or key its exact re-parse meets
/// first. Without `object` any JSON document gets the same checks (`parse_json`'s).
pub fn scan(value: &[u8], max_depth: usize, max_integer: u64, object: bool) -> Option<Verdict> {
    if let Err(err) = std::str::from_utf8(value) {
        return Some((
            "json",
            format!("str is not valid UTF-8 at byte {}", err.valid_up_to()),
        ));
    }
    let mut scanner = Scanner {
        bytes: value,
        at: 0,
        max_depth,
        max_integer,
        depth: None,
        other: None,
        keys: Vec::with_capacity(32),
    };
    if let Err(message) = scanner.document() {
        return Some(("json", format!("{message} at byte {}", scanner.at)));
    }
    let kind = match value[scanner.first_byte()] {
        b'{' => None,
        b'[' => Some("array"),
        b'"' => Some("string"),
        b't' | b'f' => Some("boolean"),
        b'n' => Some("null"),
        _ => Some("number"),
    };
    match kind {
        Some(name) if object => Some(("type", name.to_owned())),
        _ => scanner.depth.or(scanner.other),
    }
}

struct Scanner<'a> {
    bytes: &'a [u8],
    at: usize,
    max_depth: usize,
    max_integer: u64,
    /// The first nesting beyond `max_depth`.
    depth: Option<Verdict>,
    /// The first integer beyond the limit or duplicate key, in the order the reference's
    /// exact re-parse meets them (an integer where it stands, an object when it closes).
    other: Option<Verdict>,
    /// The keys of the objects open now, outermost first: one allocation per document,
    /// where a set per object cost more than the scan of the text.
    keys: Vec<Cow<'a, [u8]>>,
}

/// An array or object open at the point the scan has reached.
enum Open<'a> {
    Array,
    Object(Members<'a>),
}

/// What an open object has shown so far: where its keys start in `Scanner::keys`, the set
/// they moved to once there were many, and the smallest key seen twice.
struct Members<'a> {
    first: usize,
    many: Option<HashSet<Cow<'a, [u8]>>>,
    twice: Option<Cow<'a, [u8]>>,
}

type Step<T> = Result<T, &'static str>;

impl<'a> Scanner<'a> {
    /// The document: each value is read where it stands; a bracket pushes what it opens on
    /// `open` (bounded by ORJSON_MAX_DEPTH, on the heap) and the loop goes on inside it.
    fn document(&mut self) -> Step<()> {
        let mut open: Vec<Open<'a>> = Vec::new();
        loop {
            self.skip_whitespace();
            match self.peek()? {
                b'{' => {
                    self.enter(open.len() + 1)?;
                    if self.peek()? != b'}' {
                        let mut members = Members {
                            first: self.keys.len(),
                            many: None,
                            twice: None,
                        };
                        self.member_key(&mut members)?;
                        open.push(Open::Object(members));
                        continue;
                    }
                    self.at += 1;
                }
                b'[' => {
                    self.enter(open.len() + 1)?;
                    if self.peek()? != b']' {
                        open.push(Open::Array);
                        continue;
                    }
                    self.at += 1;
                }
                b'"' => {
                    self.string()?;
                }
                b't' => self.literal(b"true")?,
                b'f' => self.literal(b"false")?,
                b'n' => self.literal(b"null")?,
                b'-' | b'0'..=b'9' => self.number()?,
                _ => return Err("unexpected character"),
            }
            // A value ended: close what it ended, up to the container that goes on.
            if !self.after_value(&mut open)? {
                break;
            }
        }
        self.skip_whitespace();
        if self.at != self.bytes.len() {
            return Err("unexpected content after document");
        }
        Ok(())
    }

    /// After a value: closes every container that ends here; `true` when another value
    /// follows inside the innermost one still open (its key read), `false` at the end of
    /// the document's top value.
    fn after_value(&mut self, open: &mut Vec<Open<'a>>) -> Step<bool> {
        loop {
            self.skip_whitespace();
            match open.last_mut() {
                None => return Ok(false),
                Some(Open::Array) => match self.peek()? {
                    b',' => {
                        self.at += 1;
                        return Ok(true);
                    }
                    b']' => {
                        self.at += 1;
                        open.pop();
                    }
                    _ => return Err("expected ',' or ']'"),
                },
                Some(Open::Object(members)) => match self.peek()? {
                    b',' => {
                        self.at += 1;
                        self.member_key(members)?;
                        return Ok(true);
                    }
                    b'}' => {
                        self.at += 1;
                        if let Some(Open::Object(members)) = open.pop() {
                            self.close_object(members);
                        }
                    }
                    _ => return Err("expected ',' or '}'"),
                },
            }
        }
    }

    fn first_byte(&self) -> usize {
        self.bytes
            .iter()
            .position(|b| !is_whitespace(*b))
            .unwrap_or(0)
    }

    fn skip_whitespace(&mut self) {
        while self.at < self.bytes.len() && is_whitespace(self.bytes[self.at]) {
            self.at += 1;
        }
    }

    fn peek(&self) -> Step<u8> {
        self.bytes
            .get(self.at)
            .copied()
            .ok_or("unexpected end of data")
    }

    /// An array or object opening at nesting `depth` (the top value's is 1).
    fn enter(&mut self, depth: usize) -> Step<()> {
        if depth > ORJSON_MAX_DEPTH {
            return Err("depth limit exceeded");
        }
        if depth > self.max_depth && self.depth.is_none() {
            self.depth = Some(("depth", String::new()));
        }
        self.at += 1; // the opening bracket
        self.skip_whitespace();
        Ok(())
    }

    /// One member's key and its colon; a key the object already has is remembered.
    fn member_key(&mut self, members: &mut Members<'a>) -> Step<()> {
        self.skip_whitespace();
        if self.peek()? != b'"' {
            return Err("key must be a string");
        }
        let key = self.string()?;
        let first = members.first;
        let seen = match &mut members.many {
            Some(set) => !set.insert(key.clone()),
            None => self.keys[first..].contains(&key),
        };
        if seen {
            // The reference names the smallest of an object's keys seen twice.
            if members
                .twice
                .as_ref()
                .is_none_or(|smallest| key < *smallest)
            {
                members.twice = Some(key);
            }
        } else if members.many.is_none() {
            self.keys.push(key);
            if self.keys.len() - first > LINEAR_KEYS {
                members.many = Some(self.keys.drain(first..).collect());
            }
        }
        self.skip_whitespace();
        if self.peek()? != b':' {
            return Err("expected ':'");
        }
        self.at += 1;
        Ok(())
    }

    /// An object closed: its keys forgotten, a key it had twice reported if nothing was.
    fn close_object(&mut self, members: Members<'a>) {
        self.keys.truncate(members.first);
        if let (None, Some(key)) = (&self.other, members.twice) {
            // Keys are valid UTF-8 here: the whole input was, and escapes decode to it.
            self.other = Some(("duplicate_key", String::from_utf8_lossy(&key).into_owned()));
        }
    }

    fn literal(&mut self, word: &'static [u8]) -> Step<()> {
        let end = self.at + word.len();
        if end > self.bytes.len() {
            return Err("unexpected end of data");
        }
        if &self.bytes[self.at..end] != word {
            return Err("unexpected character");
        }
        self.at = end;
        Ok(())
    }

    fn digits(&mut self) -> usize {
        let start = self.at;
        while self.at < self.bytes.len() && self.bytes[self.at].is_ascii_digit() {
            self.at += 1;
        }
        self.at - start
    }

    fn number(&mut self) -> Step<()> {
        let start = self.at;
        let negative = self.bytes[self.at] == b'-';
        if negative {
            self.at += 1;
        }
        let leading = self.peek()?;
        if !leading.is_ascii_digit() {
            return Err("no digit after sign");
        }
        let whole_digits = self.digits();
        if whole_digits > 1 && leading == b'0' {
            return Err("number with leading zero is not allowed");
        }
        let mut exponent = false;
        let mut integer = true;
        if self.bytes.get(self.at) == Some(&b'.') {
            self.at += 1;
            if self.digits() == 0 {
                return Err(if self.at == self.bytes.len() {
                    "unexpected end of data"
                } else {
                    "expected a digit after '.'"
                });
            }
            integer = false;
        }
        if matches!(self.bytes.get(self.at), Some(b'e' | b'E')) {
            exponent = true;
            self.at += 1;
            if matches!(self.bytes.get(self.at), Some(b'+' | b'-')) {
                self.at += 1;
            }
            if self.digits() == 0 {
                return Err(if self.at == self.bytes.len() {
                    "unexpected end of data"
                } else {
                    "expected a digit in the exponent"
                });
            }
            integer = false;
        }
        let text = &self.bytes[start..self.at];
        if integer && self.integer_fits(text, negative) {
            return Ok(());
        }
        if !integer && !exponent && whole_digits <= 308 {
            return Ok(()); // below 1e308 without an exponent: a finite double
        }
        // orjson reads an integer beyond 64 bits, and every fraction, as a double, and
        // refuses one that overflows it; ASCII digits and signs are valid UTF-8.
        let literal = std::str::from_utf8(text).unwrap_or_default();
        if literal.parse::<f64>().map_or(true, f64::is_infinite) {
            return Err("number is infinity when parsed as double");
        }
        if integer && self.other.is_none() {
            self.other = Some(("integer", literal.to_owned()));
        }
        Ok(())
    }

    /// Whether an integer literal lies within `-max_integer - 1 ..= max_integer`.
    fn integer_fits(&self, text: &[u8], negative: bool) -> bool {
        let digits = if negative { &text[1..] } else { text };
        let mut magnitude: u64 = 0;
        for digit in digits {
            match magnitude
                .checked_mul(10)
                .and_then(|m| m.checked_add(u64::from(digit - b'0')))
            {
                Some(next) => magnitude = next,
                None => return false,
            }
        }
        let limit = if negative {
            self.max_integer.saturating_add(1)
        } else {
            self.max_integer
        };
        magnitude <= limit
    }

    /// One string, its quotes consumed; its text (escapes decoded) for an object's key.
    fn string(&mut self) -> Step<Cow<'a, [u8]>> {
        self.at += 1; // the opening quote
        let mut start = self.at;
        let mut decoded: Option<Vec<u8>> = None;
        loop {
            self.at = plain_text_end(self.bytes, self.at);
            let bytes: &'a [u8] = self.bytes;
            let segment = &bytes[start..self.at];
            match self.peek()? {
                b'"' => {
                    self.at += 1;
                    return Ok(match decoded {
                        None => Cow::Borrowed(segment),
                        Some(mut text) => {
                            text.extend_from_slice(segment);
                            Cow::Owned(text)
                        }
                    });
                }
                b'\\' => {
                    let ch = self.escape()?;
                    let text = decoded.get_or_insert_with(Vec::new);
                    text.extend_from_slice(segment);
                    text.extend_from_slice(ch.encode_utf8(&mut [0u8; 4]).as_bytes());
                    start = self.at;
                }
                _ => return Err("unexpected control character in string"),
            }
        }
    }

    /// One escape after its backslash, as the character it stands for.
    fn escape(&mut self) -> Step<char> {
        self.at += 1; // the backslash
        let kind = self.peek()?;
        self.at += 1;
        let simple = match kind {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => return self.unicode_escape(),
            _ => return Err("invalid escaped sequence in string"),
        };
        Ok(simple)
    }

    fn unicode_escape(&mut self) -> Step<char> {
        let first = self.hex4()?;
        let code = match first {
            0xD800..=0xDBFF => {
                if self.bytes.get(self.at..self.at + 2) != Some(b"\\u") {
                    return Err("no low surrogate in string");
                }
                self.at += 2;
                let second = self.hex4()?;
                if !(0xDC00..=0xDFFF).contains(&second) {
                    return Err("invalid low surrogate in string");
                }
                0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00)
            }
            0xDC00..=0xDFFF => return Err("invalid high surrogate in string"),
            _ => first,
        };
        char::from_u32(code).ok_or("invalid escaped sequence in string")
    }

    fn hex4(&mut self) -> Step<u32> {
        let digits = self
            .bytes
            .get(self.at..self.at + 4)
            .ok_or("unexpected end of data")?;
        let text = std::str::from_utf8(digits).map_err(|_| "invalid escape")?;
        if !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err("invalid escape");
        }
        self.at += 4;
        u32::from_str_radix(text, 16).map_err(|_| "invalid escape")
    }
}

fn is_whitespace(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | b'\r')
}

/// The first byte from `at` on that ends a string's plain text (`"`, `\\` or a control
/// character), or the end: eight bytes per step, since strings are most of a record.
fn plain_text_end(bytes: &[u8], mut at: usize) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // Flags each byte below `n`; the lowest flag is always exact (a borrow only flags
    // bytes above a true one), and the lowest is all that is read.
    let below = |word: u64, n: u64| word.wrapping_sub(ONES * n) & !word & HIGH;
    while let Some(chunk) = bytes.get(at..at + 8) {
        let word = u64::from_le_bytes(chunk.try_into().unwrap_or_default());
        let flags =
            below(word ^ (ONES * 0x22), 1) | below(word ^ (ONES * 0x5C), 1) | below(word, 0x20);
        if flags != 0 {
            return at + (flags.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    while at < bytes.len() && !matches!(bytes[at], b'"' | b'\\' | 0..=0x1F) {
        at += 1;
    }
    at
}

#[cfg(test)]
mod tests;
