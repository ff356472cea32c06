//! State TTL below the typed layer: the clock, Flink's expiry rule, and the byte-level expiry of stored TTL
//! values that the full-snapshot cleanup, the heap's incremental cleanup and the LSM compaction filter share.
//!
//! A TTL value is Flink's `TtlValue`: `i64 BE last-access timestamp | user value` (Flink's `TtlSerializer`).
//! Values, reducing and aggregating states store one; maps store one per entry after the null flag; lists store
//! one per element, joined with `0x2C`.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use crate::layout::LIST_DELIMITER;

/// The processing-time clock TTL is measured against (Flink's `TtlTimeProvider`), in milliseconds.
pub trait TtlTimeProvider: Send + Sync + std::fmt::Debug {
    /// The current time in milliseconds.
    fn current_timestamp(&self) -> i64;
}

/// The system clock: milliseconds since the Unix epoch.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemTimeProvider;

impl TtlTimeProvider for SystemTimeProvider {
    fn current_timestamp(&self) -> i64 {
        match std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
            Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
            Err(_) => 0,
        }
    }
}

/// A clock that moves only when told to (tests; Flink's `MockTtlTimeProvider`).
#[derive(Debug, Default)]
pub struct ManualClock(AtomicI64);

impl ManualClock {
    /// A clock standing at `now`, shareable with a store.
    pub fn new(now: i64) -> Arc<Self> {
        Arc::new(ManualClock(AtomicI64::new(now)))
    }

    /// Sets the time (it may go back, as Flink's tests do).
    pub fn set(&self, now: i64) {
        self.0.store(now, Ordering::Release);
    }

    /// Moves the time forward by `millis`.
    pub fn advance(&self, millis: i64) {
        self.0.fetch_add(millis, Ordering::AcqRel);
    }
}

impl TtlTimeProvider for ManualClock {
    fn current_timestamp(&self) -> i64 {
        self.0.load(Ordering::Acquire)
    }
}

/// When a value last accessed at `ts` expires with time to live `ttl_millis`: `ts + ttl`, clamped so that it
/// never overflows into the past (Flink's `TtlUtils.getExpirationTimestamp`).
#[inline]
pub fn expiration_timestamp(ts: i64, ttl_millis: u64) -> i64 {
    let ttl = i64::try_from(ttl_millis).unwrap_or(i64::MAX);
    if ts > 0 {
        ts + ttl.min(i64::MAX - ts)
    } else {
        // ts <= 0 and ttl >= 0: the sum stays in range.
        ts + ttl
    }
}

/// Flink's expiry rule: expired ⇔ `last access + ttl <= now` (with the overflow clamp).
#[inline]
pub fn is_expired(ts: i64, ttl_millis: u64, now: i64) -> bool {
    expiration_timestamp(ts, ttl_millis) <= now
}

/// Reads the big-endian timestamp at `offset`, if the value is long enough.
#[inline]
pub fn timestamp_at(value: &[u8], offset: usize) -> Option<i64> {
    let b: [u8; 8] = value.get(offset..offset.checked_add(8)?)?.try_into().ok()?;
    Some(i64::from_be_bytes(b))
}

/// The SST user property of the LSM backend's TTL filter: `i64 BE smallest TTL timestamp | i64 BE largest TTL
/// timestamp | i64 BE latest expiration` over every entry of the file (`design/sst-format.md`). Absent when
/// any entry is not a TTL value (a tombstone, a range delete, another state's entry), and in older files.
pub const PROP_TTL_RANGE: &str = "keyed-state.ttl-range";

/// The SST user property of the LSM backend's TTL filter that says when a file was written: `i64 BE`, the
/// TTL clock's time (the earliest over the TTL states' clocks) when the flush or compaction began. Recorded
/// in every file written while a filter is installed; the periodic rewrite compares it with the bound.
pub const PROP_TTL_WRITTEN: &str = "keyed-state.ttl-written";

/// Decodes [`PROP_TTL_WRITTEN`], or `None` unless the bytes are exactly 8.
pub fn decode_ttl_written(bytes: &[u8]) -> Option<i64> {
    if bytes.len() != 8 {
        return None;
    }
    timestamp_at(bytes, 0)
}

/// Decodes [`PROP_TTL_RANGE`]: (smallest timestamp, largest timestamp, latest expiration), or `None` unless
/// the bytes are exactly 24.
pub fn decode_ttl_range(bytes: &[u8]) -> Option<(i64, i64, i64)> {
    if bytes.len() != 24 {
        return None;
    }
    Some((
        timestamp_at(bytes, 0)?,
        timestamp_at(bytes, 8)?,
        timestamp_at(bytes, 16)?,
    ))
}

/// The byte length of the list element (a whole `TtlValue`: timestamp and user element) at the front of a
/// slice, or `None` when the bytes do not hold one. Built by the typed layer from the element serializer.
pub type ElementLength = Arc<dyn Fn(&[u8]) -> Option<usize> + Send + Sync>;

/// Where a state's values carry their TTL timestamps.
#[derive(Clone)]
pub enum TtlLayout {
    /// One timestamp at offset 0 (value, reducing, aggregating states).
    Value,
    /// One timestamp at offset 1, after the null flag (map entries).
    MapEntry,
    /// One timestamp per element; elements joined with `0x2C` (list states and list merge operands).
    List(ElementLength),
}

