//! An event object as received: its keys, each with the JSON text of its value, borrowed from
//! the request body. Validation reads only the fields it knows; everything else is written
//! back verbatim. Parsing this way allocates one vector per event instead of a tree of
//! `serde_json::Value`s (one allocation per string, number and map), which is most of what
//! ingestion spends and holds per event.

use std::borrow::Cow;
use std::cell::RefCell;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

/// An object key: borrowed from the input unless it had escapes to decode.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Key<'a>(pub Cow<'a, str>);

impl<'de> serde::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string key")
            }

            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_string())))
            }

            fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

impl std::borrow::Borrow<str> for Key<'_> {
    fn borrow(&self) -> &str {
        &self.0
    }
}

/// A JSON object's members, sorted by key (the last of duplicate keys wins, as with
/// `serde_json::Value`): one allocation, looked up by binary search.
#[derive(Debug, Clone, Default)]
pub struct Members<'a>(Vec<(Key<'a>, &'a RawValue)>);

impl<'a> Members<'a> {
    /// The raw value of `key`.
    pub fn get(&self, key: &str) -> Option<&&'a RawValue> {
        self.0
            .binary_search_by(|(k, _)| k.0.as_ref().cmp(key))
            .ok()
            .map(|i| &self.0[i].1)
    }

    /// The raw value of `key` unless it is absent or `null`: the one rule by which a field
    /// counts as given (validation, resolves' inheritance, the stored body's lookups).
    pub fn present(&self, key: &str) -> Option<&'a RawValue> {
        self.get(key)
            .copied()
            .filter(|raw| Kind::of(raw) != Kind::Null)
    }

    /// The members in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&Key<'a>, &&'a RawValue)> {
        self.0.iter().map(|(k, v)| (k, v))
    }

    /// How many members.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True for `{}`.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<'de> serde::Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct MembersVisitor;
        impl<'de> Visitor<'de> for MembersVisitor {
            type Value = Members<'de>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members<'de>, A::Error> {
                let mut members: Vec<(Key<'de>, &'de RawValue)> =
                    Vec::with_capacity(map.size_hint().unwrap_or(16));
                while let Some(entry) = map.next_entry()? {
                    members.push(entry);
                }
                // Stable: of equal keys, the one sent last ends last and is the one kept.
                members.sort_by(|a, b| a.0.cmp(&b.0));
                members.dedup_by(|later, earlier| {
                    let same = later.0 == earlier.0;
                    if same {
                        std::mem::swap(later, earlier);
                    }
                    same
                });
                Ok(Members(members))
            }
        }
        d.deserialize_map(MembersVisitor)
    }
}

/// Parses an object's members; `text` must hold a JSON object.
pub fn members(text: &str) -> Result<Members<'_>, serde_json::Error> {
    serde_json::from_str(text)
}

/// How deeply a member's value may nest. serde_json, on the server and in many clients, reads
/// at most 127 levels (its recursion limit of 128 fails on the 128th); the event object is one
/// level more, and a page of `GET /v1/events` (`{"events":[…]}`) two more again. A value nested
/// deeper would make an event that is stored but cannot be read back, alone or in a page.
pub const MAX_MEMBER_DEPTH: usize = 124;

/// Why a value cannot be taken back, and where inside it ([`check`]).
#[derive(Debug)]
pub struct Unreadable {
    /// A JSON pointer below the value checked (`/a/0` for its member `a`'s first element;
    /// empty for the value itself).
    pub at: String,
    /// What serde_json refused.
    pub error: serde_json::Error,
}

/// Checks what [`RawValue`] does not, being a syntax check only: numbers within the range of
/// an `f64`, escapes that decode (no lone surrogate, no NUL), nesting within [`MAX_MEMBER_DEPTH`].
/// Those are what `serde_json::Value` refuses when it reads the whole event, so an event that
/// passes can always be read back. A string without escapes, a boolean or null needs no
/// second look.
pub fn check(raw: &RawValue) -> Result<(), Unreadable> {
    match Kind::of(raw) {
        Kind::Null | Kind::Bool => Ok(()),
        Kind::String if !raw.get().contains('\\') => Ok(()),
        _ => {
            let path = RefCell::new(Vec::new());
            let mut d = serde_json::Deserializer::from_str(raw.get());
            de::DeserializeSeed::deserialize(
                Strict {
                    depth: 0,
                    path: &path,
                },
                &mut d,
            )
            .and_then(|()| d.end())
            .map_err(|error| Unreadable {
                at: pointer(&path.borrow()),
                error,
            })
        }
    }
}

/// One step into a value: a member's name or an element's index.
enum Segment<'de> {
    Key(Cow<'de, str>),
    Index(usize),
}

