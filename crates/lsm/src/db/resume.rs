//! Continuing after an I/O error: [`Db::resume`].

use crate::wal::WalWriter;
use crate::LsmError;

use super::{Db, Result};

impl Db {
    /// Continues after a failed flush, compaction, manifest write or log write stopped writes (they fail
    /// with [`LsmError::Background`] naming the file meanwhile; reads keep working), once the cause is gone
    /// (space is back). Nothing that failed is reused: a manifest whose write or sync failed is replaced by a
    /// fresh one holding the full state, and with the WAL the active memtable is flushed (its log may end in
    /// a failed write) before writes go on into a new log. Returns the error again if the work still fails;
    /// `Ok` at once if nothing had failed. Reopening the database recovers the same way.
    pub fn resume(&self) -> Result<()> {
        let inner = &self.inner;
        let mut w = inner.writer.lock();
        {
            let st = inner.state.lock();
            if st.shutting_down {
                return Err(LsmError::Closed);
            }
            match &st.bg_error {
                None => return Ok(()),
                Some(e) if matches!(**e, LsmError::Closed) => return Err(LsmError::Closed),
                Some(_) => {}
            }
        }
        {
            let mut man = inner.manifest.lock();
            if man.writer.as_ref().is_some_and(|m| m.failed()) {
                inner.roll_manifest(&mut man)?;
            }
        }
        let wal_number = {
            let mut st = inner.state.lock();
            st.bg_error = None;
            let n = if inner.opts.wal {
                Some(inner.switch_memtable(&mut st, &mut w, false)?)
            } else {
                None
            };
            st.note_change();
            n
        };
        inner.wake();
        // Writes wait on the writer lock until the new log exists; the flush below retires the old one.
        inner.wait_flushed()?;
        if let Some(n) = wal_number {
            match WalWriter::create(&*inner.opts.storage, &inner.dir, n, inner.opts.wal_sync) {
                Ok(wal) => w.wal = Some(wal),
                Err(e) => return Err(LsmError::Background(inner.set_bg_error(e))),
            }
        }
        w.mem = None;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::Options;
    use std::sync::Arc;

    #[test]
    fn resume_without_an_error_is_a_no_op_and_after_close_it_fails() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), Options::default()).unwrap();
        db.put(b"a", b"1").unwrap();
        db.resume().unwrap();
        assert_eq!(db.get(b"a").unwrap().as_deref(), Some(&b"1"[..]));
        db.inner.set_bg_error(LsmError::Closed);
        assert!(matches!(db.resume(), Err(LsmError::Closed)));
        let _ = Arc::clone(&db.inner);
    }

    #[test]
    fn a_job_reporting_an_error_resume_already_cleared_does_not_stop_writes_again() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), Options::default()).unwrap();
        let first = db
            .inner
            .set_bg_error(LsmError::InvalidArgument("a failed flush".into()));
        assert!(db.put(b"a", b"1").is_err());
        db.resume().unwrap();
        // The job that failed returns its error (as `Background`) only now.
        db.inner.set_bg_error(LsmError::Background(first));
        db.put(b"a", b"1").unwrap();
    }
}
