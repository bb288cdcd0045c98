//! The key path (`apis[1].max_connections`) of a line of the configuration file, read back
//! from the text's block structure, for the errors the YAML reader reports by line and column
//! only (a value of the wrong type), and those errors in words a newcomer reads.

/// One line of block YAML, as far as nesting goes.
struct Line<'a> {
    /// Leading spaces.
    indent: usize,
    /// Column (0-based) of the `- ` that opens a list item on this line.
    dash: Option<usize>,
    /// Column (0-based) where the line's key starts, and the key.
    key: Option<(usize, &'a str)>,
}

/// `None` for a blank line or a comment.
fn read(line: &str) -> Option<Line<'_>> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    let rest = &line[indent..];
    if rest.is_empty() || rest.starts_with('#') {
        return None;
    }
    // An item's `-` may stand alone, its keys on the lines below.
    let item = rest
        .strip_prefix("- ")
        .or_else(|| (rest.trim_end() == "-").then_some(""));
    let (dash, body, at) = match item {
        Some(after) => {
            let body = after.trim_start();
            (Some(indent), body, indent + 2 + after.len() - body.len())
        }
        None => (None, rest, indent),
    };
    // `key:` ends at a colon followed by a space, a tab or the end of the line; a colon
    // inside a value (`- http://x`) is no key.
    let colon = body
        .char_indices()
        .find(|&(i, c)| c == ':' && matches!(body[i + 1..].chars().next(), None | Some(' ' | '\t')))
        .map(|(i, _)| i);
    let key = colon
        .map(|i| &body[..i])
        .filter(|k| {
            !k.is_empty()
                && k.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        })
        .map(|k| (at, k));
    Some(Line { indent, dash, key })
}

/// The path of the key whose value starts at `line`:`column` (1-based): each enclosing key
/// is the nearest line above that is indented less, and a list item's index counts the items
/// above it. `None` where the text there is not plain block YAML (a line without a key, or a
/// place inside a flow `{…}` rather than where the key's value starts).
pub(super) fn key_path(text: &str, line: usize, column: usize) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut i = line.checked_sub(1)?;
    let first = read(lines.get(i)?)?;
    let (mut col, key) = first.key?;
    let text_after = &lines[i][col + key.len() + 1..];
    let value_at = col + key.len() + 1 + (text_after.len() - text_after.trim_start().len());
    // The value starts there, or on the lines below when nothing follows the colon.
    let block = text_after.trim().is_empty() && column == col + key.len() + 2;
    if value_at + 1 != column && !block {
        return None;
    }
    let mut path = vec![key.to_string()];
    let mut item = first.dash;
    loop {
        if let Some(dash) = item {
            // A list item: count the items above it, up to the list's key.
            let mut index = 0;
            let parent = loop {
                i = i.checked_sub(1)?;
                let Some(l) = read(lines[i]) else { continue };
                if l.dash == Some(dash) {
                    index += 1;
                } else if l.indent < dash || (l.indent == dash && l.dash.is_none()) {
                    break l;
                }
            };
            let (at, key) = parent.key?;
            path.push(format!("{key}[{index}]"));
            (col, item) = (at, parent.dash);
            continue;
        }
        let parent = loop {
            let Some(above) = i.checked_sub(1) else {
                path.reverse();
                return Some(path.join("."));
            };
            i = above;
            match read(lines[i]) {
                Some(l) if l.indent < col => break l,
                _ => {}
            }
        };
        match parent.key {
            // The first key of the same list item (`- name: x` above `  url: …`).
            Some((at, _)) if at == col && parent.dash.is_some() => item = parent.dash,
            Some((at, key)) => {
                path.push(key.to_string());
                (col, item) = (at, parent.dash);
            }
            // A `-` alone on its line above the item's keys.
            None if parent.dash.is_some() => item = parent.dash,
            None => return None,
        }
    }
}

