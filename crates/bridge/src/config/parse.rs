//! Reading the file's YAML into [`FileConfig`], with every unknown key found in one run:
//! serde stops at the first, so each is blanked out of the text and the file read again.

use super::error::{Origin, Problem};
use super::file::FileConfig;
use super::flow::{flow_entry_end, flow_value_end, inside_flow};
use super::key_path;

/// Parses the file's YAML. A syntax error becomes one located problem; unknown keys and values
/// of the wrong type are all reported at once (each with its line and column), beside every
/// other problem of the rest of the file. An empty file (or one of comments only) is an empty
/// configuration.
pub(super) fn parse_file(text: &str) -> Result<(FileConfig, Vec<Problem>), Vec<Problem>> {
    let has_content = text
        .lines()
        .map(str::trim)
        .any(|line| !line.is_empty() && !line.starts_with('#') && line != "---");
    if !has_content {
        return Ok((FileConfig::default(), Vec::new()));
    }
    // The reader counts a lone CR as a line break, as `str::lines` does not: read the text with
    // LF alone, so that its lines are the ones the reader's places count.
    let mut text = text.replace("\r\n", "\n").replace('\r', "\n");
    // YAML indents with spaces only; the reader's own message for a tab names another place.
    // (A line of blanks alone is no indentation.)
    let tabbed: Vec<Problem> = (text.lines().enumerate())
        .filter(|(_, l)| {
            let content = l.trim_start();
            let indent = &l[..l.len() - content.len()];
            indent.contains('\t') && !content.is_empty() && !content.starts_with('#')
        })
        .map(|(index, _)| {
            Problem::new(
                "",
                Origin::File {
                    line: index as u64 + 1,
                    column: 1,
                },
                "a tab in the indentation: YAML indents with spaces only",
            )
        })
        .collect();
    if !tabbed.is_empty() {
        return Err(tabbed);
    }
    // A list (or a flow value) at the top is one problem, not every key it lacks.
    let first = text.lines().enumerate().find(|(_, l)| {
        let l = l.trim();
        !l.is_empty() && !l.starts_with('#') && l != "---"
    });
    if let Some((index, line)) = first {
        let line = line.trim_start();
        if line == "-" || line.starts_with("- ") || line.starts_with('[') {
            return Err(vec![Problem::new(
                "",
                Origin::File {
                    line: index as u64 + 1,
                    column: 1,
                },
                "the file's top level must be `key: value` lines (name:, token:, apis:, …), not a list",
            )]);
        }
    }
    let mut found: Vec<(Problem, (u64, u64))> = Vec::new();
    // Places filled with empty text that then failed again: the key wants no text (a number).
    let mut emptied = Vec::new();
    // serde stops at the first unknown key or wrong type: blank it out (an unknown key with the
    // value under it, a wrong value alone, which leaves an optional key unset) keeping the lines
    // where they are, and read again to find the next. Bounded, in case blanking turns up a loop.
    for _ in 0..MAX_PROBLEMS {
        let err = match serde_saphyr::from_str::<FileConfig>(&text) {
            Ok(file) => return Ok((file, found.into_iter().map(|(p, _)| p).collect())),
            Err(err) => err,
        };
        let (problem, at) = yaml_problem(&err, &text);
        let seen = found.iter().any(|(_, place)| Some(*place) == at);
        match at {
            // Empty text where a number belongs: blank the value instead, and say what fits
            // every key, text or number.
            Some(place) if seen && !emptied.contains(&place) => {
                emptied.push(place);
                if let Some((p, _)) = found.iter_mut().find(|(_, at)| *at == place)
                    && p.message == key_path::TEXT
                {
                    p.message = key_path::SINGLE.to_string();
                }
                match blank_key(&text, place.0 as usize, place.1 as usize, "") {
                    Some(next) => text = next,
                    None => return Err(found.into_iter().map(|(p, _)| p).collect()),
                }
            }
            Some(place) if !seen => {
                // Text of the wrong kind becomes empty text, so a required name stays present.
                let fill = if problem.message == key_path::TEXT {
                    "\"\""
                } else {
                    ""
                };
                found.push((problem, place));
                match blank_key(&text, place.0 as usize, place.1 as usize, fill) {
                    Some(next) => text = next,
                    None => return Err(found.into_iter().map(|(p, _)| p).collect()),
                }
            }
            // Another error after blanking (a required key left empty, a list cut short) is an
            // artefact of the blanking: the problems found so far are what the file has wrong.
            // Broken syntax further on (an unclosed quote) is the file's own: said after them.
            _ if !found.is_empty() => {
                let mut problems: Vec<Problem> = found.into_iter().map(|(p, _)| p).collect();
                let artefact = ["missing field", "invalid"]
                    .iter()
                    .any(|m| problem.message.trim_start().starts_with(m));
                if !artefact && matches!(problem.origin, Origin::File { .. }) {
                    problems.push(problem);
                }
                return Err(problems);
            }
            _ => return Err(vec![problem]),
        }
    }
    Err(found.into_iter().map(|(p, _)| p).collect())
}

