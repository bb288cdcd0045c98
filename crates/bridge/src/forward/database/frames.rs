//! PostgreSQL protocol messages (a tag byte, a four-byte length, a body) read from a session's
//! bytes as they pass, cut anywhere: a message may span many reads, and a read many messages.

use bytes::Buf;

/// The message being read: its header so far, or its tag, the body bytes still to come and
/// the start of its body kept.
#[derive(Default)]
pub(super) struct Frames {
    header: Vec<u8>,
    tag: u8,
    remaining: usize,
    body: Vec<u8>,
    /// Whether `body` holds the message's whole body (it was no longer than kept).
    whole: bool,
}

impl Frames {
    /// The tag of the next message that `bytes` completes, `bytes` moved past it; `None` once
    /// they end mid-message. [`Frames::body`] then holds the first `keep(tag)` bytes of its body.
    pub(super) fn next(&mut self, bytes: &mut &[u8], keep: impl Fn(u8) -> usize) -> Option<u8> {
        while !bytes.is_empty() {
            if self.remaining == 0 {
                let take = (5 - self.header.len()).min(bytes.len());
                self.header.extend_from_slice(&bytes[..take]);
                *bytes = &bytes[take..];
                if self.header.len() < 5 {
                    return None;
                }
                let mut h = &self.header[..];
                self.tag = h.get_u8();
                self.remaining = (h.get_i32().max(4) - 4) as usize;
                self.header.clear();
                self.body.clear();
                self.whole = true;
                if self.remaining == 0 {
                    return Some(self.tag);
                }
            }
            let take = self.remaining.min(bytes.len());
            let room = keep(self.tag).saturating_sub(self.body.len());
            self.body.extend_from_slice(&bytes[..take.min(room)]);
            self.whole &= take <= room;
            self.remaining -= take;
            *bytes = &bytes[take..];
            if self.remaining == 0 {
                return Some(self.tag);
            }
        }
        None
    }

    /// The kept start of the body of the message [`Frames::next`] last returned.
    pub(super) fn body(&self) -> &[u8] {
        &self.body
    }

    /// Whether [`Frames::body`] is the message's whole body.
    pub(super) fn whole(&self) -> bool {
        self.whole
    }
}
