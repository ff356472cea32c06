//! File-system helpers shared by the LSM engine and the savepoint writer.

use std::path::Path;

/// Fsyncs directory `dir`, so that files created, renamed or removed in it are durable. A no-op where
/// directories cannot be opened for syncing (non-unix platforms).
#[cfg(unix)]
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Fsyncs directory `dir`, so that files created, renamed or removed in it are durable. A no-op where
/// directories cannot be opened for syncing (non-unix platforms).
#[cfg(not(unix))]
pub fn sync_dir(_dir: &Path) -> std::io::Result<()> {
    Ok(())
}
