//! The S3-compatible server the object-storage tests run against: `.ci/run` starts moto's server on
//! loopback, creates the bucket and exports `KEYED_STATE_S3_ENDPOINT` (and `KEYED_STATE_S3_BUCKET`, default
//! `keyed-state-test`). Without the endpoint the S3 tests print why they are skipped and pass.

#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use keyed_state::checkpoint::CheckpointStorage;

/// The endpoint, or `None` (with a printed line saying the test is skipped).
pub fn endpoint(test: &str) -> Option<String> {
    match std::env::var("KEYED_STATE_S3_ENDPOINT") {
        Ok(e) if !e.is_empty() => Some(e),
        _ => {
            println!(
                "skipped {test}: KEYED_STATE_S3_ENDPOINT is not set (.ci/run starts an S3 server and sets it)"
            );
            None
        }
    }
}

/// The bucket the tests write into.
pub fn bucket() -> String {
    std::env::var("KEYED_STATE_S3_BUCKET").unwrap_or_else(|_| "keyed-state-test".to_string())
}

/// Settings for an S3 store at `endpoint` (dummy credentials, plain HTTP).
pub fn settings(endpoint: &str) -> Vec<(&'static str, String)> {
    vec![
        ("aws_endpoint", endpoint.to_string()),
        ("aws_allow_http", "true".to_string()),
        ("aws_access_key_id", "keyed-state-test".to_string()),
        ("aws_secret_access_key", "keyed-state-test".to_string()),
        ("aws_region", "us-east-1".to_string()),
    ]
}

/// A fresh root `s3://BUCKET/<test>-<unique>` on the test server, or `None` when there is none.
pub fn storage(test: &str) -> Option<Arc<CheckpointStorage>> {
    let ep = endpoint(test)?;
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let root = format!(
        "s3://{}/{test}-{}-{nanos}-{}",
        bucket(),
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    let s = settings(&ep);
    let s: Vec<(&str, &str)> = s.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Some(Arc::new(CheckpointStorage::open_with(&root, &s).unwrap()))
}
