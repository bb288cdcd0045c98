//! The server's `ParameterStatus` messages, read as they pass to the client: a session whose
//! strings stop reading as the audit's masking reads them (`client_encoding` set to one whose
//! characters may end in a backslash, `standard_conforming_strings` off), however the change
//! was spelled and wherever it ran (`SET`, `set_config`, a function's body), is masked strictly
//! from then on.

use super::frames::Frames;

/// The longest `ParameterStatus` body read: a setting's name and value.
const MAX_BODY: usize = 1024;

/// Follows the backend messages of a session, cut anywhere: a message may span many calls.
#[derive(Default)]
pub(super) struct Settings {
    frames: Frames,
    strict: bool,
    /// `ReadyForQuery` messages read, the login's included.
    ready: u64,
}

impl Settings {
    /// Whether a setting the server reported makes the session's strings read otherwise.
    pub(super) fn strict(&self) -> bool {
        self.strict
    }

    /// How many `ReadyForQuery` the server has sent after the login's (the first it reads).
    pub(super) fn ready(&self) -> u64 {
        self.ready.saturating_sub(1)
    }

    /// Reads the server's next bytes, cut anywhere.
    pub(super) fn feed(&mut self, mut bytes: &[u8]) {
        let keep = |tag| if tag == b'S' { MAX_BODY } else { 0 };
        while let Some(tag) = self.frames.next(&mut bytes, keep) {
            match tag {
                b'Z' => self.ready += 1,
                b'S' => {
                    let mut fields = self.frames.body().split(|&b| b == 0);
                    self.strict |= match (fields.next(), fields.next()) {
                        (Some(b"standard_conforming_strings"), Some(value)) => value != b"on",
                        (Some(b"client_encoding"), Some(value)) => {
                            crate::postgres::backslash_encoding(value)
                        }
                        _ => false,
                    };
                }
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![tag];
        m.extend_from_slice(&(body.len() as i32 + 4).to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    fn status(name: &str, value: &str) -> Vec<u8> {
        message(b'S', format!("{name}\0{value}\0").as_bytes())
    }

    #[test]
    fn a_setting_reported_mid_session_makes_it_strict_across_any_split() {
        let mut stream = message(b'C', b"SELECT 1\0");
        stream.extend(status("client_encoding", "UTF8"));
        stream.extend(status("TimeZone", "UTC"));
        let mut settings = Settings::default();
        settings.feed(&stream);
        assert!(!settings.strict());
        for (name, value) in [
            ("client_encoding", "SJIS"),
            ("standard_conforming_strings", "off"),
        ] {
            let mut stream = stream.clone();
            stream.extend(status(name, value));
            stream.extend(message(b'Z', b"I"));
            for chunk in [1, 3, stream.len()] {
                let mut settings = Settings::default();
                for piece in stream.chunks(chunk) {
                    settings.feed(piece);
                }
                assert!(settings.strict(), "{name}={value}, chunks of {chunk}");
            }
        }
    }
}
