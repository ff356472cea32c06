//! The heap backend: in-memory tables per state and key group, with cheap consistent snapshots.
