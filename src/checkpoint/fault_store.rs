//! [`FaultStore`]: an [`ObjectStore`] wrapper for tests that fails requests where it is told — every
//! request from the N-th on, or only puts of paths containing a string — and makes multipart uploads fail
//! midway (some parts uploaded, then an error; the object never appears, as object stores guarantee).

use std::fmt;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::StreamExt;
use object_store::path::Path;
use object_store::ObjectStoreExt;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, Result, UploadPart,
};
use parking_lot::Mutex;

/// Which requests fail.
#[derive(Debug, Default)]
struct Plan {
    /// Requests numbered from 1: this one and every later one fail (0: none).
    fail_from: u64,
    /// Puts (whole or multipart) of paths containing this fail.
    fail_puts_containing: Option<String>,
    /// Multipart uploads fail after this many parts.
    fail_after_parts: Option<u64>,
    /// Done once, at the first get of a path containing the string, before it is answered.
    on_get: Option<GetHook>,
    /// Request number at which the store stops until the test resumes it ([`FaultStore::pause_at`]).
    pause: Option<Pause>,
    /// Puts held until enough of them wait at once ([`FaultStore::gather_puts`]).
    gather: Option<Gather>,
}

/// Puts of paths containing `contains` wait, without blocking a thread, until `parties` of them wait.
#[derive(Debug)]
struct Gather {
    contains: String,
    /// Puts that go through before the gathering starts.
    pass: usize,
    parties: usize,
    waiting: Vec<futures::channel::oneshot::Sender<()>>,
}

/// A request held back: `reached` is signalled when it arrives, and it proceeds when `resume` is.
#[derive(Debug)]
struct Pause {
    at: u64,
    reached: std::sync::mpsc::Sender<()>,
    resume: std::sync::mpsc::Receiver<()>,
}

/// What another writer does between a listing and a read ([`FaultStore::on_first_get`]).
#[derive(Debug)]
struct GetHook {
    contains: String,
    puts: Vec<(Path, Bytes)>,
    deletes: Vec<Path>,
}

/// An object store that fails chosen requests (see the module docs). Cloning shares the plan and counter.
#[derive(Clone)]
pub struct FaultStore {
    inner: Arc<dyn ObjectStore>,
    requests: Arc<AtomicU64>,
    plan: Arc<Mutex<Plan>>,
    /// Multipart uploads started and aborted.
    multipart: Arc<[AtomicU64; 2]>,
}

impl fmt::Debug for FaultStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultStore")
            .field("inner", &self.inner)
            .field("requests", &self.requests.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl fmt::Display for FaultStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultStore({})", self.inner)
    }
}

fn injected(what: &str, path: &Path) -> object_store::Error {
    object_store::Error::Generic {
        store: "FaultStore",
        source: format!("injected failure: {what} {path}").into(),
    }
}

impl FaultStore {
    /// Wraps `inner`, failing nothing yet.
    pub fn new(inner: Arc<dyn ObjectStore>) -> Self {
        FaultStore {
            inner,
            requests: Arc::new(AtomicU64::new(0)),
            plan: Arc::new(Mutex::new(Plan::default())),
            multipart: Arc::new([AtomicU64::new(0), AtomicU64::new(0)]),
        }
    }

    /// Multipart uploads started so far.
    pub fn multipart_uploads(&self) -> u64 {
        self.multipart[0].load(Ordering::SeqCst)
    }

    /// Multipart uploads aborted so far.
    pub fn multipart_aborts(&self) -> u64 {
        self.multipart[1].load(Ordering::SeqCst)
    }

