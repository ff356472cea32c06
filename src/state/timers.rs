//! Timers: the store's operations on its timer queues — adding and removing timers, peeking and polling,
//! and firing them as time advances (Flink's `InternalTimerService`). The queues themselves are in
//! `timer_queue`.

use std::collections::VecDeque;
use std::sync::Arc;

use super::store::KeyedStateStore;
use super::timer_queue::{
    element, timer_registration, QueueHeads, Run, Timer, TimerQueue, TimerService,
    EVENT_TIMERS_PREFIX, PROCESSING_TIMERS_PREFIX, RUN_BATCH,
};
use crate::backend::StateId;
use crate::error::{Error, Result};
use crate::keygroup::{write_key_group_prefix, KeyGroup};
use crate::serializer::{KeySerializer, TypeSerializer};

impl<K: KeySerializer> KeyedStateStore<K> {
    /// Registers a timer queue named `name` with namespaces of `namespace`.
    pub fn register_timer_queue<N: TypeSerializer>(
        &mut self,
        name: &str,
        namespace: N,
    ) -> Result<TimerQueue<N>> {
        self.register_timer_queue_shared(name, Arc::new(namespace))
    }

    fn register_timer_queue_shared<N: TypeSerializer>(
        &mut self,
        name: &str,
        ns: Arc<N>,
    ) -> Result<TimerQueue<N>> {
        let reg = timer_registration(name, &self.key_serializer, &ns);
        let id = self.register_meta(reg)?;
        self.timer_heads.entry(id).or_default();
        Ok(TimerQueue {
            core: self.core(id, name, ns),
        })
    }

    /// Registers a timer service named `name` (Flink names them `user-timers`, `window-timers`): its queues
    /// are the states `_timer_state/event_<name>` and `_timer_state/processing_<name>`.
    pub fn register_timer_service<N: TypeSerializer>(
        &mut self,
        name: &str,
        namespace: N,
    ) -> Result<TimerService<N>> {
        let ns = Arc::new(namespace);
        Ok(TimerService {
            event: self
                .register_timer_queue_shared(&format!("{EVENT_TIMERS_PREFIX}{name}"), ns.clone())?,
            processing: self
                .register_timer_queue_shared(&format!("{PROCESSING_TIMERS_PREFIX}{name}"), ns)?,
        })
    }

    /// The key-group prefix bytes of `kg` (the "map" of a timer queue's key group).
    fn kg_bytes(&self, kg: KeyGroup) -> ([u8; 2], usize) {
        let mut v = Vec::with_capacity(2);
        write_key_group_prefix(&mut v, kg, self.prefix_len);
        let mut out = [0u8; 2];
        out[..v.len()].copy_from_slice(&v);
        (out, v.len())
    }

    /// The smallest element of `id`'s key group `kg`, read from the backend.
    fn first_in_group(&mut self, id: StateId, kg: KeyGroup) -> Result<Option<Vec<u8>>> {
        let (p, n) = self.kg_bytes(kg);
        let mut first = None;
        self.backend.map_scan(id, kg, &p[..n], &mut |uk, _| {
            first = Some(uk.to_vec());
            false
        })?;
        Ok(first)
    }

    /// The smallest element `> after` of `id`'s key group `kg` and the run of up to [`RUN_BATCH`] elements
    /// after it, read from the backend with one seek.
    fn run_from(
        &mut self,
        id: StateId,
        kg: KeyGroup,
        after: &[u8],
    ) -> Result<(Option<Vec<u8>>, Run)> {
        let (p, n) = self.kg_bytes(kg);
        let mut found: VecDeque<Vec<u8>> = VecDeque::with_capacity(RUN_BATCH + 1);
        self.backend
            .map_scan_from(id, kg, &p[..n], after, &mut |uk, _| {
                if uk > after {
                    found.push_back(uk.to_vec());
                }
                found.len() <= RUN_BATCH
            })?;
        let complete = found.len() <= RUN_BATCH;
        let head = found.pop_front();
        Ok((
            head,
            Run {
                next: found,
                complete,
            },
        ))
    }

