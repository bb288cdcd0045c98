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
    let (dash, body, at) = match rest.strip_prefix("- ") {
        Some(after) => {
            let body = after.trim_start();
            (Some(indent), body, indent + 2 + after.len() - body.len())
        }
        None => (None, rest, indent),
    };
    let key = body
        .split_once(':')
        .map(|(k, _)| k.trim_end())
        .filter(|k| {
            !k.is_empty()
                && k.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        })
        .map(|k| (at, k));
    Some(Line { indent, dash, key })
}

/// The path of the key on `line` (1-based): each enclosing key is the nearest line above
/// that is indented less, and a list item's index counts the items above it. `None` where the
/// text there is not plain block YAML (a flow `{…}`, a line without a key).
pub(super) fn key_path(text: &str, line: usize) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut i = line.checked_sub(1)?;
    let first = read(lines.get(i)?)?;
    let (mut col, key) = first.key?;
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
            None => return None,
        }
    }
}

/// The YAML reader's word for a wrong type, as what was expected.
pub(super) fn expected(message: &str) -> Option<&'static str> {
    let integer = ["i64", "u64", "i32", "u32", "u16", "u8", "usize"];
    match message.trim() {
        m if integer.iter().any(|t| m == format!("invalid {t}")) => Some("expected a whole number"),
        "invalid f64" | "invalid f32" => Some("expected a number"),
        "invalid boolean" => Some("expected true or false"),
        "expected sequence start" => Some("expected a list (lines starting with `- `)"),
        "expected mapping start" => Some("expected a mapping (`key: value` lines)"),
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

    #[test]
    fn paths_follow_indentation_and_count_items() {
        let at = |line| key_path(FILE, line);
        assert_eq!(at(2).as_deref(), Some("max_connections"));
        assert_eq!(at(5).as_deref(), Some("apis[0].url"));
        assert_eq!(at(7).as_deref(), Some("apis[1].name"));
        assert_eq!(at(9).as_deref(), Some("apis[1].auth.type"));
        assert_eq!(at(10).as_deref(), Some("apis[1].max_connections"));
        assert_eq!(at(13).as_deref(), Some("sources[0].allow_push"));
        assert_eq!(at(6), None);
        assert_eq!(key_path("apis: {name: x}\n", 1).as_deref(), Some("apis"));
    }

    #[test]
    fn wrong_types_are_said_as_what_was_expected() {
        assert_eq!(expected("invalid i64"), Some("expected a whole number"));
        assert_eq!(expected("invalid boolean"), Some("expected true or false"));
        assert_eq!(expected("something else"), None);
    }
}
