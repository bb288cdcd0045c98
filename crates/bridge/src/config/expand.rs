//! `${NAME}` expansion in the string values of the configuration file.
//!
//! Syntax: `${NAME}` is replaced by the variable's value and a missing variable is an error;
//! `${NAME:-default}` uses `default` when the variable is unset or empty; `$${` is a literal
//! `${`. A `$` not followed by `{` is kept as it is. `NAME` is `[A-Za-z_][A-Za-z0-9_]*`.

use super::env::Env;

/// Why a value could not be expanded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ExpandError {
    /// `${NAME}` names a variable that is not set.
    Missing(String),
    /// A `${` without a valid name and closing `}`, at this character position (1-based).
    /// The text is not kept: the value may be a secret.
    Malformed(usize),
    /// A default that holds another reference (`${A:-${B}}`), at this character position:
    /// references do not nest, and the first `}` would end this one.
    Nested(usize),
}

impl ExpandError {
    /// A message for the configuration error list.
    pub(crate) fn message(&self) -> String {
        match self {
            Self::Missing(name) => format!("environment variable {name} is not set"),
            Self::Malformed(position) => format!(
                "bad variable reference at character {position}: expected ${{NAME}} or \
                 ${{NAME:-default}} (write $${{ for a literal ${{)"
            ),
            Self::Nested(position) => format!(
                "the default of the variable reference at character {position} holds another \
                 reference: references do not nest; give the default as plain text"
            ),
        }
    }
}

/// Expands every reference in `input`, reporting every missing variable at once.
pub(crate) fn expand(input: &str, env: &dyn Env) -> Result<String, Vec<ExpandError>> {
    let mut out = String::with_capacity(input.len());
    let mut errors = Vec::new();
    let mut rest = input;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        let position = input[..input.len() - tail.len()].chars().count() + 1;
        if let Some(after) = tail.strip_prefix("$${") {
            out.push_str("${");
            rest = after;
        } else if let Some(after) = tail.strip_prefix("${") {
            let Some(end) = after.find('}') else {
                errors.push(ExpandError::Malformed(position));
                return Err(errors);
            };
            let body = &after[..end];
            let (name, default) = match body.split_once(":-") {
                Some((name, default)) => (name, Some(default)),
                None => (body, None),
            };
            if !is_valid_name(name) {
                errors.push(ExpandError::Malformed(position));
            } else if default.is_some_and(|d| d.contains("${")) {
                errors.push(ExpandError::Nested(position));
            } else {
                match (env.get(name), default) {
                    (Some(value), Some(default)) if value.is_empty() => out.push_str(default),
                    (Some(value), _) => out.push_str(&value),
                    (None, Some(default)) => out.push_str(default),
                    (None, None) => errors.push(ExpandError::Missing(name.to_owned())),
                }
            }
            rest = &after[end + 1..];
        } else {
            out.push('$');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

fn is_valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::MapEnv;

    fn env() -> MapEnv {
        MapEnv::new().with("HOST", "db.internal").with("EMPTY", "")
    }

    #[test]
    fn replaces_references() {
        assert_eq!(
            expand("postgres://${HOST}:5432/${HOST}", &env()).unwrap(),
            "postgres://db.internal:5432/db.internal"
        );
        assert_eq!(expand("no refs $ here", &env()).unwrap(), "no refs $ here");
        assert_eq!(expand("cost: 5$", &env()).unwrap(), "cost: 5$");
    }

    #[test]
    fn defaults_and_escapes() {
        assert_eq!(expand("${NOPE:-fallback}", &env()).unwrap(), "fallback");
        assert_eq!(expand("${EMPTY:-fallback}", &env()).unwrap(), "fallback");
        assert_eq!(expand("${EMPTY}", &env()).unwrap(), "");
        assert_eq!(expand("$${HOST}", &env()).unwrap(), "${HOST}");
    }

    #[test]
    fn reports_every_missing_variable() {
        assert_eq!(
            expand("${A}-${HOST}-${B}", &env()).unwrap_err(),
            vec![
                ExpandError::Missing("A".into()),
                ExpandError::Missing("B".into())
            ]
        );
    }

    #[test]
    fn rejects_malformed_references() {
        assert_eq!(
            expand("ab${HOST", &env()).unwrap_err(),
            vec![ExpandError::Malformed(3)]
        );
        assert!(!ExpandError::Malformed(3).message().contains("HOST"));
        assert!(matches!(
            expand("${1X}", &env()).unwrap_err()[0],
            ExpandError::Malformed(_)
        ));
        assert!(matches!(
            expand("${}", &env()).unwrap_err()[0],
            ExpandError::Malformed(_)
        ));
        // Nested, the first `}` would end the outer reference and leave `}` behind: an error,
        // never the literal text `${FALLBACK}` as a password.
        assert_eq!(
            expand("pw: ${UNSET:-${HOST}}", &env()).unwrap_err(),
            vec![ExpandError::Nested(5)]
        );
    }
}