    /// Reads the heads and size of queue `id` from the backend if they are not cached.
    fn heads(&mut self, id: StateId) -> Result<&mut QueueHeads> {
        let loaded = self.timer_heads.get(&id).is_some_and(|h| h.loaded);
        if !loaded {
            let mut heads = QueueHeads {
                time: self.timer_heads.get(&id).and_then(|h| h.time),
                ..QueueHeads::default()
            };
            for kg in self.backend.config().key_group_range.iter() {
                if let Some(h) = self.first_in_group(id, kg)? {
                    heads.set_head(kg, Some(h));
                }
            }
            let mut len = 0u64;
            self.backend.scan_state(id, &mut |_, _, _| {
                len += 1;
                true
            })?;
            heads.len = len;
            heads.loaded = true;
            self.timer_heads.insert(id, heads);
        }
        self.timer_heads
            .get_mut(&id)
            .ok_or_else(|| Error::UnknownStateId(id))
    }

    /// Adds element `el` to key group `kg` of queue `id`. Returns whether the queue's head changed (a
    /// duplicate changes nothing: set semantics).
    fn queue_add(&mut self, id: StateId, kg: KeyGroup, el: &[u8]) -> Result<bool> {
        let before = self.heads(id)?.first().cloned();
        let (p, n) = self.kg_bytes(kg);
        if self.backend.map_get(id, kg, &p[..n], el)?.is_some() {
            return Ok(false);
        }
        self.backend.map_put(id, kg, &p[..n], el, &[])?;
        let heads = self.heads(id)?;
        heads.len += 1;
        match heads.heads.get(&kg) {
            // The key group was empty: now every element is known.
            None => {
                heads.set_head(kg, Some(el.to_vec()));
                heads.runs.insert(
                    kg,
                    Run {
                        next: VecDeque::new(),
                        complete: true,
                    },
                );
            }
            Some(h) if el < h.as_slice() => {
                let old = h.clone();
                heads.set_head(kg, Some(el.to_vec()));
                heads.runs.entry(kg).or_default().next.push_front(old);
            }
            Some(_) => {
                if let Some(run) = heads.runs.get_mut(&kg) {
                    run.add(el);
                }
            }
        }
        Ok(heads.first() != before.as_ref())
    }

    /// Removes element `el` from key group `kg` of queue `id`. Returns whether the queue's head changed.
    fn queue_remove(&mut self, id: StateId, kg: KeyGroup, el: &[u8]) -> Result<bool> {
        let (p, n) = self.kg_bytes(kg);
        if self.backend.map_get(id, kg, &p[..n], el)?.is_none() {
            return Ok(false);
        }
        self.remove_present(id, kg, el)
    }

    /// Removes element `el`, known to be queued, from key group `kg` of queue `id`. Returns whether the
    /// queue's head changed.
    fn remove_present(&mut self, id: StateId, kg: KeyGroup, el: &[u8]) -> Result<bool> {
        let before = self.heads(id)?.first().cloned();
        let (p, n) = self.kg_bytes(kg);
        self.backend.map_remove(id, kg, &p[..n], el)?;
        let heads = self.heads(id)?;
        heads.len = heads.len.saturating_sub(1);
        let was_head = heads.heads.get(&kg).is_some_and(|h| h.as_slice() == el);
        if !was_head {
            if let Some(run) = heads.runs.get_mut(&kg) {
                run.remove(el);
            }
            return Ok(heads.first() != before.as_ref());
        }
        let run = heads.runs.entry(kg).or_default();
        let next = match run.next.pop_front() {
            Some(next) => Some(next),
            None if run.complete => None,
            None => {
                // The next head is the smallest element after the removed one: one seek there reads it and
                // the batch after it.
                let (next, run) = self.run_from(id, kg, el)?;
                let heads = self.heads(id)?;
                heads.runs.insert(kg, run);
                next
            }
        };
        let heads = self.heads(id)?;
        heads.set_head(kg, next);
        Ok(heads.first() != before.as_ref())
    }

    /// Decodes a timer element of key group `kg`.
    fn decode_timer<N: TypeSerializer>(
        &self,
        q: &TimerQueue<N>,
        el: &[u8],
    ) -> Result<Timer<K::Value, N::Value>> {
        let corrupt = |detail: String| Error::CorruptState {
            state: q.core.name.to_string(),
            detail,
        };
        let Some((ts, rest)) = el.split_first_chunk::<8>() else {
            return Err(corrupt(format!("timer element of {} bytes", el.len())));
        };
        let timestamp = (u64::from_be_bytes(*ts) as i64) ^ i64::MIN;
        let mut input = rest;
        let key = self
            .key_serializer
            .deserialize(&mut input)
            .map_err(|e| Error::serializer("<key>", e))?;
        let namespace = crate::serializer::from_bytes(&*q.core.namespace, input)
            .map_err(|e| Error::serializer(&*q.core.name, e))?;
        Ok(Timer {
            timestamp,
            key,
            namespace,
        })
    }