/// The steps as a JSON pointer.
fn pointer(path: &[Segment<'_>]) -> String {
    path.iter()
        .map(|segment| match segment {
            Segment::Key(key) => format!("/{}", key.replace('~', "~0").replace('/', "~1")),
            Segment::Index(i) => format!("/{i}"),
        })
        .collect()
}

/// Any JSON value at nesting `depth`, read with all of serde_json's checks and kept nowhere.
/// `path` holds the steps to the value being read; a failure leaves it there, so the error
/// can say where (the steps borrow the input's member names: nothing is allocated but for a
/// name with escapes).
#[derive(Clone, Copy)]
struct Strict<'p, 'de> {
    depth: usize,
    path: &'p RefCell<Vec<Segment<'de>>>,
}

impl<'de> de::DeserializeSeed<'de> for Strict<'_, 'de> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl Strict<'_, '_> {
    /// The seed for a value one level deeper, or an error past [`MAX_MEMBER_DEPTH`].
    fn deeper<E: de::Error>(self) -> Result<Self, E> {
        if self.depth >= MAX_MEMBER_DEPTH {
            return Err(E::custom(format!(
                "a value nests deeper than {MAX_MEMBER_DEPTH} levels of arrays and objects"
            )));
        }
        Ok(Strict {
            depth: self.depth + 1,
            path: self.path,
        })
    }
}

impl<'de> Visitor<'de> for Strict<'_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<(), E> {
        // PostgreSQL's text and jsonb cannot hold it, and no page can show it.
        if s.contains('\0') {
            return Err(E::custom(
                "a string holds \\u0000 (the NUL character), which is stored nowhere; remove it",
            ));
        }
        Ok(())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let inner = self.deeper()?;
        for i in 0.. {
            self.path.borrow_mut().push(Segment::Index(i));
            let more = seq.next_element_seed(inner)?.is_some();
            self.path.borrow_mut().pop();
            if !more {
                break;
            }
        }
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let inner = self.deeper()?;
        while let Some(name) = map.next_key_seed(MemberName)? {
            self.path.borrow_mut().push(Segment::Key(name));
            map.next_value_seed(inner)?;
            self.path.borrow_mut().pop();
        }
        Ok(())
    }
}

/// A member's name inside a value, checked as strings are, and said as a name.
#[derive(Clone, Copy)]
struct MemberName;

impl<'de> de::DeserializeSeed<'de> for MemberName {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Cow<'de, str>, D::Error> {
        d.deserialize_str(self)
    }
}

impl MemberName {
    fn checked<E: de::Error>(name: Cow<'_, str>) -> Result<Cow<'_, str>, E> {
        if name.contains('\0') {
            return Err(E::custom(
                "a member's name inside it holds \\u0000 (the NUL character), which is stored nowhere; remove it",
            ));
        }
        Ok(name)
    }
}

impl<'de> Visitor<'de> for MemberName {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a member's name")
    }

    fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Cow<'de, str>, E> {
        Self::checked(Cow::Borrowed(s))
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Cow<'de, str>, E> {
        Self::checked(Cow::Owned(s.to_string()))
    }
}

/// What kind of JSON value a raw value is, for error messages and type checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool,
    /// A number.
    Number,
    /// A string.
    String,
    /// An array.
    Array,
    /// An object.
    Object,
}

impl Kind {
    /// The kind of `raw` (valid JSON without leading whitespace, as serde_json gives it).
    pub fn of(raw: &RawValue) -> Kind {
        match raw.get().as_bytes().first() {
            Some(b'n') => Kind::Null,
            Some(b't' | b'f') => Kind::Bool,
            Some(b'"') => Kind::String,
            Some(b'[') => Kind::Array,
            Some(b'{') => Kind::Object,
            _ => Kind::Number,
        }
    }

    /// "a string", "an object", …, for messages.
    pub fn article(self) -> &'static str {
        match self {
            Kind::Null => "null",
            Kind::Bool => "a boolean",
            Kind::Number => "a number",
            Kind::String => "a string",
            Kind::Array => "an array",
            Kind::Object => "an object",
        }
    }
}

/// The text of a raw JSON string: borrowed when it has no escapes, decoded otherwise.
/// `None` when `raw` is not a string.
pub fn string(raw: &RawValue) -> Option<Cow<'_, str>> {
    let text = raw.get();
    let inner = text.strip_prefix('"')?.strip_suffix('"')?;
    if inner.contains('\\') {
        serde_json::from_str::<String>(text).ok().map(Cow::Owned)
    } else {
        Some(Cow::Borrowed(inner))
    }
}

/// Writes `s` as a JSON string (quoted and escaped).
pub fn write_string(out: &mut Vec<u8>, s: &str) {
    // Writing into a Vec cannot fail.
    let _ = serde_json::to_writer(out, s);
}

#[cfg(test)]
mod tests;
