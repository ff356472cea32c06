//! The keyed state of one `IncrementalRemoteKeyedStateHandle` (a RocksDB native savepoint, or a full or
//! incremental checkpoint of one subtask) as canonical entries.
//!
//! The handle's files are read whole, whether Flink lists them as shared or private (with incremental
//! checkpoints off, and in native savepoints generally, the SST files are private): `CURRENT` names the
//! `MANIFEST`, whose replay ([`manifest`](super::sst::manifest)) gives the live SST files of every column
//! family (Flink names each column family after its state). Every live file must be in the handle, and
//! every SST file of the handle must be live; each is checked against the MANIFEST (size, column family,
//! sequence numbers) and read with [`sst`](super::sst); the versions of each column family are folded as
//! RocksDB reads them (newest sequence number first, which is RocksDB's own order across levels and L0
//! files), and the live entries are grouped by key group.
//!
//! Keys and values are already the canonical entry bytes (`KG | K | NS [| UK]` keys, Flink's serialized
//! values, list elements joined with `,` by the merge operator), so nothing is re-encoded. Keys outside
//! the handle's key groups (left behind after a rescale until compaction) are skipped, as Flink's restore
//! clips them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::location::{display_name, map_stream, open_stream};
use super::metadata::StreamHandle;
use super::proxy::FlinkStateMeta;
use super::sst::manifest::{read_current, read_manifest, Manifest};
use super::sst::{fold_versions, SstFile, Versions};
use super::FlinkError;
use keyed_state::keygroup::{KeyGroup, KeyGroupRange};
use keyed_state::Location;

/// The merge operator names that mean Flink's list append (`StringAppendTESTOperator`).
const FLINK_MERGE_OPERATORS: &[&str] = &["StringAppendTESTOperator", "stringappendtest"];
/// The only comparator Flink configures.
const BYTEWISE: &str = "leveldb.BytewiseComparator";

/// What was read from one SST file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SstSummary {
    /// The RocksDB file name (`000042.sst`).
    pub local_name: String,
    /// The file holding it (its name in the savepoint or checkpoint directory).
    pub stored_as: String,
    /// The column family (state) it belongs to.
    pub column_family: String,
    /// Its LSM level, as the MANIFEST records it.
    pub level: u32,
    /// Listed among the handle's private files (not shared).
    pub private: bool,
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
    /// The MANIFEST read (its local name).
    pub manifest: String,
    /// The SST files read, in the MANIFEST's order (column family, then RocksDB's read order).
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
            .field("manifest", &self.manifest)
            .field("files", &self.files)
            .field("skipped_outside_range", &self.skipped_outside_range)
            .finish()
    }
}

/// One file of a handle: its local name, handle and list.
struct HandleFile<'h> {
    local: &'h str,
    handle: &'h StreamHandle,
    private: bool,
}

impl HandleFile<'_> {
    fn label(&self) -> String {
        format!("{} ({})", self.local, display_name(self.handle))
    }
}

/// The manifest the handle's `CURRENT` names (or its only `MANIFEST` when it has no `CURRENT`), replayed.
fn open_manifest(
    files: &BTreeMap<&str, HandleFile<'_>>,
    base: &Path,
) -> Result<(String, Manifest), FlinkError> {
    let name = match files.get("CURRENT") {
        Some(c) => {
            let bytes = open_stream(c.handle, base)?;
            read_current(&bytes, &c.label())?
        }
        None => {
            let manifests: Vec<&&str> = files
                .keys()
                .filter(|n| n.starts_with("MANIFEST-"))
                .collect();
            match manifests.as_slice() {
                [one] => one.to_string(),
                _ => {
                    return Err(FlinkError::MissingFile {
                        file: "CURRENT".into(),
                        detail: format!(
                            "the handle holds no CURRENT file and {} MANIFEST files, so its live SST files cannot be told",
                            manifests.len()
                        ),
                    })
                }
            }
        }
    };
    let Some(m) = files.get(name.as_str()) else {
        return Err(FlinkError::MissingFile {
            file: name,
            detail: "CURRENT names this MANIFEST, but the handle does not hold it".into(),
        });
    };
    let label = m.label();
    let bytes = map_stream(m.handle, base)?;
    let manifest = read_manifest(&bytes, &label)?;
    if let Some(c) = manifest.comparator.as_deref().filter(|c| *c != BYTEWISE) {
        return Err(FlinkError::ManifestUnsupported {
            file: label,
            feature: format!("the comparator {c}"),
        });
    }
    Ok((name, manifest))
}