    /// Requests made so far (every call counts: put, part, get, list, delete, copy, ...).
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::SeqCst)
    }

    /// Request number `n` (counted from 1 over the store's life) and every later one fail; `None` turns it
    /// off.
    pub fn fail_from(&self, n: Option<u64>) {
        self.plan.lock().fail_from = n.unwrap_or(0);
    }

    /// Puts of paths containing `s` fail (`None`: none).
    pub fn fail_puts_containing(&self, s: Option<&str>) {
        self.plan.lock().fail_puts_containing = s.map(str::to_string);
    }

    /// Multipart uploads fail after `parts` parts went through (`None`: they do not).
    pub fn fail_multipart_after(&self, parts: Option<u64>) {
        self.plan.lock().fail_after_parts = parts;
    }

    /// At the first get of a path containing `s`, before answering it, puts `puts` and deletes `deletes`
    /// (paths of the inner store): another writer acting between a listing and the reads after it.
    pub fn on_first_get(&self, s: &str, puts: Vec<(String, Vec<u8>)>, deletes: Vec<String>) {
        self.plan.lock().on_get = Some(GetHook {
            contains: s.to_string(),
            puts: puts
                .into_iter()
                .map(|(p, b)| (Path::from(p), Bytes::from(b)))
                .collect(),
            deletes: deletes.into_iter().map(Path::from).collect(),
        });
    }

    /// Request number `n` (counted from 1 over the store's life) waits, before it is made, until the test
    /// resumes it: the first receiver returned hears when it arrives, the sender resumes it (dropping the
    /// sender resumes it too). Another writer acts between two requests of this one.
    pub fn pause_at(&self, n: u64) -> (std::sync::mpsc::Receiver<()>, std::sync::mpsc::Sender<()>) {
        let (reached_tx, reached_rx) = std::sync::mpsc::channel();
        let (resume_tx, resume_rx) = std::sync::mpsc::channel();
        self.plan.lock().pause = Some(Pause {
            at: n,
            reached: reached_tx,
            resume: resume_rx,
        });
        (reached_rx, resume_tx)
    }

    /// The first `parties` puts (whole or multipart) of paths containing `s` wait for each other: none is
    /// made until all of them have arrived, and they wait without blocking a thread (an awaited channel).
    /// Requests made one at a time never get through; requests awaited at once all do.
    pub fn gather_puts(&self, s: &str, parties: usize) {
        self.gather_puts_after(s, 0, parties);
    }

    /// As [`gather_puts`](Self::gather_puts), after the first `pass` puts of paths containing `s` went
    /// through: some of a writer's objects are stored while the others wait.
    pub fn gather_puts_after(&self, s: &str, pass: usize, parties: usize) {
        self.plan.lock().gather = Some(Gather {
            contains: s.to_string(),
            pass,
            parties,
            waiting: Vec::new(),
        });
    }

    /// Waits for the other puts of the gathering ([`gather_puts`](Self::gather_puts)) if `path` is one.
    async fn gather(&self, path: &Path) {
        let wait = {
            let mut plan = self.plan.lock();
            match plan.gather.as_mut() {
                Some(g) if path.as_ref().contains(&g.contains) && g.pass > 0 => {
                    g.pass -= 1;
                    None
                }
                Some(g) if path.as_ref().contains(&g.contains) => {
                    if g.waiting.len() + 1 >= g.parties {
                        // The last one: every put goes through, and the gathering is over.
                        if let Some(g) = plan.gather.take() {
                            for w in g.waiting {
                                let _ = w.send(());
                            }
                        }
                        None
                    } else {
                        let (tx, rx) = futures::channel::oneshot::channel();
                        g.waiting.push(tx);
                        Some(rx)
                    }
                }
                _ => None,
            }
        };
        if let Some(rx) = wait {
            let _ = rx.await;
        }
    }

    /// Counts a request; an error if it is to fail.
    fn request(&self, what: &str, path: &Path, is_put: bool) -> Result<()> {
        let n = self.requests.fetch_add(1, Ordering::SeqCst) + 1;
        let pause = {
            let mut plan = self.plan.lock();
            match &plan.pause {
                Some(p) if p.at == n => plan.pause.take(),
                _ => None,
            }
        };
        if let Some(p) = pause {
            // The test thread runs the other writer now; this request waits (a blocked worker thread of
            // the store's runtime, the other one keeps going).
            let _ = p.reached.send(());
            let _ = p.resume.recv();
        }
        let plan = self.plan.lock();
        if plan.fail_from != 0 && n >= plan.fail_from {
            return Err(injected(what, path));
        }
        if is_put
            && plan
                .fail_puts_containing
                .as_deref()
                .is_some_and(|s| path.as_ref().contains(s))
        {
            return Err(injected(what, path));
        }
        Ok(())
    }
}

