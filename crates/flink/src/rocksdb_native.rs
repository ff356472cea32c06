//! The keyed state of one `IncrementalRemoteKeyedStateHandle` (a RocksDB native savepoint or incremental
//! checkpoint of one subtask) as canonical entries: every shared SST file read with [`sst`](super::sst),
//! assigned to its state by the column family name in its properties (Flink names each column family after
//! its state), the versions of each column family folded across its files as RocksDB reads them, and the
//! live entries grouped by key group.
//!
//! Keys and values are already the canonical entry bytes (`KG | K | NS [| UK]` keys, Flink's serialized
//! values, list elements joined with `,` by the merge operator), so nothing is re-encoded. Keys outside
//! the handle's key groups (left behind after a rescale until compaction) are skipped, as Flink's restore
//! clips them. The MANIFEST is not read: the handle lists the live SST files, and each file names its
//! column family.

use std::collections::BTreeMap;
use std::path::Path;

use super::location::{display_name, map_stream};
use super::metadata::StreamHandle;
use super::proxy::FlinkStateMeta;
use super::sst::{fold_versions, SstFile, Versions};
use super::FlinkError;
use keyed_state::keygroup::{KeyGroup, KeyGroupRange};

/// The merge operator names that mean Flink's list append (`StringAppendTESTOperator`).
const FLINK_MERGE_OPERATORS: &[&str] = &["StringAppendTESTOperator", "stringappendtest"];

/// What was read from one SST file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SstSummary {
    /// The RocksDB file name (`000042.sst`).
    pub local_name: String,
    /// The file holding it (its name in the savepoint or checkpoint directory).
    pub stored_as: String,
    /// The column family (state) it belongs to.
    pub column_family: String,
    /// Records (puts, tombstones, merge operands) in it.
    pub records: u64,
    /// Range tombstones in it.
    pub range_tombstones: u64,
    /// The file's size.
    pub bytes: u64,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    kg: KeyGroup,
    state: u16,
    at: usize,
    key_len: u32,
    value_len: u32,
}

/// One subtask's RocksDB state: live entries by key group, state and key.
#[derive(Default)]
pub struct RocksNativeState {
    data: Vec<u8>,
    entries: Vec<Entry>,
    /// Per key group with data: its range in `entries`.
    by_key_group: BTreeMap<KeyGroup, (usize, usize)>,
    /// The SST files read, in the handle's order.
    pub files: Vec<SstSummary>,
    /// Live keys outside the handle's key groups, skipped.
    pub skipped_outside_range: u64,
    /// Versions read, over all files.
    pub versions: u64,
    /// Merge operands folded.
    pub merge_operands: u64,
    /// Keys whose newest version is a tombstone.
    pub deleted: u64,
}

impl std::fmt::Debug for RocksNativeState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocksNativeState")
            .field("entries", &self.entries.len())
            .field("bytes", &self.data.len())
            .field("key_groups", &self.by_key_group.len())
            .field("files", &self.files)
            .field("skipped_outside_range", &self.skipped_outside_range)
            .finish()
    }
}