    /// Builds the element of a timer at the current key in `ns`, returning its key group.
    fn current_element<N: TypeSerializer>(
        &mut self,
        q: &TimerQueue<N>,
        ts: i64,
        ns: &N::Value,
    ) -> Result<(KeyGroup, Vec<u8>)> {
        let Some((kg, key)) = self.current_key_raw() else {
            return Err(Error::NoCurrentKey);
        };
        let key = key.to_vec();
        let mut ns_bytes = Vec::new();
        q.core
            .namespace
            .serialize(ns, &mut ns_bytes)
            .map_err(|e| Error::serializer(&*q.core.name, e))?;
        let mut el = Vec::with_capacity(8 + key.len() + ns_bytes.len());
        element(&mut el, ts, &key, &ns_bytes);
        Ok((kg, el))
    }

    /// Adds a timer at `timestamp` for the current key in `ns` to `q`. Returns whether the queue's head
    /// changed (Flink's `add`); adding a timer that is queued already changes nothing.
    pub fn add_timer<N: TypeSerializer>(
        &mut self,
        q: &TimerQueue<N>,
        timestamp: i64,
        ns: &N::Value,
    ) -> Result<bool> {
        let (kg, el) = self.current_element(q, timestamp, ns)?;
        self.queue_add(q.core.id, kg, &el)
    }

    /// Removes the timer at `timestamp` for the current key in `ns` from `q`. Returns whether the queue's head
    /// changed (Flink's `remove`); removing an absent timer changes nothing.
    pub fn remove_timer<N: TypeSerializer>(
        &mut self,
        q: &TimerQueue<N>,
        timestamp: i64,
        ns: &N::Value,
    ) -> Result<bool> {
        let (kg, el) = self.current_element(q, timestamp, ns)?;
        self.queue_remove(q.core.id, kg, &el)
    }

    /// The first timer of `q` (smallest timestamp, then key and namespace bytes), read from memory.
    pub fn peek_timer<N: TypeSerializer>(
        &mut self,
        q: &TimerQueue<N>,
    ) -> Result<Option<Timer<K::Value, N::Value>>> {
        let first = self.heads(q.core.id)?.first().map(|(el, _)| el.clone());
        first.map(|el| self.decode_timer(q, &el)).transpose()
    }

    /// Removes and returns the first timer of `q`.
    pub fn poll_timer<N: TypeSerializer>(
        &mut self,
        q: &TimerQueue<N>,
    ) -> Result<Option<Timer<K::Value, N::Value>>> {
        Ok(self.poll_raw(q)?.map(|(_, t)| t))
    }

    fn poll_raw<N: TypeSerializer>(
        &mut self,
        q: &TimerQueue<N>,
    ) -> Result<Option<(KeyGroup, Timer<K::Value, N::Value>)>> {
        let Some((el, kg)) = self.heads(q.core.id)?.first().cloned() else {
            return Ok(None);
        };
        let timer = self.decode_timer(q, &el)?;
        // A cached head is queued: no lookup before the removal.
        self.remove_present(q.core.id, kg, &el)?;
        Ok(Some((kg, timer)))
    }

    /// The number of timers in `q`.
    pub fn timer_count<N: TypeSerializer>(&mut self, q: &TimerQueue<N>) -> Result<u64> {
        Ok(self.heads(q.core.id)?.len)
    }

    /// The timers of `q` in key group `kg`, in order (Flink's `getSubsetForKeyGroup`).
    pub fn timers_in_key_group<N: TypeSerializer>(
        &mut self,
        q: &TimerQueue<N>,
        kg: KeyGroup,
    ) -> Result<Vec<Timer<K::Value, N::Value>>> {
        let (p, n) = self.kg_bytes(kg);
        let mut raw = Vec::new();
        self.backend
            .map_scan(q.core.id, kg, &p[..n], &mut |uk, _| {
                raw.push(uk.to_vec());
                true
            })?;
        raw.iter().map(|el| self.decode_timer(q, el)).collect()
    }

    /// Every timer of `q`, key group by key group (Flink's iterator: no global order).
    pub fn all_timers<N: TypeSerializer>(
        &mut self,
        q: &TimerQueue<N>,
    ) -> Result<Vec<Timer<K::Value, N::Value>>> {
        let mut out = Vec::new();
        for kg in self.backend.config().key_group_range.iter() {
            out.extend(self.timers_in_key_group(q, kg)?);
        }
        Ok(out)
    }