#[async_trait]
impl ObjectStore for FaultStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.request("put", location, true)?;
        self.gather(location).await;
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.request("multipart put", location, true)?;
        self.gather(location).await;
        let upload = self.inner.put_multipart_opts(location, opts).await?;
        self.multipart[0].fetch_add(1, Ordering::SeqCst);
        Ok(Box::new(FaultUpload {
            store: self.clone(),
            location: location.clone(),
            upload,
            parts: 0,
        }))
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.request("get", location, false)?;
        let hook = {
            let mut plan = self.plan.lock();
            match &plan.on_get {
                Some(h) if location.as_ref().contains(&h.contains) => plan.on_get.take(),
                _ => None,
            }
        };
        if let Some(h) = hook {
            for (p, b) in h.puts {
                self.inner.put(&p, PutPayload::from(b)).await?;
            }
            for p in h.deletes {
                self.inner.delete(&p).await?;
            }
        }
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        self.request("get ranges", location, false)?;
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        let me = self.clone();
        let checked = locations
            .map(move |p| {
                let p = p?;
                me.request("delete", &p, false)?;
                Ok(p)
            })
            .boxed();
        self.inner.delete_stream(checked)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        let root = Path::default();
        match self.request("list", prefix.unwrap_or(&root), false) {
            Ok(()) => self.inner.list(prefix),
            Err(e) => futures::stream::once(async move { Err(e) }).boxed(),
        }
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        let root = Path::default();
        self.request("list", prefix.unwrap_or(&root), false)?;
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.request("copy", to, true)?;
        self.inner.copy_opts(from, to, options).await
    }
}

/// A multipart upload that fails after the planned number of parts.
#[derive(Debug)]
struct FaultUpload {
    store: FaultStore,
    location: Path,
    upload: Box<dyn MultipartUpload>,
    parts: u64,
}

#[async_trait]
impl MultipartUpload for FaultUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        self.parts += 1;
        let limit = self.store.plan.lock().fail_after_parts;
        if let Err(e) = self.store.request("put part", &self.location, true) {
            return Box::pin(async move { Err(e) });
        }
        if limit.is_some_and(|l| self.parts > l) {
            let e = injected("put part", &self.location);
            return Box::pin(async move { Err(e) });
        }
        self.upload.put_part(data)
    }

    async fn complete(&mut self) -> Result<PutResult> {
        self.store
            .request("complete multipart put", &self.location, true)?;
        let limit = self.store.plan.lock().fail_after_parts;
        if limit.is_some_and(|l| self.parts > l) {
            return Err(injected("complete multipart put", &self.location));
        }
        self.upload.complete().await
    }

    async fn abort(&mut self) -> Result<()> {
        self.store.multipart[1].fetch_add(1, Ordering::SeqCst);
        self.upload.abort().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;
    use object_store::ObjectStoreExt;

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
    }

    #[test]
    fn a_multipart_upload_failing_midway_leaves_no_object_and_requests_fail_from_the_nth() {
        let store = FaultStore::new(Arc::new(InMemory::new()));
        let p = Path::from("a/big");
        rt().block_on(async {
            store.fail_multipart_after(Some(1));
            let mut up = store.put_multipart(&p).await.unwrap();
            up.put_part(PutPayload::from(vec![1u8; 100])).await.unwrap();
            assert!(up.put_part(PutPayload::from(vec![2u8; 100])).await.is_err());
            assert!(up.complete().await.is_err());
            assert!(
                store.head(&p).await.is_err(),
                "no object after a failed upload"
            );
            store.fail_multipart_after(None);
            store
                .put(&p, PutPayload::from(vec![3u8; 10]))
                .await
                .unwrap();
            store.fail_from(Some(store.requests() + 2));
            store.head(&p).await.unwrap();
            assert!(store.get(&p).await.is_err());
            assert!(store.head(&p).await.is_err());
            store.fail_from(None);
            store.fail_puts_containing(Some("meta"));
            assert!(store
                .put(&Path::from("x/meta"), PutPayload::from(vec![1]))
                .await
                .is_err());
            store
                .put(&Path::from("x/data"), PutPayload::from(vec![1]))
                .await
                .unwrap();
        });
    }
}
