//! [`ReducingAccess`] and [`AggregatingAccess`]: states that fold added values into one.

use super::*;

/// A reducing state at (current key, namespace).
pub struct ReducingAccess<'a, K: KeySerializer, V: TypeSerializer, N: TypeSerializer> {
    pub(super) store: &'a mut KeyedStateStore<K>,
    pub(super) h: &'a ReducingState<V, N>,
    pub(super) kg: KeyGroup,
}

impl<K: KeySerializer, V: TypeSerializer, N: TypeSerializer> ReducingAccess<'_, K, V, N> {
    /// The reduced value, if any was added.
    pub fn get(&mut self) -> Result<Option<V::Value>> {
        let s = &mut *self.store;
        if let Some(ttl) = self.h.core.ttl {
            return s.ttl_read_whole(&self.h.core, ttl, self.kg, &*self.h.serializer);
        }
        match s.backend.get(self.h.core.id, self.kg, &s.key_ns)? {
            Some(bytes) => crate::serializer::from_bytes(&*self.h.serializer, bytes)
                .map(Some)
                .map_err(ser_err(&self.h.core.name)),
            None => Ok(None),
        }
    }

    /// Folds `value` into the state with the reduce function.
    pub fn add(&mut self, value: &V::Value) -> Result<()> {
        if let Some(ttl) = self.h.core.ttl {
            // Flink's `TtlReduceFunction`: an expired accumulator is dropped, not merged.
            let s = &mut *self.store;
            let current = s.ttl_unexpired(&self.h.core, ttl, self.kg, &*self.h.serializer)?;
            let next = match current {
                Some(current) => (self.h.reduce)(&current, value),
                None => value.clone(),
            };
            return s.ttl_write_whole(&self.h.core, self.kg, &*self.h.serializer, &next);
        }
        if self.h.operands {
            // A merge operand: the backend folds it at read and compaction time.
            let s = &mut *self.store;
            s.scratch.clear();
            self.h
                .serializer
                .serialize(value, &mut s.scratch)
                .map_err(ser_err(&self.h.core.name))?;
            return s
                .backend
                .merge_value(self.h.core.id, self.kg, &s.key_ns, &s.scratch);
        }
        let next = match self.get()? {
            Some(current) => (self.h.reduce)(&current, value),
            None => value.clone(),
        };
        let s = &mut *self.store;
        s.scratch.clear();
        self.h
            .serializer
            .serialize(&next, &mut s.scratch)
            .map_err(ser_err(&self.h.core.name))?;
        s.backend
            .put(self.h.core.id, self.kg, &s.key_ns, &s.scratch)
    }

    /// Removes the value.
    pub fn clear(&mut self) -> Result<()> {
        let s = &mut *self.store;
        s.backend.delete(self.h.core.id, self.kg, &s.key_ns)
    }
}

/// An aggregating state at (current key, namespace).
pub struct AggregatingAccess<'a, K, F, A, N>
where
    K: KeySerializer,
    F: AggregateFunction,
    A: TypeSerializer<Value = F::Acc>,
    N: TypeSerializer,
{
    pub(super) store: &'a mut KeyedStateStore<K>,
    pub(super) h: &'a AggregatingState<F, A, N>,
    pub(super) kg: KeyGroup,
}

impl<K, F, A, N> AggregatingAccess<'_, K, F, A, N>
where
    K: KeySerializer,
    F: AggregateFunction,
    A: TypeSerializer<Value = F::Acc>,
    N: TypeSerializer,
{
    fn accumulator(&mut self) -> Result<Option<F::Acc>> {
        let s = &mut *self.store;
        if let Some(ttl) = self.h.core.ttl {
            return s.ttl_read_whole(&self.h.core, ttl, self.kg, &*self.h.accumulator);
        }
        match s.backend.get(self.h.core.id, self.kg, &s.key_ns)? {
            Some(bytes) => crate::serializer::from_bytes(&*self.h.accumulator, bytes)
                .map(Some)
                .map_err(ser_err(&self.h.core.name)),
            None => Ok(None),
        }
    }

    /// The aggregation result, if anything was added.
    pub fn get(&mut self) -> Result<Option<F::Out>> {
        Ok(self.accumulator()?.map(|a| self.h.function.get_result(&a)))
    }

    /// Adds one input to the accumulator.
    pub fn add(&mut self, value: &F::In) -> Result<()> {
        if let Some(ttl) = self.h.core.ttl {
            // Flink's `TtlAggregateFunction.add`: an expired accumulator is replaced by a fresh one.
            let s = &mut *self.store;
            let acc = s
                .ttl_unexpired(&self.h.core, ttl, self.kg, &*self.h.accumulator)?
                .unwrap_or_else(|| self.h.function.create_accumulator());
            let acc = self.h.function.add(value, acc);
            return s.ttl_write_whole(&self.h.core, self.kg, &*self.h.accumulator, &acc);
        }
        let operand = self.h.operands;
        let acc = match operand {
            // A merge operand: the accumulator of this one input, merged at read and compaction time.
            true => self.h.function.create_accumulator(),
            false => match self.accumulator()? {
                Some(a) => a,
                None => self.h.function.create_accumulator(),
            },
        };
        let acc = self.h.function.add(value, acc);
        let s = &mut *self.store;
        s.scratch.clear();
        self.h
            .accumulator
            .serialize(&acc, &mut s.scratch)
            .map_err(ser_err(&self.h.core.name))?;
        if operand {
            return s
                .backend
                .merge_value(self.h.core.id, self.kg, &s.key_ns, &s.scratch);
        }
        s.backend
            .put(self.h.core.id, self.kg, &s.key_ns, &s.scratch)
    }

    /// Removes the accumulator.
    pub fn clear(&mut self) -> Result<()> {
        let s = &mut *self.store;
        s.backend.delete(self.h.core.id, self.kg, &s.key_ns)
    }
}
