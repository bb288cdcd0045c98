//! Event ids: UUIDv7 (RFC 9562) everywhere, so ids sort by creation time.
//!
//! On SQLite an id also carries the row's sequence number in its last 62 bits (RFC 9562's
//! "fixed bit-length dedicated counter", in `rand_b`; `rand_a` holds the counter's upper bits,
//! zero in practice): the events table is keyed by that number (its rowid), so a new event
//! costs no separate index on its id, and a lookup by id is a rowid lookup plus a comparison
//! of the whole id. Ids grow strictly in the order they are handed out (the millisecond never
//! goes back, even if the clock does), so events that share a timestamp are listed in the
//! order they arrived. Numbers come from one counter per process, seeded past the largest
//! stored one; `cloud serve` holds the database file's lock ([`super::ServeLock`]), so no other
//! process hands out the same numbers. On PostgreSQL, which appends to a B-tree index cheaply
//! and may be shared by several `cloud` processes, ids carry a counter of each org's own in
//! those 74 bits, random at each new millisecond: an org's ids grow in the order they are
//! handed out, and say nothing of how many events other orgs stored meanwhile (the `uuid`
//! crate's own counter is one per process, shared by all orgs, so it would).

use std::collections::HashMap;
use std::sync::Mutex;

use uuid::Uuid;

/// Largest sequence number an id can carry.
const MAX_SEQ: i64 = (1 << 62) - 1;

/// Where new event ids come from.
pub(crate) enum EventIds {
    /// UUIDv7 with a counter per org (PostgreSQL): org → (last millisecond, its counter).
    PerOrg(Mutex<HashMap<i64, (i64, u128)>>),
    /// UUIDv7 carrying the next sequence number (SQLite): (next number, last millisecond),
    /// taken together so that ids grow in the order they are handed out.
    Sequence(Mutex<(i64, i64)>),
}

impl EventIds {
    /// Ids that carry sequence numbers from `next` on.
    pub(crate) fn sequence_from(next: i64) -> Self {
        EventIds::Sequence(Mutex::new((next.max(1), 0)))
    }

    /// Ids with a counter per org, random at each new millisecond.
    pub(crate) fn per_org() -> Self {
        EventIds::PerOrg(Mutex::new(HashMap::new()))
    }

    /// A new id of org `org_id`, and the sequence number it carries (SQLite).
    pub(crate) fn next(&self, org_id: i64) -> (String, Option<i64>) {
        match self {
            EventIds::PerOrg(orgs) => {
                let now = chrono::Utc::now().timestamp_millis();
                let (ms, counter) = {
                    // One entry per org that posts, never forgotten (forgotten, a clock that
                    // stepped back could give that org a smaller id than its last one).
                    let mut orgs = orgs.lock().unwrap_or_else(|e| e.into_inner());
                    let (last_ms, counter) = orgs.entry(org_id).or_insert((0, 0));
                    if now > *last_ms {
                        // 73 random bits: room to count up within the millisecond.
                        *counter = Uuid::new_v4().as_u128() & ((1 << 73) - 1);
                        *last_ms = now;
                    } else {
                        *counter += 1;
                    }
                    (*last_ms, *counter)
                };
                (with_counter(ms, counter), None)
            }
            EventIds::Sequence(state) => {
                let now = chrono::Utc::now().timestamp_millis();
                let (seq, ms) = {
                    let mut state = state.lock().unwrap_or_else(|e| e.into_inner());
                    let (next, last_ms) = &mut *state;
                    *last_ms = now.max(*last_ms);
                    *next += 1;
                    (*next - 1, *last_ms)
                };
                (with_sequence(ms, seq), Some(seq))
            }
        }
    }
}

/// The UUIDv7 of millisecond `ms` and sequence number `seq`.
fn with_sequence(ms: i64, seq: i64) -> String {
    let ms = (ms as u128) & ((1 << 48) - 1);
    let value = (ms << 80) | (0x7 << 76) | (0b10 << 62) | ((seq & MAX_SEQ) as u128);
    Uuid::from_u128(value).to_string()
}

