//! The I/O runtime of checkpoint storage: a small tokio runtime that runs object-store requests, shared by
//! every [`CheckpointStorage`](super::CheckpointStorage) opened through one
//! [`StateEnv`](crate::env::StateEnv) (or private to a storage opened on its own), started at its first use.
//!
//! Every object-store request is a task of this runtime ([`IoRuntime::spawn`]); the storage's async calls
//! await that task, so the awaiting task parks no thread of its executor, whatever runtime (or executor)
//! it runs on, and the store's connections live on one runtime. (Inside a synchronous call, which waits in
//! this runtime's `block_on`, the request runs in place on the waiting thread, with the same drivers.) Blocking work of an upload (the wait for
//! the backend's files, reads of small local files) runs on this runtime's blocking threads
//! ([`IoRuntime::spawn_blocking`]).
//!
//! The synchronous calls wait for the async ones. Called on a plain thread, the call runs with `block_on`
//! on the runtime. Called from inside a tokio runtime (the caller's, multi-thread or current-thread), where
//! `block_on` would panic, the call is handed to a helper thread outside any runtime, which runs it on
//! the I/O runtime, and the caller waits for that thread: the call blocks its thread as any synchronous
//! call does, and never panics. On a thread of tokio's blocking pool running one of the async forms that
//! are not native ([`off_executor`]), where `block_on` is allowed, the call runs with `block_on` directly.
//! Dropping the runtime inside an async context shuts it down in the background instead of waiting for its
//! threads (which would panic too).

use std::cell::Cell;
use std::future::Future;
use std::sync::OnceLock;

use crate::error::{Error, Result};

/// Worker threads of an I/O runtime unless told otherwise.
pub const DEFAULT_IO_THREADS: usize = 2;

/// A tokio runtime for object-store requests (see the module documentation).
pub struct IoRuntime {
    threads: usize,
    rt: OnceLock<tokio::runtime::Runtime>,
}

impl std::fmt::Debug for IoRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IoRuntime")
            .field("threads", &self.threads)
            .field("started", &self.rt.get().is_some())
            .finish()
    }
}

impl IoRuntime {
    /// A runtime of `threads` worker threads (at least 1) and at most as many blocking threads (a local
    /// root's file operations), started at its first request.
    pub fn new(threads: usize) -> IoRuntime {
        IoRuntime {
            threads: threads.max(1),
            rt: OnceLock::new(),
        }
    }

    /// Worker threads.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Whether the runtime's threads were started.
    pub fn started(&self) -> bool {
        self.rt.get().is_some()
    }

    fn runtime(&self) -> Result<&tokio::runtime::Runtime> {
        if let Some(rt) = self.rt.get() {
            return Ok(rt);
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(self.threads)
            .max_blocking_threads(self.threads)
            .thread_name("ckpt-io")
            .enable_all()
            .build()
            .map_err(Error::io_at(
                "starting the I/O runtime of checkpoint storage",
                "ckpt-io",
            ))?;
        // Another thread may have won the race: its runtime stays; this one, never used, stops in the
        // background (a plain drop would panic inside an async context).
        if let Err(rt) = self.rt.set(rt) {
            rt.shutdown_background();
        }
        self.rt.get().ok_or_else(|| {
            Error::InvalidArgument("the I/O runtime of checkpoint storage did not start".into())
        })
    }

    /// Runs `fut` as a task of the runtime and returns what awaits its output: the awaiting task (on any
    /// executor, or a `block_on`) parks no thread of its own. A panic of `fut` is resumed in the awaiting
    /// task.
    ///
    /// Inside this runtime's [`block_on`](Self::block_on) (a synchronous call), `fut` runs in place
    /// instead: the waiting thread polls it with the runtime's drivers, as a task would be, and no worker
    /// thread has to be woken for it.
    pub(crate) fn spawn<F>(&self, fut: F) -> Result<impl Future<Output = Result<F::Output>>>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let rt = self.runtime()?;
        if IN_BLOCK_ON.with(Cell::get) {
            return Ok(futures::future::Either::Left(async move { Ok(fut.await) }));
        }
        let task = rt.spawn(fut);
        Ok(futures::future::Either::Right(async move {
            task.await.map_err(joined)
        }))
    }