/// A hint for a syntax error on a line where `${VAR}` stands unquoted inside `{…}`: there its
/// braces read as YAML's, so the reader fails on it before the variable is expanded.
fn flow_variable_hint(text: &str, line: u64) -> &'static str {
    let Some(at) = text.lines().nth((line as usize).saturating_sub(1)) else {
        return "";
    };
    let unquoted = at.match_indices("${").any(|(i, _)| {
        let before = at[..i].trim_end();
        !before.ends_with(['"', '\'']) && at[..i].contains('{')
    });
    if unquoted {
        "; a ${VAR} inside { … } must be quoted (token: \"${VAR}\"), or its braces read as YAML's"
    } else {
        ""
    }
}

/// The key path (`apis[1].auth.username`) of the value at `line`:`column` (1-based) written
/// inside a flow mapping on one line: `auth: {…}`, an item of `allow: [{…}]`, or a list item
/// that is itself one (`- {name: a, …}`). `None` elsewhere, or deeper.
fn flow_key(text: &str, line: usize, column: usize) -> Option<String> {
    let this = text.lines().nth(line.checked_sub(1)?)?;
    let value_at = this.char_indices().nth(column.checked_sub(1)?)?.0;
    let before = this[..value_at].trim_end().strip_suffix(':')?;
    let key_start = before
        .char_indices()
        .rfind(|&(_, c)| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
        .map_or(0, |(i, c)| i + c.len_utf8());
    let key = &before[key_start..];
    if key.is_empty() || !before[..key_start].trim_end().ends_with(['{', ',']) {
        return None;
    }
    let key_column = this[..key_start].chars().count() + 1;
    let parent = match super::flow::flow_mapping_at(text, line, key_column) {
        Some((value, item)) => {
            let path = key_path::key_path(text, line, value)?;
            match item {
                Some(i) => format!("{path}[{i}]"),
                None => path,
            }
        }
        // A list item written as a flow mapping: `- {name: a, …}`.
        None => {
            let brace = this.find('{')?;
            if brace >= key_start {
                return None;
            }
            key_path::item_path(text, line, this[..brace].chars().count() + 1)?
        }
    };
    Some(format!("{parent}.{key}"))
}

/// `expected`, with the word that `${NAME}` is not expanded there when the value at
/// `line`:`column` is one (a number or a flag written as a variable).
fn not_expanded(expected: &str, text: &str, line: u64, column: u64) -> String {
    match variable_at(text, line, column) && expected != key_path::TEXT {
        true => format!("{expected} (`${{NAME}}` is expanded in text values only)"),
        false => expected.to_string(),
    }
}

/// Whether the value at `line`:`column` (1-based) is a `${NAME}` reference, quoted or not: a
/// number or a flag written so is told why it was not read as one.
fn variable_at(text: &str, line: u64, column: u64) -> bool {
    let Some(at) = text.lines().nth((line as usize).saturating_sub(1)) else {
        return false;
    };
    let value = at.get((column as usize).saturating_sub(1)..).unwrap_or("");
    value.trim_start_matches(['"', '\'']).starts_with("${")
}

/// Most unknown keys and wrong values reported in one run.
const MAX_PROBLEMS: usize = 50;

/// The reader's error, located, and the place to blank for the reading to go on without it
/// (an unknown key; a value of the wrong type, or the block under its key when the value is a
/// block of the wrong kind), if it can. A wrong type is told by its key path (read back from
/// the text, [`key_path`]) and as what was expected. The value is never repeated: it may be a
/// secret put under the wrong key.
fn yaml_problem(err: &serde_saphyr::Error, text: &str) -> (Problem, Option<(u64, u64)>) {
    use serde_saphyr::MessageFormatter;
    let bare = err.without_snippet();
    let message: String = serde_saphyr::UserMessageFormatter
        .format_message(bare)
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let origin = err.location().map_or(Origin::Unknown, |at| Origin::at(&at));
    let Origin::File { line, column } = origin else {
        return (Problem::new("", origin, message), None);
    };
    let Some(expected) = key_path::expected(&message) else {
        let Some(unknown) = unknown_key(&message) else {
            return (
                Problem::new(
                    "",
                    origin,
                    format!(
                        "{message}{}{}",
                        flow_variable_hint(text, line),
                        duplicate_hint(&message)
                    ),
                ),
                None,
            );
        };
        // Named in its mapping (`apis[0]`), with the key it most likely meant.
        let (at_line, at_column) = (line as usize, column as usize);
        let parent = key_path::parent_of_key(text, at_line, at_column).or_else(|| {
            let (value, item) = super::flow::flow_mapping_at(text, at_line, at_column)?;
            let path = key_path::key_path(text, at_line, value)?;
            Some(match item {
                Some(i) => format!("{path}[{i}]"),
                None => path,
            })
        });
        let hint = message
            .split_once("expected one of ")
            .and_then(|(_, keys)| key_path::meant(unknown, keys))
            .map(|k| format!("; did you mean `{k}`?"))
            .unwrap_or_default();
        return (
            Problem::new(
                parent.unwrap_or_default(),
                origin,
                format!("{message}{hint}"),
            ),
            Some((line, column)),
        );
    };
    if let Some(key) = key_path::key_path(text, line as usize, column as usize) {
        return (
            Problem::new(key, origin, not_expanded(expected, text, line, column)),
            Some((line, column)),
        );
    }
    // A block of the wrong kind (a mapping where a list or text belongs) is reported inside it.
    let block = message.trim().starts_with("expected sequence start")
        || message.trim().starts_with("expected mapping start")
        || expected == key_path::TEXT;
    if !block || inside_flow(text, line as usize, column as usize) {
        let key = flow_key(text, line as usize, column as usize).unwrap_or_default();
        let message = not_expanded(expected, text, line, column);
        return (Problem::new(key, origin, message), Some((line, column)));
    }
    // An item of a list of text (`repositories:`) that is itself a list or a mapping: named by
    // its index, and only the item blanked.
    let item = (expected == key_path::TEXT)
        .then(|| key_path::item_path(text, line as usize, column as usize))
        .flatten();
    if let Some(item) = item {
        return (Problem::new(item, origin, expected), Some((line, column)));
    }
    // It is located at its first line: named by the key it is under, and blanked with that key
    // (where text belongs, only its value, which becomes empty text).
    let parent = key_path::block_parent(text, line as usize, column as usize).and_then(
        |(line, key_at, value_at)| {
            let key = key_path::key_path(text, line, value_at)?;
            Some((key, line as u64, key_at as u64, value_at as u64))
        },
    );
    match parent {
        Some((key, line, column, value_at)) => (
            Problem::new(key, Origin::File { line, column }, expected),
            Some((
                line,
                if expected == key_path::TEXT {
                    value_at
                } else {
                    column
                },
            )),
        ),
        None => (Problem::new("", origin, expected), Some((line, column))),
    }
}

/// A hint for a key given twice in one mapping: a second `sources:` does not add to the
/// first, so its entries go under one key.
fn duplicate_hint(message: &str) -> String {
    let Some(key) = message
        .split_once("duplicate mapping key `")
        .and_then(|(_, rest)| rest.split_once('`'))
        .map(|(key, _)| key)
    else {
        return String::new();
    };
    if ["sources", "databases", "apis", "registries"].contains(&key) {
        format!("; list every entry under one `{key}:` (each entry a `- name: …` item)")
    } else {
        format!("; give `{key}` once in this mapping")
    }
}

/// The key an "unknown field `KEY`, expected …" message names.
fn unknown_key(message: &str) -> Option<&str> {
    let rest = message.split_once("unknown field `")?.1;
    rest.split_once('`').map(|(key, _)| key)
}

/// `text` with the key (or value) at `line`:`column` (1-based) blanked from there to the end of
/// its line, and the lines of its value (indented deeper) emptied, `fill` written in its place;
/// the line count stays the same, so later problems keep their places. A key inside a `{…}`
/// mapping loses only its own entry (spaces in its place, over several lines if it spans them),
/// so that the mapping stays closed and what follows reads as written. `None` when there is
/// nothing to blank.
fn blank_key(text: &str, line: usize, column: usize, fill: &str) -> Option<String> {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let index = line.checked_sub(1)?;
    let start = column.checked_sub(1)?;
    let current = lines.get(index)?;
    // The place may be the end of the line (just past a key's colon).
    let cut = current
        .char_indices()
        .map(|(i, _)| i)
        .chain([current.len()])
        .nth(start)?;
    let mut whole = lines.join("\n");
    let at = lines[..index].iter().map(|l| l.len() + 1).sum::<usize>() + cut;
    if let Some(mut end) = flow_entry_end(&whole, at) {
        // A value keeps its entry's comma (so does text emptied in place); a key goes with it.
        let value = !fill.is_empty() || whole[..at].trim_end().ends_with(':');
        if value && whole[..end].ends_with(',') {
            end -= 1;
        }
        whole.replace_range(at..end, &blanked(&whole[at..end], fill));
        return Some(whole);
    }
    // A flow list or mapping as a block key's value, over as many lines as it takes.
    if let Some(end) = flow_value_end(&whole, at) {
        whole.replace_range(at..end, &blanked(&whole[at..end], fill));
        return Some(whole);
    }
    let after_colon = lines[index][..cut].ends_with(':');
    // A value blanked after its key's colon owns the lines indented deeper than the key; a
    // list item emptied to text, those indented deeper than its dash (an unknown first key of
    // an item owns only its own value's lines).
    let dash = Some(&lines[index][..cut])
        .filter(|before| !fill.is_empty() && before.trim() == "-")
        .and_then(|before| before.find('-'));
    let indent = match (after_colon, dash) {
        (true, _) => lines[index][..cut - 1]
            .rfind([' ', '-'])
            .map_or(0, |i| i + 1),
        (false, Some(dash)) => dash,
        (false, None) => start,
    };
    lines[index].truncate(cut);
    if after_colon && !fill.is_empty() {
        lines[index].push(' ');
    }
    lines[index].push_str(fill);
    for next in lines.iter_mut().skip(index + 1) {
        let trimmed = next.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        if next.len() - trimmed.len() <= indent {
            break;
        }
        next.clear();
    }
    // An item's last key, gone, would leave its `-` alone: a null where a mapping belongs. It
    // stays an empty mapping, so that what the item lacks is said instead. The `-` is on the
    // key's line, or alone on the nearest line above it.
    let content = |l: &String| !l.trim().is_empty() && !l.trim_start().starts_with('#');
    let item = if lines[index].trim().is_empty() {
        (0..index).rev().find(|&i| content(&lines[i]))
    } else {
        Some(index)
    };
    let dash = item.and_then(|i| Some((i, bare_dash(&lines[i])?)));
    let keys_follow = lines
        .iter()
        .skip(index + 1)
        .find(|l| content(l))
        .is_some_and(|l| l.len() - l.trim_start().len() == cut);
    // Only the item's own keys stand right of its `-` (a key further left is another's).
    if let Some((item, dash)) = dash.filter(|&(_, dash)| dash < cut)
        && fill.is_empty()
        && !after_colon
        && !keys_follow
    {
        lines[item].insert_str(dash + 1, " {}");
    }
    Some(lines.join("\n"))
}

/// Where the `-` of a list item stands, when it stands alone on `line` (a comment may follow).
fn bare_dash(line: &str) -> Option<usize> {
    let dash = line.len() - line.trim_start().len();
    let rest = line[dash..].strip_prefix('-')?;
    let alone = rest.trim().is_empty()
        || (rest.starts_with([' ', '\t']) && rest.trim_start().starts_with('#'));
    alone.then_some(dash)
}

/// `span` as spaces, its line breaks kept, with `fill` in place of its first characters, so
/// that the places after it on its first line stay where they were (or before the line break,
/// when that first line is shorter than `fill`).
fn blanked(span: &str, fill: &str) -> String {
    let spaces: String = span
        .chars()
        .map(|c| if c == '\n' { c } else { ' ' })
        .collect();
    let first_line = span.chars().take_while(|&c| c != '\n').count();
    match first_line >= fill.len() {
        true => format!("{fill}{}", &spaces[fill.len()..]),
        false => format!("{fill}{spaces}"),
    }
}

#[cfg(test)]
mod tests;
