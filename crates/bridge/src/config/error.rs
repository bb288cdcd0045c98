//! The configuration's one error type: every problem found, each naming its key.

use std::fmt;
use std::path::PathBuf;

/// Where a configuration value came from, for error messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A place in the configuration file (1-based line and column).
    File {
        /// Line, counting from 1.
        line: u64,
        /// Column, counting from 1.
        column: u64,
    },
    /// An environment variable that overrides (or stands in for) the key.
    Env(&'static str),
    /// Not given anywhere (a required key is missing) or the place is unknown.
    Unknown,
}

impl Origin {
    /// The origin of a value read from the file at `location`.
    pub(crate) fn at(location: &serde_saphyr::Location) -> Self {
        if location.line() == 0 {
            Self::Unknown
        } else {
            Self::File {
                line: location.line(),
                column: location.column(),
            }
        }
    }
}

/// One thing wrong with the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The key path, e.g. `apis[1].url` (empty for problems of the file as a whole).
    pub key: String,
    /// Where the offending value came from.
    pub origin: Origin,
    /// What is wrong and what was expected. Never contains a secret value.
    pub message: String,
}

impl Problem {
    /// A problem with `key`.
    pub fn new(key: impl Into<String>, origin: Origin, message: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            origin,
            message: message.into(),
        }
    }

    /// Writes the problem as one line, prefixed by `source` (the file path or `environment`).
    fn write(&self, f: &mut fmt::Formatter<'_>, source: &str) -> fmt::Result {
        match self.origin {
            Origin::File { line, column } => write!(f, "{source}:{line}:{column}: ")?,
            _ => write!(f, "{source}: ")?,
        }
        if !self.key.is_empty() {
            f.write_str(&self.key)?;
            if let Origin::Env(var) = self.origin {
                write!(f, " (from {var})")?;
            }
            f.write_str(": ")?;
        }
        f.write_str(&self.message)
    }
}

/// Why the configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{}: cannot read the configuration file: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file or the environment holds invalid values. `Display` lists every problem, one
    /// per line, each prefixed by `file`.
    #[error("{}", Listing { file, problems })]
    Invalid {
        /// The file path, or `environment` when there was no file.
        file: String,
        /// Every problem found, in file order.
        problems: Vec<Problem>,
    },
}

/// Sorts problems into file order (those without a place first), as they are listed.
pub fn in_file_order(problems: &mut [Problem]) {
    problems.sort_by_key(|problem| match problem.origin {
        Origin::File { line, column } => (line, column),
        Origin::Env(_) | Origin::Unknown => (0, 0),
    });
}

impl ConfigError {
    /// The problems found (empty for [`ConfigError::Read`]).
    pub fn problems(&self) -> &[Problem] {
        match self {
            Self::Read { .. } => &[],
            Self::Invalid { problems, .. } => problems,
        }
    }
}

struct Listing<'a> {
    file: &'a str,
    problems: &'a [Problem],
}

impl fmt::Display for Listing<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, problem) in self.problems.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            problem.write(f, self.file)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_one_problem_per_line_with_the_source() {
        let err = ConfigError::Invalid {
            file: "bridge.yaml".into(),
            problems: vec![
                Problem::new(
                    "apis[1].url",
                    Origin::File {
                        line: 7,
                        column: 10,
                    },
                    "expected an http or https URL",
                ),
                Problem::new("log_level", Origin::Env("SERVICE_LOG_LEVEL"), "bad"),
                Problem::new("token", Origin::Unknown, "required"),
            ],
        };
        assert_eq!(
            err.to_string(),
            "bridge.yaml:7:10: apis[1].url: expected an http or https URL\n\
             bridge.yaml: log_level (from SERVICE_LOG_LEVEL): bad\n\
             bridge.yaml: token: required"
        );
    }
}