    /// Runs `fut` as a task of the runtime, detached (a background materialization): never in place, also
    /// inside [`block_on`](Self::block_on).
    pub(crate) fn spawn_detached<F>(&self, fut: F) -> Result<()>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        drop(self.runtime()?.spawn(fut));
        Ok(())
    }

    /// Runs the blocking `work` (the wait for a backend's files, serializing its tables) on the runtime's
    /// blocking threads and returns what awaits its result. Inside this runtime's
    /// [`block_on`](Self::block_on) (a synchronous call, whose thread waits anyway) it runs in place when
    /// awaited, so a long wait of one caller never holds a blocking thread that other requests need.
    pub(crate) fn spawn_blocking<W, T>(&self, work: W) -> Result<impl Future<Output = Result<T>>>
    where
        W: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let rt = self.runtime()?;
        if IN_BLOCK_ON.with(Cell::get) {
            return Ok(futures::future::Either::Left(async move { Ok(work()) }));
        }
        let task = rt.spawn_blocking(work);
        Ok(futures::future::Either::Right(async move {
            task.await.map_err(joined)
        }))
    }

    /// Runs the future `make` returns to completion on the runtime and returns its output, from a plain
    /// thread or from inside any tokio runtime (see the module documentation). The future is made on the
    /// thread that runs it, so it need not be `Send`.
    pub fn block_on<M, F>(&self, make: M) -> Result<F::Output>
    where
        M: FnOnce() -> F + Send,
        F: Future,
        F::Output: Send,
    {
        let rt = self.runtime()?;
        let run = move || {
            let _in = InBlockOn::enter();
            rt.block_on(make())
        };
        if tokio::runtime::Handle::try_current().is_err() || BLOCKING_ALLOWED.with(Cell::get) {
            return Ok(run());
        }
        std::thread::scope(|s| {
            let helper = std::thread::Builder::new()
                .name("ckpt-io-call".into())
                .spawn_scoped(s, run)
                .map_err(Error::io_at(
                    "starting a checkpoint I/O helper thread",
                    "ckpt-io-call",
                ))?;
            // A panic of the request is the caller's, as it would be on a plain thread.
            helper
                .join()
                .map_err(|payload| std::panic::resume_unwind(payload))
        })
    }
}

impl Drop for IoRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            if tokio::runtime::Handle::try_current().is_ok() {
                rt.shutdown_background();
            } else {
                drop(rt);
            }
        }
    }
}

/// The error of a task of the runtime that did not finish: its panic is resumed; a task cancelled by the
/// runtime's shutdown is [`Error::Closed`].
pub(super) fn joined(e: tokio::task::JoinError) -> Error {
    if e.is_panic() {
        std::panic::resume_unwind(e.into_panic())
    }
    Error::Closed("the I/O runtime of checkpoint storage (its task was cancelled)")
}

/// Marks the thread as in [`IoRuntime::block_on`] until dropped (a panic included).
struct InBlockOn(bool);

impl InBlockOn {
    fn enter() -> InBlockOn {
        InBlockOn(IN_BLOCK_ON.with(|b| b.replace(true)))
    }
}

impl Drop for InBlockOn {
    fn drop(&mut self) {
        IN_BLOCK_ON.with(|b| b.set(self.0));
    }
}

thread_local! {
    /// This thread is in [`IoRuntime::block_on`]: a request runs in place ([`IoRuntime::spawn`]).
    static IN_BLOCK_ON: Cell<bool> = const { Cell::new(false) };
    /// This thread runs blocking work for an async form (tokio's blocking pool, or a thread of its own):
    /// not an executor thread, so `block_on` is allowed here.
    static BLOCKING_ALLOWED: Cell<bool> = const { Cell::new(false) };
}

/// Runs the blocking `work` off the executor and awaits its result: on tokio's blocking pool inside a
/// tokio runtime (current-thread or multi-thread), on a thread of its own outside one (any other
/// executor). The executor thread that awaits is never blocked. A panic of `work` is resumed in the
/// caller.
pub(crate) async fn off_executor<T, W>(work: W) -> Result<T>
where
    W: FnOnce() -> Result<T> + Send + 'static,
    T: Send + 'static,
{
    let job = move || {
        BLOCKING_ALLOWED.with(|b| b.set(true));
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
        BLOCKING_ALLOWED.with(|b| b.set(false));
        r
    };
    let r = match tokio::runtime::Handle::try_current() {
        Ok(h) => h.spawn_blocking(job).await.map_err(|e| {
            if e.is_panic() {
                std::panic::resume_unwind(e.into_panic())
            }
            Error::Closed("the tokio runtime (the blocking task was cancelled)")
        })?,
        Err(_) => {
            let (tx, rx) = futures::channel::oneshot::channel();
            std::thread::Builder::new()
                .name("ckpt-async".into())
                .spawn(move || {
                    let _ = tx.send(job());
                })
                .map_err(Error::io_at(
                    "starting a checkpoint task thread",
                    "ckpt-async",
                ))?;
            rx.await
                .map_err(|_| Error::Closed("the checkpoint task thread"))?
        }
    };
    r.unwrap_or_else(|payload| std::panic::resume_unwind(payload))
}
