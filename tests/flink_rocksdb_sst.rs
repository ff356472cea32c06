//! The pure-Rust RocksDB SST reader against the SST files Flink 2.3.0's RocksDB backend wrote
//! (tests/fixtures/flink/rocksdb-native-savepoint and rocksdb-incremental-checkpoint): every record as
//! RocksDB's own `sst_dump` printed it (each fixture's SST.txt), and damaged files giving typed errors.

use std::collections::BTreeSet;
use std::path::PathBuf;

use keyed_state::flink::sst::{SstFile, ValueKind};
use keyed_state::flink::FlinkError;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/flink");

/// One SST as `sst_dump` described it: path, column family, entry count, merge operands, records.
struct Dumped {
    path: PathBuf,
    column_family: String,
    entries: u64,
    merge_operands: u64,
    records: Vec<String>,
}

fn sst_dump(fixture: &str) -> Vec<Dumped> {
    let text = std::fs::read_to_string(format!("{FIXTURES}/{fixture}/SST.txt")).unwrap();
    let mut out: Vec<Dumped> = Vec::new();
    let mut seen = BTreeSet::new();
    for line in text.lines() {
        if let Some(head) = line.strip_prefix("=== ") {
            let path = head.rsplit(" = ").next().unwrap();
            out.push(Dumped {
                path: PathBuf::from(format!("{FIXTURES}/{fixture}/{path}")),
                column_family: String::new(),
                entries: 0,
                merge_operands: 0,
                records: Vec::new(),
            });
            continue;
        }
        let d = out.last_mut().unwrap();
        let l = line.trim();
        if let Some(v) = l.strip_prefix("# entries: ") {
            d.entries = v.parse().unwrap();
        } else if let Some(v) = l.strip_prefix("# merge operands: ") {
            d.merge_operands = v.parse().unwrap();
        } else if let Some(v) = l.strip_prefix("column family name: ") {
            d.column_family = v.to_string();
        } else if l.starts_with('\'') {
            d.records.push(l.to_string());
        }
    }
    // A file that an incremental checkpoint reuses is dumped once.
    out.retain(|d| !d.column_family.is_empty() && seen.insert(d.path.clone()));
    out
}

fn all_dumped() -> Vec<Dumped> {
    let mut v = sst_dump("rocksdb-native-savepoint");
    v.extend(sst_dump("rocksdb-incremental-checkpoint"));
    v
}

/// Our reading of an SST in sst_dump's notation.
fn records(data: &[u8], name: &str) -> Result<(SstFile<'static>, Vec<String>), FlinkError> {
    let data: &'static [u8] = Box::leak(data.to_vec().into_boxed_slice());
    let name: &'static str = Box::leak(name.to_string().into_boxed_str());
    let t = SstFile::open(data, name)?;
    let mut out = Vec::new();
    t.for_each_record(&mut |r| {
        let ty = match r.kind {
            ValueKind::Put => 1,
            ValueKind::Delete => 0,
            ValueKind::SingleDelete => 7,
            ValueKind::Merge => 2,
        };
        let line = format!(
            "'{}' seq:{}, type:{ty} => {}",
            hex_upper(r.user_key),
            r.seqno,
            hex_upper(r.value)
        );
        out.push(line.trim_end().to_string());
        Ok(())
    })?;
    t.range_tombstones()?;
    Ok((t, out))
}

fn hex_upper(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02X}")).collect()
}

#[test]
fn every_fixture_sst_reads_as_sst_dump_reads_it() {
    let dumped = all_dumped();
    assert!(dumped.len() >= 40, "{}", dumped.len());
    for d in &dumped {
        let data = std::fs::read(&d.path).unwrap();
        let (t, got) = records(&data, &d.path.display().to_string()).unwrap();
        let p = &t.properties;
        assert_eq!(
            p.column_family_name.as_deref(),
            Some(d.column_family.as_str())
        );
        assert_eq!(p.num_entries, Some(d.entries));
        assert_eq!(p.comparator.as_deref(), Some("leveldb.BytewiseComparator"));
        assert_eq!(
            p.merge_operator.as_deref(),
            Some("StringAppendTESTOperator")
        );
        assert_eq!(p.compression.as_deref(), Some("Snappy"));
        assert_eq!(t.format_version, 5);
        assert_eq!(t.checksum_type, 4, "XXH3");
        assert_eq!(got, d.records, "{}", d.path.display());
        assert_eq!(
            got.iter().filter(|r| r.contains("type:2")).count() as u64,
            d.merge_operands
        );
    }
}

#[test]
fn truncated_fixture_ssts_are_errors() {
    for d in all_dumped() {
        let data = std::fs::read(&d.path).unwrap();
        for cut in 0..data.len() {
            let r = records(&data[..cut], "cut");
            assert!(r.is_err(), "{} cut at {cut} read", d.path.display());
        }
    }
}

#[test]
fn flipped_bytes_of_fixture_ssts_are_errors_or_change_nothing() {
    for d in all_dumped() {
        let data = std::fs::read(&d.path).unwrap();
        let mut copy = data.clone();
        for at in 0..data.len() {
            for mask in [0x01u8, 0x80] {
                copy[at] ^= mask;
                match records(&copy, "flip") {
                    Err(FlinkError::SstCorrupt { .. } | FlinkError::SstUnsupported { .. }) => {}
                    Err(e) => panic!("{} byte {at}: untyped error {e}", d.path.display()),
                    // Padding in the footer is not read, by RocksDB either.
                    Ok((_, got)) => assert_eq!(got, d.records, "{} byte {at}", d.path.display()),
                }
                copy[at] ^= mask;
            }
        }
    }
}
