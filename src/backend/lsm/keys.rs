//! Engine keys and read bounds of the LSM backend: a state's key-group prefix and the read options of a key
//! range.

use crate::backend::StateId;
use crate::keygroup::{write_key_group_prefix, KeyGroup};
use keyed_state_lsm::{prefix_successor, ReadOptions, Snapshot};

/// Width of the state-id prefix of every engine key.
pub const STATE_PREFIX_LEN: usize = 2;

/// The first engine key of `state`'s key group `kg`: `sid | KG`.
pub(super) fn kg_prefix(state: StateId, kg: KeyGroup, prefix_len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(STATE_PREFIX_LEN + prefix_len);
    v.extend_from_slice(&(state as u16).to_be_bytes());
    write_key_group_prefix(&mut v, kg, prefix_len);
    v
}

/// Read options for the keys in `[lower, upper)`.
pub(super) fn bounds<'a>(
    snapshot: Option<&'a Snapshot>,
    lower: Vec<u8>,
    upper: Option<Vec<u8>>,
) -> ReadOptions<'a> {
    ReadOptions {
        snapshot,
        lower_bound: Some(lower),
        upper_bound: upper,
        prefix: None,
    }
}

/// Read options for every key starting with `prefix`.
pub(super) fn prefix_bounds(prefix: &[u8]) -> ReadOptions<'static> {
    bounds(None, prefix.to_vec(), prefix_successor(prefix))
}