/// The key whose block value holds `line`:`column` (1-based): the nearest line above that is
/// indented less and has a key with nothing after its colon (`apis:` above a mapping written
/// where a list belongs). Its line, the column where the key starts, and the column just past
/// its colon (where [`key_path`] looks for its value), all 1-based.
pub(super) fn block_parent(
    text: &str,
    line: usize,
    column: usize,
) -> Option<(usize, usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut i = line.checked_sub(1)?;
    while let Some(above) = i.checked_sub(1) {
        i = above;
        let Some(l) = read(lines.get(i)?) else {
            continue;
        };
        if l.indent + 1 >= column {
            continue;
        }
        let (at, key) = l.key?;
        let after = lines[i].get(at + key.len() + 1..)?;
        let empty = after.trim().is_empty() || after.trim_start().starts_with('#');
        return empty.then_some((i + 1, at + 1, at + key.len() + 2));
    }
    None
}

/// The path (`sources[0].repositories[1]`) of the list item whose value starts at
/// `line`:`column` (1-based) right after its `- `: the list's key is the nearest line above,
/// past the items before this one and their contents, with nothing after its colon. `None`
/// where the place is not a block list item's value.
pub(super) fn item_path(text: &str, line: usize, column: usize) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let index = line.checked_sub(1)?;
    let before = lines.get(index)?.get(..column.checked_sub(1)?)?;
    if before.trim() != "-" {
        return None;
    }
    let dash = before.find('-')?;
    let mut items = 0;
    for i in (0..index).rev() {
        let Some(l) = read(lines[i]) else { continue };
        if l.dash == Some(dash) {
            items += 1;
            continue;
        }
        if l.indent > dash {
            continue;
        }
        let (at, key) = l.key?;
        let after = lines[i].get(at + key.len() + 1..)?;
        if !(after.trim().is_empty() || after.trim_start().starts_with('#')) {
            return None;
        }
        let parent = key_path(text, i + 1, at + key.len() + 2)?;
        return Some(format!("{parent}[{items}]"));
    }
    None
}

/// The path of the mapping that holds the key starting at `line`:`column` (1-based): `apis[0]`
/// for `urll` in the first `apis` entry, `None` for a key of the file's top level or a place
/// that is not plain block YAML.
pub(super) fn parent_of_key(text: &str, line: usize, column: usize) -> Option<String> {
    let l = read(text.lines().nth(line.checked_sub(1)?)?)?;
    let (at, key) = l.key.filter(|(at, _)| at + 1 == column)?;
    let after = &text.lines().nth(line - 1)?[at + key.len() + 1..];
    let spaces = if after.trim().is_empty() {
        0
    } else {
        after.len() - after.trim_start().len()
    };
    let path = key_path(text, line, column + key.len() + 1 + spaces)?;
    let parent = path.strip_suffix(key)?.strip_suffix('.')?;
    Some(parent.to_string())
}

/// The key of `expected` (the reader's list of the keys allowed there) that `unknown` most
/// likely meant, when one is close: a typo or a transposition away.
pub(super) fn meant<'a>(unknown: &str, expected: &'a str) -> Option<&'a str> {
    let most = (unknown.len() / 3).max(1);
    expected
        .split(',')
        .map(|k| k.trim().trim_matches('`'))
        .filter(|k| !k.is_empty())
        .map(|k| (strsim::damerau_levenshtein(unknown, k), k))
        .filter(|(distance, _)| *distance <= most)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, k)| k)
}

/// What a list or mapping written where text belongs is told.
pub(super) const TEXT: &str =
    "expected text, not a list or a mapping (quote it if it holds `[`, `{` or `: `)";

/// What a list or mapping written where a single value (text or a number) belongs is told.
pub(super) const SINGLE: &str = "expected a single value, not a list or a mapping";