impl RocksNativeState {
    /// Reads every file of a handle (`shared` and `private` lists alike): `CURRENT`, the `MANIFEST`, and
    /// every live SST file. `states` are the meta-data file's states (Flink state id = index), `range` the
    /// handle's key groups, `base` the directory of `_metadata`. A live file the handle does not hold, an
    /// SST file of the handle that is not live, or any other file that would hold data (a WAL, a blob
    /// file) is an error naming it.
    pub fn read(
        shared: &[(String, StreamHandle)],
        private: &[(String, StreamHandle)],
        base: &Path,
        states: &[FlinkStateMeta],
        range: KeyGroupRange,
        max_parallelism: u32,
    ) -> Result<Self, FlinkError> {
        let mut files: BTreeMap<&str, HandleFile<'_>> = BTreeMap::new();
        for (list, is_private) in [(shared, false), (private, true)] {
            for (local, handle) in list {
                let f = HandleFile {
                    local,
                    handle,
                    private: is_private,
                };
                if let Some(prev) = files.insert(local, f) {
                    return Err(FlinkError::Inconsistent(format!(
                        "the handle lists {local} twice ({} and {})",
                        prev.label(),
                        files[local.as_str()].label()
                    )));
                }
            }
        }
        let (manifest_name, manifest) = open_manifest(&files, base)?;
        let live: BTreeSet<String> = manifest.live_files().map(|(_, f)| f.file_name()).collect();
        for f in files.values() {
            let local = f.local;
            let unread = |detail: &str| FlinkError::UnreadData {
                file: f.label(),
                detail: detail.to_string(),
            };
            if local.ends_with(".sst") {
                if !live.contains(local) {
                    return Err(unread(&format!(
                        "an SST file of the handle that is not among the live files of {manifest_name}: RocksDB would never read it"
                    )));
                }
            } else if local.ends_with(".blob") {
                return Err(FlinkError::SstUnsupported {
                    file: f.label(),
                    feature: "BlobDB blob files".into(),
                });
            } else if local.ends_with(".log") {
                if f.handle.size() != 0 {
                    return Err(FlinkError::SstUnsupported {
                        file: f.label(),
                        feature: "a write-ahead log with writes not flushed to SST files".into(),
                    });
                }
            } else if !(local == "CURRENT"
                || local.starts_with("MANIFEST-")
                || local.starts_with("OPTIONS-"))
            {
                return Err(unread(
                    "a file of a kind RocksDB directories do not hold; it is not read",
                ));
            }
        }
        let mut per_state: Vec<Versions> = states.iter().map(|_| Versions::default()).collect();
        let mut merge_ok = vec![true; states.len()];
        let mut out = RocksNativeState {
            manifest: manifest_name.clone(),
            ..RocksNativeState::default()
        };
        for (cf, lf) in manifest.live_files() {
            let local = lf.file_name();
            let Some(hf) = files.get(local.as_str()) else {
                return Err(FlinkError::MissingFile {
                    file: local,
                    detail: format!(
                        "{manifest_name} lists it as a live file of column family '{}' (level {}), but the handle does not hold it",
                        cf.name, lf.level
                    ),
                });
            };
            let label = hf.label();
            let bytes = map_stream(hf.handle, base)?;
            let corrupt = |detail: String| FlinkError::SstCorrupt {
                at: Location::file(label.as_str()),
                what: "file",
                detail,
            };
            if bytes.len() as u64 != lf.size {
                return Err(corrupt(format!(
                    "{} bytes, {manifest_name} says {}",
                    bytes.len(),
                    lf.size
                )));
            }
            let t = SstFile::open(&bytes, &label)?;
            if let Some(name) = t.properties.column_family_name.as_deref() {
                if name != cf.name {
                    return Err(corrupt(format!(
                        "its properties name column family '{name}', {manifest_name} lists it in '{}'",
                        cf.name
                    )));
                }
            }
            let seqnos = lf.smallest_seqno..=lf.largest_seqno;
            let state = states.iter().position(|s| s.name == cf.name);
            let tombstones = t.range_tombstones()?;
            let check_seqno = |seqno: u64| {
                if seqnos.contains(&seqno) {
                    Ok(())
                } else {
                    Err(corrupt(format!(
                        "a record with sequence number {seqno}, outside the range {}..={} {manifest_name} records",
                        lf.smallest_seqno, lf.largest_seqno
                    )))
                }
            };
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
                    t.for_each_record(&mut |r| {
                        check_seqno(r.seqno)?;
                        v.push(&r)
                    })?
                }
                None => {
                    let n = t.for_each_record(&mut |r| check_seqno(r.seqno))?;
                    if n > 0 || !tombstones.is_empty() {
                        return Err(FlinkError::UnreadData {
                            file: label,
                            detail: format!(
                                "column family '{}' holds data but is none of the states of the meta-data file ({})",
                                cf.name,
                                states
                                    .iter()
                                    .map(|s| s.name.as_str())
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ),
                        });
                    }
                    n
                }
            };
            out.files.push(SstSummary {
                local_name: local.clone(),
                stored_as: display_name(hf.handle),
                column_family: cf.name.clone(),
                level: lf.level,
                private: hf.private,
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
                        at: Location::file(label.as_str()),
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