    /// Registers an event-time timer at `timestamp` for the current key in `ns` (a timer registered twice
    /// fires once).
    pub fn register_event_time_timer<N: TypeSerializer>(
        &mut self,
        svc: &TimerService<N>,
        ns: &N::Value,
        timestamp: i64,
    ) -> Result<()> {
        self.add_timer(&svc.event, timestamp, ns).map(|_| ())
    }

    /// Deletes the current key's event-time timer at `timestamp` in `ns` (nothing if there is none).
    pub fn delete_event_time_timer<N: TypeSerializer>(
        &mut self,
        svc: &TimerService<N>,
        ns: &N::Value,
        timestamp: i64,
    ) -> Result<()> {
        self.remove_timer(&svc.event, timestamp, ns).map(|_| ())
    }

    /// Registers a processing-time timer at `timestamp` for the current key in `ns`.
    pub fn register_processing_time_timer<N: TypeSerializer>(
        &mut self,
        svc: &TimerService<N>,
        ns: &N::Value,
        timestamp: i64,
    ) -> Result<()> {
        self.add_timer(&svc.processing, timestamp, ns).map(|_| ())
    }

    /// Deletes the current key's processing-time timer at `timestamp` in `ns`.
    pub fn delete_processing_time_timer<N: TypeSerializer>(
        &mut self,
        svc: &TimerService<N>,
        ns: &N::Value,
        timestamp: i64,
    ) -> Result<()> {
        self.remove_timer(&svc.processing, timestamp, ns)
            .map(|_| ())
    }

    /// The watermark `svc` was last advanced to (`i64::MIN` before the first advance).
    pub fn current_watermark<N: TypeSerializer>(&self, svc: &TimerService<N>) -> i64 {
        self.queue_time(&svc.event)
    }

    /// The processing time `svc` was last advanced to (`i64::MIN` before the first advance).
    pub fn current_processing_time<N: TypeSerializer>(&self, svc: &TimerService<N>) -> i64 {
        self.queue_time(&svc.processing)
    }

    fn queue_time<N: TypeSerializer>(&self, q: &TimerQueue<N>) -> i64 {
        self.timer_heads
            .get(&q.core.id)
            .and_then(|h| h.time)
            .unwrap_or(i64::MIN)
    }

    /// Advances event time to `watermark` and fires every event-time timer at or before it, in timestamp
    /// order, with its key as the current key: `on_timer(store, timer)` may read and change state and
    /// register new timers (one due at or before `watermark` fires in this call too). Returns how many fired.
    pub fn advance_watermark<N: TypeSerializer>(
        &mut self,
        svc: &TimerService<N>,
        watermark: i64,
        on_timer: impl FnMut(&mut Self, Timer<K::Value, N::Value>) -> Result<()>,
    ) -> Result<u64> {
        self.advance(&svc.event, watermark, on_timer)
    }

    /// Advances processing time to `time` and fires every processing-time timer at or before it (as
    /// [`advance_watermark`](Self::advance_watermark) does for event time).
    pub fn advance_processing_time<N: TypeSerializer>(
        &mut self,
        svc: &TimerService<N>,
        time: i64,
        on_timer: impl FnMut(&mut Self, Timer<K::Value, N::Value>) -> Result<()>,
    ) -> Result<u64> {
        self.advance(&svc.processing, time, on_timer)
    }

    fn advance<N: TypeSerializer>(
        &mut self,
        q: &TimerQueue<N>,
        time: i64,
        mut on_timer: impl FnMut(&mut Self, Timer<K::Value, N::Value>) -> Result<()>,
    ) -> Result<u64> {
        self.heads(q.core.id)?.time = Some(time);
        let mut fired = 0u64;
        loop {
            let due = match self.heads(q.core.id)?.first() {
                Some((el, _)) => {
                    let ts = el
                        .first_chunk::<8>()
                        .map(|b| (u64::from_be_bytes(*b) as i64) ^ i64::MIN);
                    ts.is_some_and(|ts| ts <= time)
                }
                None => false,
            };
            if !due {
                return Ok(fired);
            }
            let Some((kg, timer)) = self.poll_raw(q)? else {
                return Ok(fired);
            };
            let mut key = Vec::new();
            self.key_serializer
                .serialize(&timer.key, &mut key)
                .map_err(|e| Error::serializer("<key>", e))?;
            self.set_current_key_bytes(kg, &key)?;
            fired += 1;
            on_timer(self, timer)?;
        }
    }
}
