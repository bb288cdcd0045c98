//! Reading the file's YAML into [`FileConfig`], with every unknown key found in one run:
//! serde stops at the first, so each is blanked out of the text and the file read again.

use super::error::{Origin, Problem};
use super::file::FileConfig;

/// Parses the file's YAML. A syntax error or a wrong type becomes one located problem; unknown
/// keys are all reported at once (each with its line and column), beside every other problem
/// of the rest of the file. An empty file (or one of comments only) is an empty configuration.
pub(super) fn parse_file(text: &str) -> Result<(FileConfig, Vec<Problem>), Vec<Problem>> {
    let has_content = text
        .lines()
        .map(str::trim)
        .any(|line| !line.is_empty() && !line.starts_with('#') && line != "---");
    if !has_content {
        return Ok((FileConfig::default(), Vec::new()));
    }
    let mut unknown = Vec::new();
    let mut text = text.to_string();
    // serde stops at the first unknown key: blank it out (and the value under it, keeping the
    // lines where they are) and read again, to find the next. Bounded, in case blanking one
    // turns up a loop.
    for _ in 0..MAX_UNKNOWN_KEYS {
        let err = match serde_saphyr::from_str::<FileConfig>(&text) {
            Ok(file) => return Ok((file, unknown)),
            Err(err) => err,
        };
        let problem = yaml_problem(&err);
        let at = err.location().filter(|at| at.line() > 0);
        match at {
            Some(at) if err.to_string().contains("unknown field") => {
                unknown.push(problem);
                match blank_key(&text, at.line() as usize, at.column() as usize) {
                    Some(next) => text = next,
                    None => return Err(unknown),
                }
            }
            // Another error after blanking is an artefact of the blanking: the unknown keys
            // found so far are what the file really has wrong.
            _ if !unknown.is_empty() => return Err(unknown),
            _ => return Err(vec![problem]),
        }
    }
    Err(unknown)
}

/// Most unknown keys reported in one run.
const MAX_UNKNOWN_KEYS: usize = 50;

fn yaml_problem(err: &serde_saphyr::Error) -> Problem {
    use serde_saphyr::MessageFormatter;
    let bare = err.without_snippet();
    let message: String = serde_saphyr::UserMessageFormatter
        .format_message(bare)
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let origin = err.location().map_or(Origin::Unknown, |at| Origin::at(&at));
    Problem::new("", origin, message)
}

/// `text` with the key at `line`:`column` (1-based) blanked from there to the end of its line,
/// and the lines of its value (indented deeper) emptied; the line count stays the same, so
/// later problems keep their places. A key inside a `{…}` mapping loses only its own entry
/// (spaces in its place), so that the mapping stays closed and what follows reads as written.
/// `None` when there is nothing to blank.
fn blank_key(text: &str, line: usize, column: usize) -> Option<String> {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let index = line.checked_sub(1)?;
    let start = column.checked_sub(1)?;
    let current = lines.get_mut(index)?;
    let cut = current.char_indices().nth(start).map(|(i, _)| i)?;
    if let Some(end) = flow_entry_end(current, cut) {
        let spaces = " ".repeat(current[cut..end].chars().count());
        current.replace_range(cut..end, &spaces);
        return Some(lines.join("\n"));
    }
    current.truncate(cut);
    let indent = start;
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
    Some(lines.join("\n"))
}

/// Where the entry of a flow collection (`{a: 1, b: [2, 3]}`) that starts at byte `at` of
/// `line` ends: past its comma, or at the bracket that closes the collection. `None` when `at`
/// is not inside one, or the entry does not end on this line.
fn flow_entry_end(line: &str, at: usize) -> Option<usize> {
    let mut open = 0usize;
    let mut quote = None;
    for c in line[..at].chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '{' | '[') => open += 1,
            (None, '}' | ']') => open = open.saturating_sub(1),
            _ => {}
        }
    }
    if open == 0 {
        return None;
    }
    let mut depth = 0usize;
    for (i, c) in line[at..].char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '{' | '[') => depth += 1,
            (None, '}' | ']') if depth == 0 => return Some(at + i),
            (None, '}' | ']') => depth -= 1,
            (None, ',') if depth == 0 => return Some(at + i + 1),
            _ => {}
        }
    }
    None
}
