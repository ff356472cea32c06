//! keyed-state-timely's tests: every query against its single-threaded reference at several cluster
//! shapes, and kills with restarts at other parallelisms (local and S3 roots).

mod common;
mod kill_restart;
mod queries;
mod reference;