/// The YAML reader's word for a wrong type, as what was expected.
pub(super) fn expected(message: &str) -> Option<&'static str> {
    let integer = ["i64", "u64", "i32", "u32", "u16", "u8", "usize"];
    match message.trim() {
        m if integer.iter().any(|t| m == format!("invalid {t}")) => Some("expected a whole number"),
        "invalid f64" | "invalid f32" => Some("expected a number"),
        "invalid boolean" => Some("expected true or false"),
        "expected sequence start" => Some("expected a list (lines starting with `- `)"),
        "expected mapping start" => Some("expected a mapping (`key: value` lines)"),
        "expected string scalar" => Some(TEXT),
        "expected scalar" => Some(SINGLE),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "name: dc1
max_connections: ten
apis:
  - name: a
    url: http://a
  # a comment
  - name: b
    auth:
      type: basic
    max_connections: lots
sources:
- name: code
  allow_push: maybe
";

    /// The path of the value on `line`, at the column where it starts.
    fn at(text: &str, line: usize) -> Option<String> {
        let l = text.lines().nth(line - 1)?;
        let column = l.find(": ").map_or(l.len(), |i| i + 2) + 1;
        key_path(text, line, column)
    }

    #[test]
    fn paths_follow_indentation_and_count_items() {
        assert_eq!(at(FILE, 2).as_deref(), Some("max_connections"));
        assert_eq!(at(FILE, 5).as_deref(), Some("apis[0].url"));
        assert_eq!(at(FILE, 7).as_deref(), Some("apis[1].name"));
        assert_eq!(at(FILE, 9).as_deref(), Some("apis[1].auth.type"));
        assert_eq!(at(FILE, 10).as_deref(), Some("apis[1].max_connections"));
        assert_eq!(at(FILE, 13).as_deref(), Some("sources[0].allow_push"));
        assert_eq!(at(FILE, 6), None);
        // A flow mapping where a list was expected: the key whose value it is.
        assert_eq!(at("apis: {name: x}\n", 1).as_deref(), Some("apis"));
        // A place inside a flow collection, or a colon inside a list's value: no path.
        let flow = "apis: [{name: x, max_connections: lots}]\n";
        assert_eq!(key_path(flow, 1, flow.find("lots").unwrap() + 1), None);
        assert_eq!(at("allow:\n  - http://x\n", 2), None);
    }

    #[test]
    fn an_unknown_key_is_placed_in_its_mapping_and_matched_to_a_known_one() {
        let text =
            "name: dc1\napis:\n  - name: a\n    urll: http://a\n    auth:\n      typ: basic\n";
        assert_eq!(parent_of_key(text, 4, 5).as_deref(), Some("apis[0]"));
        assert_eq!(parent_of_key(text, 6, 7).as_deref(), Some("apis[0].auth"));
        assert_eq!(parent_of_key(text, 1, 1), None);
        assert_eq!(meant("urll", "name, url, auth, allow"), Some("url"));
        assert_eq!(
            meant("max_conections", "url, max_connections"),
            Some("max_connections")
        );
        assert_eq!(meant("colour", "name, url, auth"), None);
    }

    #[test]
    fn a_list_item_is_named_by_its_list_and_index() {
        let text = "sources:\n  - name: code\n    repositories:\n      - a/b\n      # c\n      - name: x\n    other:\n    - [1]\n";
        assert_eq!(
            item_path(text, 6, 9).as_deref(),
            Some("sources[0].repositories[1]")
        );
        // A list at its key's own indent.
        assert_eq!(
            item_path(text, 8, 7).as_deref(),
            Some("sources[0].other[0]")
        );
        // A mapping item is the item too; a key's value inside it is not.
        assert_eq!(item_path(text, 2, 5).as_deref(), Some("sources[0]"));
        assert_eq!(item_path(text, 6, 15), None);
    }

    #[test]
    fn a_block_value_is_found_from_inside_it() {
        let text = "name: dc1\napis:\n  name: a\n  url: http://a\nsources:\n- x\n";
        // The mapping under `apis:` starts at 3:3.
        let (line, key, value) = block_parent(text, 3, 3).unwrap();
        assert_eq!((line, key), (2, 1));
        assert_eq!(key_path(text, line, value).as_deref(), Some("apis"));
        assert_eq!(block_parent(text, 1, 1), None);
        // A key with a value on its own line is no block parent.
        assert_eq!(block_parent("a: 1\n  b: 2\n", 2, 3), None);
    }

    #[test]
    fn wrong_types_are_said_as_what_was_expected() {
        assert_eq!(expected("invalid i64"), Some("expected a whole number"));
        assert_eq!(expected("invalid boolean"), Some("expected true or false"));
        assert_eq!(expected("expected string scalar"), Some(TEXT));
        assert_eq!(expected("something else"), None);
    }
}
