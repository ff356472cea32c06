//! Reliability campaigns across the layers: bit flips in every file kind, I/O errors, kill -9, the fuzz
//! corpus replayed.

mod bitflips;
mod fuzz_corpus;
mod io_errors;
mod kill9_campaign;
