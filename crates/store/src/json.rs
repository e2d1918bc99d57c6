//! JSON syntax checking for queue payloads.
//!
//! A JSON payload is stored as the text the sender wrote; the host never
//! builds a value from it. So the check is exactly RFC 8259's grammar and
//! nothing more: any nesting depth (the payload size limit bounds it), any
//! number however large (`1e999`), any `\uXXXX` escape (a lone surrogate
//! such as `\ud800` is valid JSON text even though it is not a Unicode
//! scalar value). A parser that builds values refuses some of those; this
//! checker does not, and it runs in one pass with an explicit stack, so no
//! input can exhaust the host's call stack.

/// Checks that `text` is one JSON value with optional surrounding
/// whitespace. The error says what is wrong and at which byte.
pub fn check(text: &str) -> Result<(), String> {
    let mut p = Parser {
        b: text.as_bytes(),
        i: 0,
    };
    p.value()?;
    p.ws();
    if p.i < p.b.len() {
        return Err(p.err("unexpected text after the JSON value"));
    }
    Ok(())
}

struct Parser<'a> {
    b: &'a [u8],
    i: usize,
}

/// What an open container expects next.
#[derive(Clone, Copy, PartialEq)]
enum Frame {
    /// Inside an array.
    Array,
    /// Inside an object.
    Object,
}

impl Parser<'_> {
    fn err(&self, what: &str) -> String {
        format!("{what} at byte {}", self.i)
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    fn expect(&mut self, c: u8, what: &str) -> Result<(), String> {
        self.ws();
        if self.peek() == Some(c) {
            self.i += 1;
            Ok(())
        } else {
            Err(self.err(what))
        }
    }

    /// One value, containers included, without recursion.
    fn value(&mut self) -> Result<(), String> {
        let mut stack: Vec<Frame> = Vec::new();
        loop {
            // A value starts here.
            self.ws();
            match self.peek() {
                Some(b'[') => {
                    self.i += 1;
                    self.ws();
                    if self.peek() == Some(b']') {
                        self.i += 1;
                    } else {
                        stack.push(Frame::Array);
                        continue;
                    }
                }
                Some(b'{') => {
                    self.i += 1;
                    self.ws();
                    if self.peek() == Some(b'}') {
                        self.i += 1;
                    } else {
                        self.string()?;
                        self.expect(b':', "expected ':' after an object key")?;
                        stack.push(Frame::Object);
                        continue;
                    }
                }
                Some(b'"') => self.string()?,
                Some(b'-' | b'0'..=b'9') => self.number()?,
                Some(b't') => self.literal(b"true")?,
                Some(b'f') => self.literal(b"false")?,
                Some(b'n') => self.literal(b"null")?,
                Some(_) => return Err(self.err("expected a JSON value")),
                None => return Err(self.err("unexpected end of text, expected a JSON value")),
            }
            // A value ended: close containers until one expects more.
            loop {
                let Some(&frame) = stack.last() else {
                    return Ok(());
                };
                self.ws();
                match (frame, self.peek()) {
                    (_, Some(b',')) => {
                        self.i += 1;
                        if frame == Frame::Object {
                            self.ws();
                            self.string()?;
                            self.expect(b':', "expected ':' after an object key")?;
                        }
                        break;
                    }
                    (Frame::Array, Some(b']')) | (Frame::Object, Some(b'}')) => {
                        self.i += 1;
                        stack.pop();
                    }
                    (Frame::Array, _) => return Err(self.err("expected ',' or ']' in an array")),
                    (Frame::Object, _) => return Err(self.err("expected ',' or '}' in an object")),
                }
            }
        }
    }

    fn literal(&mut self, word: &[u8]) -> Result<(), String> {
        if self.b[self.i..].starts_with(word) {
            self.i += word.len();
            Ok(())
        } else {
            Err(self.err("expected true, false or null"))
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.i;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.i += 1;
        }
        self.i - start
    }

    fn number(&mut self) -> Result<(), String> {
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.peek() {
            Some(b'0') => {
                self.i += 1;
                if matches!(self.peek(), Some(b'0'..=b'9')) {
                    return Err(self.err("a number has a leading zero"));
                }
            }
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return Err(self.err("expected a digit")),
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            if self.digits() == 0 {
                return Err(self.err("expected a digit after the decimal point"));
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.i += 1;
            }
            if self.digits() == 0 {
                return Err(self.err("expected a digit in the exponent"));
            }
        }
        Ok(())
    }

    /// A string, starting at its opening quote.
    fn string(&mut self) -> Result<(), String> {
        if self.peek() != Some(b'"') {
            return Err(self.err("expected a string"));
        }
        self.i += 1;
        loop {
            match self.peek() {
                None => return Err(self.err("unterminated string")),
                Some(b'"') => {
                    self.i += 1;
                    return Ok(());
                }
                Some(b'\\') => {
                    self.i += 1;
                    match self.peek() {
                        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => {
                            self.i += 1;
                        }
                        Some(b'u') => {
                            self.i += 1;
                            for _ in 0..4 {
                                if !self.peek().is_some_and(|c| c.is_ascii_hexdigit()) {
                                    return Err(self.err("expected 4 hex digits after \\u"));
                                }
                                self.i += 1;
                            }
                        }
                        _ => return Err(self.err("invalid escape in a string")),
                    }
                }
                Some(0..0x20) => {
                    return Err(self.err("unescaped control character in a string"));
                }
                // The text is UTF-8 already (it is a Rust string).
                Some(_) => self.i += 1,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::check;

    #[test]
    fn accepts_valid_json_a_value_parser_refuses() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let deep_objects = format!("{}1{}", r#"{"a":"#.repeat(10_000), "}".repeat(10_000));
        for ok in [
            "1e999",
            "-1E-999",
            "123456789012345678901234567890",
            r#""\ud800""#,
            r#""\uDFFF\u0000""#,
            r#"{"a": [1, 2.5, -0, true, false, null, "x\n\"y\"\\\/"], "b": {}}"#,
            " \t\r\n[] ",
            "\"é ✓ 𝄞\"",
            &deep,
            &deep_objects,
        ] {
            assert_eq!(check(ok), Ok(()), "{:.40}", ok);
        }
    }

    #[test]
    fn refuses_what_is_not_json_and_says_where() {
        for (bad, why) in [
            ("", "end of text"),
            ("   ", "end of text"),
            ("[1,]", "expected a JSON value"),
            ("[1 2]", "expected ',' or ']'"),
            ("{\"a\" 1}", "expected ':'"),
            ("{\"a\":1,}", "expected a string"),
            ("{1:2}", "expected a string"),
            ("01", "leading zero"),
            ("1.", "after the decimal point"),
            ("1e", "exponent"),
            ("-", "expected a digit"),
            ("+1", "expected a JSON value"),
            ("NaN", "expected a JSON value"),
            ("'a'", "expected a JSON value"),
            ("\"a", "unterminated"),
            ("\"\\x\"", "invalid escape"),
            ("\"\\u12G4\"", "4 hex digits"),
            ("\"a\tb\"", "control character"),
            ("[] []", "after the JSON value"),
            ("tru", "true, false or null"),
            ("[[[[", "end of text"),
        ] {
            match check(bad) {
                Err(e) => assert!(e.contains(why) && e.contains("at byte"), "{bad:?}: {e}"),
                Ok(()) => panic!("{bad:?} accepted"),
            }
        }
    }
}
