//! Restore: entries buffered per state and written as SST files (`SstFileWriter`) that are ingested into the
//! state's column family, instead of going through the memtable.

use std::path::{Path, PathBuf};

use rocksdb::SstFileWriter;

use crate::error::{Error, Result};

use super::rdb_error;

/// Restored entries of one state not yet written out, in arrival order.
#[derive(Default)]
pub(super) struct LoadRun {
    /// Keys and values back to back.
    pub(super) data: Vec<u8>,
    /// (offset, key length, value length) per entry.
    pub(super) entries: Vec<(usize, usize, usize)>,
    /// Whether keys arrived strictly ascending.
    pub(super) sorted: bool,
}

impl LoadRun {
    pub(super) fn key(&self, e: (usize, usize, usize)) -> &[u8] {
        &self.data[e.0..e.0 + e.1]
    }

    pub(super) fn value(&self, e: (usize, usize, usize)) -> &[u8] {
        &self.data[e.0 + e.1..e.0 + e.1 + e.2]
    }

    pub(super) fn push(&mut self, key: &[u8], value: &[u8]) {
        if self.entries.is_empty() {
            self.sorted = true;
        } else if let Some(&last) = self.entries.last() {
            self.sorted &= self.key(last) < key;
        }
        self.entries.push((self.data.len(), key.len(), value.len()));
        self.data.extend_from_slice(key);
        self.data.extend_from_slice(value);
    }

    /// The entries in ascending key order, the last arrival winning for duplicate keys.
    pub(super) fn ordered(&self) -> Vec<(usize, usize, usize)> {
        let mut v = self.entries.clone();
        if !self.sorted {
            // Stable: equal keys stay in arrival order, then keep the last of each run of equal keys.
            v.sort_by(|a, b| self.key(*a).cmp(self.key(*b)));
            let mut out: Vec<(usize, usize, usize)> = Vec::with_capacity(v.len());
            for e in v {
                match out.last_mut() {
                    Some(last) if self.key(*last) == self.key(e) => *last = e,
                    _ => out.push(e),
                }
            }
            v = out;
        }
        v
    }

    pub(super) fn clear(&mut self) {
        self.data.clear();
        self.entries.clear();
    }
}

/// Restore state: buffered runs and the SST files written so far, per state.
#[derive(Default)]
pub(super) struct Loader {
    pub(super) runs: Vec<LoadRun>,
    pub(super) files: Vec<Vec<PathBuf>>,
    pub(super) buffered: usize,
    pub(super) next_file: u64,
}

impl Loader {
    /// Writes every buffered run out as one SST file per state into `dir`, with the column families'
    /// `cf_options`; `context(state)` names a state in errors.
    pub(super) fn spill(
        &mut self,
        dir: &Path,
        cf_options: &rocksdb::Options,
        context: &dyn Fn(usize) -> String,
    ) -> Result<()> {
        if self.runs.iter().any(|r| !r.entries.is_empty()) {
            std::fs::create_dir_all(dir).map_err(Error::io_at("creating the directory", dir))?;
        }
        for state in 0..self.runs.len() {
            let run = &self.runs[state];
            if run.entries.is_empty() {
                continue;
            }
            let path = dir.join(format!("restore-{:06}.sst", self.next_file));
            self.next_file += 1;
            let mut writer = SstFileWriter::create(cf_options);
            writer
                .open(&path)
                .map_err(|e| rdb_error(context(state), e))?;
            for e in run.ordered() {
                writer
                    .put(run.key(e), run.value(e))
                    .map_err(|e| rdb_error(context(state), e))?;
            }
            writer.finish().map_err(|e| rdb_error(context(state), e))?;
            if self.files.len() <= state {
                self.files.resize_with(state + 1, Vec::new);
            }
            self.files[state].push(path);
            self.runs[state].clear();
        }
        self.buffered = 0;
        Ok(())
    }
}