/// The UUIDv7 of millisecond `ms` whose 74 other free bits hold `counter`: its upper 12 in
/// `rand_a`, its lower 62 in `rand_b`.
fn with_counter(ms: i64, counter: u128) -> String {
    let ms = (ms as u128) & ((1 << 48) - 1);
    let value = (ms << 80)
        | (0x7 << 76)
        | ((counter >> 62) << 64)
        | (0b10 << 62)
        | (counter & MAX_SEQ as u128);
    Uuid::from_u128(value).to_string()
}

/// The sequence number an id would carry (any UUIDv7 gives one; the stored row's whole id
/// must still match, since ids from before sequence numbers carry random bits there).
pub(crate) fn sequence_of(id: &str) -> Option<i64> {
    let uuid = Uuid::try_parse(id).ok()?;
    (uuid.get_version_num() == 7).then(|| (uuid.as_u128() & (MAX_SEQ as u128)) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_ids_are_uuidv7_that_give_back_their_number() {
        let ids = EventIds::sequence_from(41);
        let (first, seq) = ids.next(1);
        assert_eq!(seq, Some(41));
        let uuid = Uuid::parse_str(&first).unwrap();
        assert_eq!(uuid.get_version_num(), 7);
        assert_eq!(uuid.get_variant(), uuid::Variant::RFC4122);
        assert_eq!(sequence_of(&first), Some(41));
        let (second, seq) = ids.next(1);
        assert_eq!(seq, Some(42));
        assert_eq!(sequence_of(&second), Some(42));
        let later: Vec<String> = (0..1000).map(|_| ids.next(1).0).collect();
        assert!(
            std::iter::once(&second).chain(&later).is_sorted(),
            "ids grow in the order they are handed out"
        );
    }

    /// An org's ids count up by one within a millisecond however many ids other orgs took
    /// meanwhile, so two of them tell nothing of the others' volume.
    #[test]
    fn an_org_s_ids_say_nothing_of_other_orgs() {
        let ids = EventIds::per_org();
        let bits = |id: &str| Uuid::parse_str(id).unwrap().as_u128();
        let millisecond = |id: &str| bits(id) >> 80;
        // rand_a (12 bits above the variant's 64) and rand_b (the low 62).
        let counter = |id: &str| (((bits(id) >> 64) & 0xfff) << 62) | (bits(id) & MAX_SEQ as u128);
        for _ in 0..100 {
            let (first, seq) = ids.next(1);
            assert_eq!(seq, None);
            for _ in 0..7 {
                ids.next(2);
            }
            let (second, _) = ids.next(1);
            let uuid = Uuid::parse_str(&second).unwrap();
            assert_eq!(uuid.get_version_num(), 7);
            assert_eq!(uuid.get_variant(), uuid::Variant::RFC4122);
            assert!(first < second, "an org's ids grow: {first} {second}");
            if millisecond(&first) == millisecond(&second) {
                assert_eq!(counter(&second), counter(&first) + 1, "{first} {second}");
                return;
            }
        }
        panic!("no two ids in one millisecond in 100 tries");
    }

    #[test]
    fn ids_sort_by_their_millisecond_then_number() {
        let early = with_sequence(1_700_000_000_000, 9);
        let late = with_sequence(1_700_000_000_001, 1);
        assert!(early < late, "{early} {late}");
        assert!(with_sequence(1_700_000_000_000, 10) > early);
        assert_eq!(early, "018bcfe5-6800-7000-8000-000000000009");
    }

    #[test]
    fn other_ids_carry_no_number() {
        assert_eq!(sequence_of("not-a-uuid"), None);
        assert_eq!(sequence_of(&Uuid::new_v4().to_string()), None);
        assert!(sequence_of(&Uuid::now_v7().to_string()).is_some());
    }
}