impl std::fmt::Debug for TtlLayout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TtlLayout::Value => "Value",
            TtlLayout::MapEntry => "MapEntry",
            TtlLayout::List(_) => "List",
        })
    }
}

/// What to do with a stored value judged for expiry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TtlVerdict {
    /// Nothing in it has expired (or it cannot be parsed: unknown bytes are never dropped).
    Keep,
    /// All of it has expired.
    Remove,
    /// Some list elements expired: the value without them.
    Replace(Vec<u8>),
}

/// The byte-level expiry rule of one TTL state: its layout, time to live and clock.
#[derive(Debug, Clone)]
pub struct TtlStateFilter {
    /// Where the timestamps are.
    pub layout: TtlLayout,
    /// Time to live in milliseconds.
    pub ttl_millis: u64,
    /// The clock "now" is read from.
    pub clock: Arc<dyn TtlTimeProvider>,
}

impl TtlStateFilter {
    /// The current time of this state's clock.
    pub fn now(&self) -> i64 {
        self.clock.current_timestamp()
    }

    /// Judges a stored value (or a list merge operand) at time `now`. Values too short to hold a timestamp
    /// and lists whose elements do not parse are kept whole, as Flink's filter keeps them.
    pub fn judge(&self, value: &[u8], now: i64) -> TtlVerdict {
        let expired = |ts| is_expired(ts, self.ttl_millis, now);
        match &self.layout {
            TtlLayout::Value => match timestamp_at(value, 0) {
                Some(ts) if expired(ts) => TtlVerdict::Remove,
                _ => TtlVerdict::Keep,
            },
            TtlLayout::MapEntry => match timestamp_at(value, 1) {
                Some(ts) if expired(ts) => TtlVerdict::Remove,
                _ => TtlVerdict::Keep,
            },
            TtlLayout::List(len) => judge_list(value, len, expired),
        }
    }
}

/// Splits a joined TTL list into its elements, or `None` if the bytes are not such a list.
pub fn split_list<'a>(value: &'a [u8], len: &ElementLength) -> Option<Vec<&'a [u8]>> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < value.len() {
        let rest = value.get(pos..)?;
        let n = len(rest)?;
        if n < 8 || n > rest.len() {
            return None;
        }
        out.push(&rest[..n]);
        pos += n;
        if pos < value.len() {
            if value[pos] != LIST_DELIMITER || pos + 1 == value.len() {
                return None;
            }
            pos += 1;
        }
    }
    Some(out)
}

fn judge_list(value: &[u8], len: &ElementLength, expired: impl Fn(i64) -> bool) -> TtlVerdict {
    let Some(elements) = split_list(value, len) else {
        return TtlVerdict::Keep;
    };
    let live: Vec<&[u8]> = elements
        .iter()
        .copied()
        .filter(|e| timestamp_at(e, 0).is_some_and(|ts| !expired(ts)))
        .collect();
    if live.len() == elements.len() {
        TtlVerdict::Keep
    } else if live.is_empty() {
        TtlVerdict::Remove
    } else {
        let mut out = Vec::with_capacity(value.len());
        for e in live {
            crate::layout::list_append(&mut out, e);
        }
        TtlVerdict::Replace(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_clamps_overflow() {
        assert!(!is_expired(10, i64::MAX as u64, 50));
        assert!(!is_expired(10, u64::MAX, i64::MAX - 1));
        assert!(is_expired(0, 100, 100));
        assert!(!is_expired(0, 100, 99));
        assert!(is_expired(-5, 0, -5));
        assert_eq!(expiration_timestamp(i64::MAX - 1, 10), i64::MAX);
    }

    fn el(ts: i64, v: u8) -> Vec<u8> {
        let mut e = ts.to_be_bytes().to_vec();
        e.push(v);
        e
    }

    #[test]
    fn list_judge_drops_every_expired_element_and_keeps_the_rest() {
        let f = TtlStateFilter {
            layout: TtlLayout::List(Arc::new(|b: &[u8]| (b.len() >= 9).then_some(9))),
            ttl_millis: 100,
            clock: ManualClock::new(0),
        };
        let mut v = Vec::new();
        for (ts, x) in [(0, 1), (50, 2), (0, 3), (60, 4)] {
            crate::layout::list_append(&mut v, &el(ts, x));
        }
        let mut want = el(50, 2);
        want.push(LIST_DELIMITER);
        want.extend_from_slice(&el(60, 4));
        assert_eq!(f.judge(&v, 100), TtlVerdict::Replace(want));
        assert_eq!(f.judge(&v, 99), TtlVerdict::Keep);
        assert_eq!(f.judge(&v, 160), TtlVerdict::Remove);
        // Not a list of 9-byte elements: kept whole.
        assert_eq!(f.judge(&[1, 2, 3], 1000), TtlVerdict::Keep);
    }

    #[test]
    fn map_timestamp_sits_after_the_null_flag() {
        let f = TtlStateFilter {
            layout: TtlLayout::MapEntry,
            ttl_millis: 10,
            clock: ManualClock::new(0),
        };
        let mut v = vec![0u8];
        v.extend_from_slice(&5i64.to_be_bytes());
        assert_eq!(f.judge(&v, 15), TtlVerdict::Remove);
        assert_eq!(f.judge(&v, 14), TtlVerdict::Keep);
        assert_eq!(f.judge(&v[..8], 1000), TtlVerdict::Keep);
    }
}
