//! The typed state API: descriptors, the keyed state store, and accessors for each state kind.
