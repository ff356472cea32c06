//! The `keyed-state` command line: demo, inspect, dump, verify, key-group.

fn main() {}