impl RocksNativeState {
    /// Reads the shared SST files of a handle. `states` are the meta-data file's states (Flink state id =
    /// index), `range` the handle's key groups, `base` the directory of `_metadata`.
    pub fn read(
        shared: &[(String, StreamHandle)],
        private: &[(String, StreamHandle)],
        base: &Path,
        states: &[FlinkStateMeta],
        range: KeyGroupRange,
        max_parallelism: u32,
    ) -> Result<Self, FlinkError> {
        if let Some((name, h)) = private.iter().find(|(n, _)| n.ends_with(".blob")) {
            return Err(FlinkError::SstUnsupported {
                file: format!("{name} ({})", display_name(h)),
                feature: "BlobDB blob files".into(),
            });
        }
        let mut per_state: Vec<Versions> = states.iter().map(|_| Versions::default()).collect();
        let mut merge_ok = vec![true; states.len()];
        let mut out = RocksNativeState::default();
        for (local, h) in shared {
            let stored_as = display_name(h);
            let label = format!("{local} ({stored_as})");
            if !local.ends_with(".sst") {
                return Err(FlinkError::Inconsistent(format!(
                    "{label}: a shared file that is not an SST file"
                )));
            }
            let bytes = map_stream(h, base)?;
            let t = SstFile::open(&bytes, &label)?;
            let cf =
                t.properties
                    .column_family_name
                    .clone()
                    .ok_or_else(|| FlinkError::SstCorrupt {
                        file: label.clone(),
                        offset: 0,
                        what: "properties block",
                        detail: "no column family name".into(),
                    })?;
            let state = states.iter().position(|s| s.name == cf);
            let tombstones = t.range_tombstones()?;
            let records = match state {
                Some(i) => {
                    let v = &mut per_state[i];
                    v.add_tombstones(tombstones.iter().cloned());
                    if !t
                        .properties
                        .merge_operator
                        .as_deref()
                        .is_some_and(|m| FLINK_MERGE_OPERATORS.contains(&m))
                    {
                        merge_ok[i] = false;
                    }
                    t.for_each_record(&mut |r| v.push(&r))?
                }
                None => {
                    let n = t.for_each_record(&mut |_| Ok(()))?;
                    if cf != "default" || n > 0 || !tombstones.is_empty() {
                        return Err(FlinkError::Inconsistent(format!(
                            "{label}: column family '{cf}' is none of the states of the meta-data file ({})",
                            states
                                .iter()
                                .map(|s| s.name.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        )));
                    }
                    n
                }
            };
            out.files.push(SstSummary {
                local_name: local.clone(),
                stored_as,
                column_family: cf,
                records,
                range_tombstones: tombstones.len() as u64,
                bytes: bytes.len() as u64,
            });
        }
        let prefix = if max_parallelism <= 128 { 1 } else { 2 };
        for (i, versions) in per_state.into_iter().enumerate() {
            let name = &states[i].name;
            let label = format!("column family '{name}'");
            let state = u16::try_from(i)
                .map_err(|_| FlinkError::Inconsistent(format!("{label}: too many states")))?;
            let stats = fold_versions(versions, &label, merge_ok[i], &mut |k, v| {
                if k.len() < prefix {
                    return Err(FlinkError::Inconsistent(format!(
                        "{label}: key {k:02x?} is shorter than its key-group prefix"
                    )));
                }
                let kg = if prefix == 1 {
                    KeyGroup::from(k[0])
                } else {
                    KeyGroup::from_be_bytes([k[0], k[1]])
                };
                if u32::from(kg) >= max_parallelism {
                    return Err(FlinkError::BadKeyGroup {
                        file: label.clone(),
                        key_group: kg,
                        detail: format!(
                            "key {k:02x?} is in key group {kg}, beyond max parallelism {max_parallelism}"
                        ),
                    });
                }
                if !range.contains(kg) {
                    out.skipped_outside_range += 1;
                    return Ok(());
                }
                let (Ok(key_len), Ok(value_len)) = (u32::try_from(k.len()), u32::try_from(v.len()))
                else {
                    return Err(FlinkError::Inconsistent(format!(
                        "{label}: entry too large"
                    )));
                };
                out.entries.push(Entry {
                    kg,
                    state,
                    at: out.data.len(),
                    key_len,
                    value_len,
                });
                out.data.extend_from_slice(k);
                out.data.extend_from_slice(v);
                Ok(())
            })?;
            out.versions += stats.versions;
            out.merge_operands += stats.merge_operands;
            out.deleted += stats.deleted;
        }
        // Each state's entries are in key order, and keys start with their key group: a stable sort by
        // (key group, state) gives canonical order.
        out.entries.sort_by_key(|e| (e.kg, e.state));
        let mut i = 0;
        while i < out.entries.len() {
            let kg = out.entries[i].kg;
            let mut j = i;
            while j < out.entries.len() && out.entries[j].kg == kg {
                j += 1;
            }
            out.by_key_group.insert(kg, (i, j));
            i = j;
        }
        Ok(out)
    }

    /// Key groups with data.
    pub fn key_groups(&self) -> impl Iterator<Item = KeyGroup> + '_ {
        self.by_key_group.keys().copied()
    }

    /// Live entries in all.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Calls `f(Flink state id, key, value)` for every entry of key group `kg`, states by id, keys
    /// ascending. Returns the number of entries and their key and value bytes.
    pub fn read_key_group(
        &self,
        kg: KeyGroup,
        f: &mut dyn FnMut(usize, &[u8], &[u8]) -> Result<(), FlinkError>,
    ) -> Result<(u64, u64), FlinkError> {
        let Some(&(a, b)) = self.by_key_group.get(&kg) else {
            return Ok((0, 0));
        };
        let mut bytes = 0u64;
        for e in &self.entries[a..b] {
            let k_end = e.at + e.key_len as usize;
            let key = &self.data[e.at..k_end];
            let value = &self.data[k_end..k_end + e.value_len as usize];
            bytes += (key.len() + value.len()) as u64;
            f(usize::from(e.state), key, value)?;
        }
        Ok(((b - a) as u64, bytes))
    }
}
