//! Just enough of YAML's flow syntax (`{a: 1, b: [2, 3]}`) for the reader's problems to be
//! blanked out of the text entry by entry, so that what follows still reads as written.

/// Whether `line`:`column` (1-based) of `text` is inside a flow collection (`{…}`, `[…]`).
pub(super) fn inside_flow(text: &str, line: usize, column: usize) -> bool {
    let Some(index) = line.checked_sub(1) else {
        return false;
    };
    let before: usize = text.lines().take(index).map(|l| l.len() + 1).sum();
    let Some(this) = text.lines().nth(index) else {
        return false;
    };
    let within = this
        .char_indices()
        .nth(column.saturating_sub(1))
        .map_or(this.len(), |(i, _)| i);
    flow_entry_end(text, before + within).is_some()
}

/// Where a flow list or mapping that starts at byte `at` of `text` (at its `[` or `{`) ends:
/// just past its closing bracket. `None` when none starts there, or it never closes.
pub(super) fn flow_value_end(text: &str, at: usize) -> Option<usize> {
    if !text[at..].starts_with(['[', '{']) {
        return None;
    }
    let mut scan = FlowScan::default();
    for (i, c) in text[at..].char_indices() {
        scan.step(c);
        if scan.open == 0 {
            return Some(at + i + c.len_utf8());
        }
    }
    None
}

/// Where the entry of a flow collection (`{a: 1, b: [2, 3]}`) that starts at byte `at` of
/// `text` ends: past its comma, or at the bracket that closes the collection, on this line or
/// a later one. `None` when `at` is not inside a flow collection.
pub(super) fn flow_entry_end(text: &str, at: usize) -> Option<usize> {
    let mut scan = FlowScan::default();
    text[..at].chars().for_each(|c| scan.step(c));
    if scan.open == 0 || scan.quote.is_some() || scan.comment {
        return None;
    }
    let base = scan.open;
    for (i, c) in text[at..].char_indices() {
        if scan.quote.is_none() && !scan.comment && scan.open == base {
            match c {
                ',' => return Some(at + i + 1),
                '}' | ']' => return Some(at + i),
                _ => {}
            }
        }
        scan.step(c);
    }
    None
}

/// Where the key at `line`:`column` (1-based) sits, when it is in a flow mapping written on
/// the line of a block key: `(the block key's value column, None)` for the mapping that is the
/// value itself (`auth: {type: basic, usernme: x}`), `(…, Some(i))` for the `i`th mapping of a
/// flow list there (`allow: [{…}, {bogus: 1}]`). `None` elsewhere, or deeper.
pub(super) fn flow_mapping_at(
    text: &str,
    line: usize,
    column: usize,
) -> Option<(usize, Option<usize>)> {
    let this = text.lines().nth(line.checked_sub(1)?)?;
    let key_at = this.char_indices().nth(column.checked_sub(1)?)?.0;
    let value_at = this.find(['{', '['])?;
    if value_at >= key_at || !this[..value_at].trim_end().ends_with(':') {
        return None;
    }
    let (mut scan, mut stack, mut items) = (FlowScan::default(), Vec::new(), 0);
    for c in this[value_at..key_at].chars() {
        if scan.quote.is_none() && !scan.comment {
            match c {
                '{' | '[' => stack.push(c),
                '}' | ']' => {
                    stack.pop();
                }
                ',' if stack.len() == 1 => items += 1,
                _ => {}
            }
        }
        scan.step(c);
    }
    let column = this[..value_at].chars().count() + 1;
    match stack.as_slice() {
        ['{'] => Some((column, None)),
        ['[', '{'] => Some((column, Some(items))),
        _ => None,
    }
}

/// Just enough of YAML's flow syntax to know, character by character, how many `{`/`[` are
/// open: quoted scalars (`"…\"…"`, `'…''…'`, a quote only where a scalar starts, so the
/// apostrophe of `o'neil` is text) and comments (`#` after a space) hide brackets and commas.
#[derive(Default)]
struct FlowScan {
    open: usize,
    quote: Option<char>,
    escaped: bool,
    /// A single quote just closed: a second one right after it is an escaped quote.
    maybe_doubled: bool,
    comment: bool,
    /// The last character outside quotes and comments that was not a space.
    last: Option<char>,
    after_space: bool,
}

impl FlowScan {
    fn step(&mut self, c: char) {
        if self.comment {
            self.comment = c != '\n';
            self.after_space = true;
            return;
        }
        if std::mem::take(&mut self.maybe_doubled) && c == '\'' {
            self.quote = Some('\'');
            return;
        }
        if let Some(q) = self.quote {
            if std::mem::take(&mut self.escaped) {
                return;
            }
            if q == '"' && c == '\\' {
                self.escaped = true;
            } else if c == q {
                self.quote = None;
                self.maybe_doubled = q == '\'';
                self.last = Some(c);
                self.after_space = false;
            }
            return;
        }
        match c {
            '#' if self.after_space || self.last.is_none() => {
                self.comment = true;
                return;
            }
            '"' | '\'' if matches!(self.last, None | Some('{' | '[' | ',' | ':')) => {
                self.quote = Some(c);
                return;
            }
            '{' | '[' => self.open += 1,
            '}' | ']' => self.open = self.open.saturating_sub(1),
            _ => {}
        }
        self.after_space = c.is_whitespace();
        if !c.is_whitespace() {
            self.last = Some(c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The end of the entry that starts at `key` in `text`, as the text after it.
    fn after(text: &str, key: &str) -> Option<String> {
        let at = text.find(key).unwrap();
        flow_entry_end(text, at).map(|end| text[end..].to_string())
    }

    #[test]
    fn a_flow_entry_ends_at_its_comma_or_the_closing_bracket() {
        assert_eq!(after("a: {t: b, bad: s, p: x}", "bad").unwrap(), " p: x}");
        assert_eq!(after("a: {t: b, bad: [1, {c: 2}]}", "bad").unwrap(), "}");
        assert_eq!(after(r#"a: {p: "x\"y, z", bad: 1}"#, "bad").unwrap(), "}");
        assert_eq!(after("a: {p: 'it''s, x', bad: 1}", "bad").unwrap(), "}");
        assert_eq!(after("a: {u: o'neil, bad: 1}", "bad").unwrap(), "}");
        assert_eq!(after("a: {bad: 'x, y', b: 2}", "bad").unwrap(), " b: 2}");
        // Over lines, past a comment with a comma in it.
        assert_eq!(
            after("a: {t: b,\n  bad: s # a, b\n}\nnext: 1", "bad").unwrap(),
            "}\nnext: 1"
        );
        // Not in a flow collection: a block key, or a bracket in a comment or quotes.
        assert_eq!(after("a:\n  bad: 1\n", "bad"), None);
        assert_eq!(after("a: 1 # {\nbad: 1", "bad"), None);
        assert_eq!(after("a: \"{\"\nbad: 1", "bad"), None);
    }
}
