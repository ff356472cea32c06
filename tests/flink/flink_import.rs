//! Reading Flink 2.3.0's own savepoints and checkpoints (tests/fixtures/flink): `_metadata` as Flink reads
//! it (each fixture's DUMP.txt), canonical keyed-state streams imported entry for entry, restores of the
//! import on the heap and LSM backends giving the same savepoint bytes, and damaged files giving errors.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use keyed_state::backend::heap::HeapBackend;
use keyed_state::backend::lsm::LsmBackend;
use keyed_state::backend::{BackendConfig, BackendSnapshot, StateBackend};
use keyed_state::savepoint::{encode, SavepointReader, WriteOptions};
use keyed_state::serializer::LongSerializer;
use keyed_state::state::KeyedStateStore;
use keyed_state_flink::keyed_stream::read_key_group;
use keyed_state_flink::metadata::{KeyGroupsHandleKind, StreamHandle};
use keyed_state_flink::proxy::read_proxy;
use keyed_state_flink::{parse_metadata, FlinkError, FlinkSavepoint, KeyedHandle};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/flink");

const CANONICAL: &[&str] = &[
    "hashmap-canonical-savepoint",
    "hashmap-canonical-savepoint-inline",
    "rocksdb-canonical-savepoint",
];

/// Every `_metadata` with the part of DUMP.txt that describes it.
fn metadata_fixtures() -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    for f in [
        "hashmap-canonical-savepoint",
        "hashmap-canonical-savepoint-inline",
        "hashmap-native-savepoint",
        "rocksdb-canonical-savepoint",
        "rocksdb-native-savepoint",
    ] {
        let dump = std::fs::read_to_string(format!("{FIXTURES}/{f}/DUMP.txt")).unwrap();
        out.push((PathBuf::from(format!("{FIXTURES}/{f}")), dump));
    }
    let dump = std::fs::read_to_string(format!(
        "{FIXTURES}/rocksdb-incremental-checkpoint/DUMP.txt"
    ))
    .unwrap();
    let (chk2, chk3) = dump.split_at(dump.find("chk-3/_metadata").unwrap());
    for (chk, d) in [("chk-2", chk2), ("chk-3", chk3)] {
        out.push((
            PathBuf::from(format!("{FIXTURES}/rocksdb-incremental-checkpoint/{chk}")),
            d.to_string(),
        ));
    }
    out
}

#[test]
fn every_fixture_metadata_reads_as_flink_reads_it() {
    for (dir, dump) in metadata_fixtures() {
        let sp = FlinkSavepoint::open(&dir).unwrap();
        let m = &sp.metadata;
        assert_eq!(m.version, 6, "{}", dir.display());
        let mut want_ops: Vec<String> = dump
            .lines()
            .filter(|l| l.starts_with("operator "))
            .map(|l| l.split(" coordinatorState").next().unwrap().to_string())
            .collect();
        let mut got_ops: Vec<String> = m
            .operators
            .iter()
            .map(|o| {
                format!(
                    "operator {} uid={} name={} parallelism={} maxParallelism={}",
                    o.id,
                    o.uid.as_deref().unwrap_or(""),
                    o.name.as_deref().unwrap_or(""),
                    o.parallelism,
                    o.max_parallelism
                )
            })
            .collect();
        want_ops.sort();
        got_ops.sort();
        assert_eq!(got_ops, want_ops, "{}", dir.display());

        // Handle types and key-group ranges, in subtask order, as Flink printed them.
        let want_handles: Vec<String> = dump
            .lines()
            .filter_map(|l| l.trim().strip_prefix("managedKeyed "))
            .filter(|l| !l.starts_with(|c: char| c.is_ascii_digit()))
            .map(|l| {
                let ty = l.split(' ').next().unwrap();
                let kg = l
                    .split("keyGroups=")
                    .nth(1)
                    .unwrap()
                    .split('}')
                    .next()
                    .unwrap();
                format!("{ty} {kg}}}")
            })
            .collect();
        let op = sp.operator("state-op").unwrap();
        let got_handles: Vec<String> = op
            .subtasks
            .iter()
            .filter_map(|s| s.managed_keyed.as_ref())
            .map(|h| {
                let r = h.range();
                format!(
                    "{} KeyGroupRange{{startKeyGroup={}, endKeyGroup={}}}",
                    h.type_name(),
                    r.start(),
                    r.end()
                )
            })
            .collect();
        assert_eq!(got_handles, want_handles, "{}", dir.display());

        // Key-group offsets, where Flink printed them.
        let want_offsets: Vec<String> = dump
            .lines()
            .filter_map(|l| l.split("= empty in canonical format): ").nth(1))
            .map(str::to_string)
            .collect();
        let got_offsets: Vec<String> = op
            .subtasks
            .iter()
            .filter_map(|s| match &s.managed_keyed {
                Some(KeyedHandle::KeyGroups { range, offsets, .. }) => Some(
                    offsets
                        .iter()
                        .enumerate()
                        .map(|(i, o)| format!("{}@{o}", range.start() as usize + i))
                        .collect::<Vec<_>>()
                        .join(" "),
                ),
                _ => None,
            })
            .collect();
        assert_eq!(got_offsets, want_offsets, "{}", dir.display());
    }
}

#[test]
fn handle_kinds_and_locations_of_the_fixtures() {
    let sp = FlinkSavepoint::open(Path::new(&format!(
        "{FIXTURES}/hashmap-canonical-savepoint-inline"
    )))
    .unwrap();
    let op = sp.operator("14725b7741e1a536207c2c73a13e02c9").unwrap();
    for st in &op.subtasks {
        match &st.managed_keyed {
            Some(KeyedHandle::KeyGroups {
                kind: KeyGroupsHandleKind::Savepoint,
                stream: StreamHandle::ByteStream { data, .. },
                ..
            }) => assert!(data.len() > 14_000),
            other => panic!("{other:?}"),
        }
    }
    // A checkpoint's shared files are absolute URIs of the machine that wrote them; they re-root under
    // the copied directory.
    let dir = PathBuf::from(format!("{FIXTURES}/rocksdb-incremental-checkpoint/chk-3"));
    let sp = FlinkSavepoint::open(&dir).unwrap();
    let op = sp.operator("state-op").unwrap();
    let mut shared = 0;
    for st in &op.subtasks {
        let Some(KeyedHandle::Incremental {
            shared: files,
            meta,
            ..
        }) = &st.managed_keyed
        else {
            panic!("not incremental");
        };
        assert!(matches!(meta, StreamHandle::Relative { .. }));
        for (name, h) in files {
            let StreamHandle::File { path, size } = h else {
                panic!("{name}: {h:?}")
            };
            assert!(path.starts_with("file:/tmp/"), "{path}");
            let bytes = keyed_state_flink::location::open_stream(h, sp.dir()).unwrap();
            assert_eq!(bytes.len() as i64, *size, "{name}");
            shared += 1;
        }
    }
    assert!(shared > 0);
}

/// (state name, key hex) → value hex of DUMP.txt.
fn flink_entries(fixture: &str) -> BTreeMap<(String, String), String> {
    let text = std::fs::read_to_string(format!("{FIXTURES}/{fixture}/DUMP.txt")).unwrap();
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.trim().strip_prefix('[') else {
            continue;
        };
        let Some((head, kv)) = rest.split_once("] key=") else {
            continue;
        };
        let name = head.split_once(' ').unwrap().1.to_string();
        let (key, value) = kv.split_once(" value=").unwrap_or((kv, ""));
        assert!(out
            .insert((name, key.to_string()), value.to_string())
            .is_none());
    }
    out
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn import_bytes(fixture: &str) -> (Vec<u8>, keyed_state_flink::FlinkImport) {
    let sp = FlinkSavepoint::open(Path::new(&format!("{FIXTURES}/{fixture}"))).unwrap();
    let import = sp.import(sp.operator("state-op").unwrap()).unwrap();
    let mut out = Vec::new();
    encode(&import, &WriteOptions::default(), &mut out).unwrap();
    (out, import)
}

#[test]
fn canonical_fixtures_import_every_entry_byte_for_byte() {
    for fixture in CANONICAL {
        let (bytes, import) = import_bytes(fixture);
        assert!(import.warnings().is_empty(), "{:?}", import.warnings());
        let reader = SavepointReader::from_bytes(bytes).unwrap();
        let h = reader.header();
        assert_eq!(h.max_parallelism, 128);
        assert_eq!(
            (h.key_group_range.start(), h.key_group_range.end()),
            (0, 127)
        );
        let mut got = BTreeMap::new();
        for b in reader.key_groups() {
            reader
                .read_key_group(b.key_group, &mut |s, k, v| {
                    let name = h.states[s].name.clone();
                    assert!(got.insert((name, hex(k)), hex(v)).is_none());
                    Ok(())
                })
                .unwrap();
        }
        let want = flink_entries(fixture);
        assert_eq!(got.len(), 752, "{fixture}");
        assert_eq!(got, want, "{fixture}");
        reader.verify().unwrap();
    }
}

#[test]
fn restoring_the_import_on_every_backend_gives_the_same_savepoint_bytes() {
    for fixture in ["hashmap-canonical-savepoint", "rocksdb-canonical-savepoint"] {
        let (bytes, import) = import_bytes(fixture);
        let config: BackendConfig = import.config().clone();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("import.sp");
        std::fs::write(&path, &bytes).unwrap();
        #[allow(unused_mut)]
        let mut backends: Vec<Box<dyn StateBackend>> = vec![
            Box::new(HeapBackend::new(config.clone()).unwrap()),
            Box::new(LsmBackend::temp(config.clone()).unwrap()),
        ];
        #[cfg(feature = "rocksdb")]
        backends.push(Box::new(
            keyed_state::backend::rocksdb::RocksDbBackend::temporary(
                config.clone(),
                Default::default(),
            )
            .unwrap(),
        ));
        for backend in backends {
            let name = backend.backend_name();
            let mut store = KeyedStateStore::new(backend, LongSerializer).unwrap();
            store
                .restore(&[SavepointReader::open(&path).unwrap()])
                .unwrap();
            let snap = store.snapshot().unwrap();
            let mut again = Vec::new();
            encode(&*snap, &WriteOptions::default(), &mut again).unwrap();
            assert!(again == bytes, "{fixture} restored on {name} differs");
        }
    }
}

#[test]
fn two_imports_of_one_savepoint_are_byte_identical() {
    for fixture in CANONICAL {
        assert_eq!(
            import_bytes(fixture).0,
            import_bytes(fixture).0,
            "{fixture}"
        );
    }
}

#[test]
fn missing_operator_and_operators_without_keyed_state_are_named_errors() {
    let sp = FlinkSavepoint::open(Path::new(&format!(
        "{FIXTURES}/rocksdb-canonical-savepoint"
    )))
    .unwrap();
    let e = sp.operator("no-such-op").unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, FlinkError::OperatorNotFound { .. }));
    for want in [
        "state-op",
        "sink",
        "source",
        "14725b7741e1a536207c2c73a13e02c9",
    ] {
        assert!(msg.contains(want), "{msg}");
    }
    let e = sp.import(sp.operator("sink").unwrap()).unwrap_err();
    assert!(matches!(e, FlinkError::NoKeyedState { .. }), "{e}");
}

#[test]
fn truncated_and_flipped_metadata_gives_errors_never_panics() {
    for (dir, _) in metadata_fixtures() {
        let bytes = std::fs::read(dir.join("_metadata")).unwrap();
        for cut in 0..bytes.len() {
            let _ = parse_metadata(&bytes[..cut], "_metadata");
        }
        // The operator states end before the Java-serialized properties trailer: a cut inside them fails.
        parse_metadata(&bytes, "_metadata").unwrap();
        assert!(parse_metadata(&bytes[..bytes.len() / 2], "_metadata").is_err());
        let mut flipped = bytes.clone();
        for i in 0..bytes.len() {
            for bit in [0x01u8, 0x80] {
                flipped[i] ^= bit;
                // A flip the format cannot see (inside a name, an offset, the trailer) still parses; one in
                // the magic number or the version never does.
                let r = parse_metadata(&flipped, "_metadata");
                assert!(i >= 8 || r.is_err(), "flip at {i}");
                flipped[i] ^= bit;
            }
        }
    }
}

/// Reads a canonical stream as the importer does: the proxy, then every key group.
fn read_stream(data: &[u8], offsets: &[i64], start: u16) -> Result<u64, FlinkError> {
    let header_end = offsets
        .iter()
        .filter(|o| **o != 0)
        .min()
        .map(|o| *o as usize);
    let proxy = read_proxy(data, "f", header_end)?;
    let mut n = 0;
    for (i, off) in offsets.iter().enumerate() {
        if *off == 0 {
            continue;
        }
        let st = read_key_group(
            data,
            *off as usize,
            start + i as u16,
            128,
            proxy.compressed,
            proxy.states.len(),
            "f",
            &mut |_, _, _| Ok(()),
        )?;
        n += st.entries;
    }
    Ok(n)
}

#[test]
fn truncated_and_flipped_keyed_files_give_errors_never_panics() {
    for fixture in CANONICAL {
        let sp = FlinkSavepoint::open(Path::new(&format!("{FIXTURES}/{fixture}"))).unwrap();
        let op = sp.operator("state-op").unwrap();
        for st in &op.subtasks {
            let Some(KeyedHandle::KeyGroups {
                range,
                offsets,
                stream,
                ..
            }) = &st.managed_keyed
            else {
                panic!()
            };
            let data = keyed_state_flink::location::open_stream(stream, sp.dir()).unwrap();
            assert_eq!(read_stream(&data, offsets, range.start()).unwrap(), 376);
            // Every cut of the stream loses at least the last key group's end mark (every 5th cut, and
            // every cut of the header and of the last key group).
            let last = *offsets.iter().max().unwrap() as usize;
            let cuts = (0..data.len()).filter(|c| c % 5 == 0 || *c < 2600 || *c >= last);
            for cut in cuts {
                assert!(
                    read_stream(&data[..cut], offsets, range.start()).is_err(),
                    "{fixture} cut {cut}"
                );
            }
            let mut flipped = data.clone();
            for i in (0..data.len()).step_by(3) {
                flipped[i] ^= 0x80;
                let _ = read_stream(&flipped, offsets, range.start());
                flipped[i] ^= 0x80;
            }
        }
    }
}

/// The fixtures' streams are uncompressed; this re-frames each key group of one as Flink does with
/// `execution.checkpointing.snapshot-compression` (one Snappy framed stream per key group, the proxy's
/// compression flag set) and reads the same entries back.
#[test]
fn snappy_framed_key_groups_read_the_same_entries() {
    use keyed_state_flink::keyed_stream::write_key_group;
    use keyed_state_flink::snappy::FramedWriter;
    let sp = FlinkSavepoint::open(Path::new(&format!(
        "{FIXTURES}/rocksdb-canonical-savepoint"
    )))
    .unwrap();
    let op = sp.operator("state-op").unwrap();
    for st in &op.subtasks {
        let Some(KeyedHandle::KeyGroups {
            range,
            offsets,
            stream,
            ..
        }) = &st.managed_keyed
        else {
            panic!()
        };
        let data = keyed_state_flink::location::open_stream(stream, sp.dir()).unwrap();
        let header_end = offsets.iter().filter(|o| **o != 0).min().copied().unwrap() as usize;
        let proxy = read_proxy(&data, "f", Some(header_end)).unwrap();
        let mut out = data[..header_end].to_vec();
        out[4] = 1; // usingKeyGroupCompression
        let mut new_offsets = vec![0i64; offsets.len()];
        let mut plain = Vec::new();
        let mut w = FramedWriter::new();
        for (i, off) in offsets.iter().enumerate() {
            if *off == 0 {
                continue;
            }
            let kg = range.start() + i as u16;
            let mut entries = Vec::new();
            read_key_group(
                &data,
                *off as usize,
                kg,
                128,
                false,
                proxy.states.len(),
                "f",
                &mut |s, k, v| {
                    entries.push((s as u16, k.to_vec(), v.to_vec()));
                    Ok(())
                },
            )
            .unwrap();
            new_offsets[i] = out.len() as i64;
            write_key_group(
                entries.iter().map(|(s, k, v)| (*s, &k[..], &v[..])),
                Some(&mut w),
                &mut out,
            );
            plain.push((kg, entries));
        }
        assert!(read_proxy(&out, "f", Some(header_end)).unwrap().compressed);
        for (kg, entries) in plain {
            let i = (kg - range.start()) as usize;
            let mut got = Vec::new();
            read_key_group(
                &out,
                new_offsets[i] as usize,
                kg,
                128,
                true,
                proxy.states.len(),
                "f",
                &mut |s, k, v| {
                    got.push((s as u16, k.to_vec(), v.to_vec()));
                    Ok(())
                },
            )
            .unwrap();
            assert_eq!(got, entries, "key group {kg}");
        }
        assert_eq!(read_stream(&out, &new_offsets, range.start()).unwrap(), 376);
        for cut in (header_end..out.len()).step_by(7) {
            assert!(read_stream(&out[..cut], &new_offsets, range.start()).is_err());
        }
    }
}

#[test]
fn hashmap_native_savepoint_imports_the_canonical_entries() {
    let (bytes, _) = import_bytes("hashmap-native-savepoint");
    let reader = SavepointReader::from_bytes(bytes).unwrap();
    let h = reader.header();
    let mut got = BTreeMap::new();
    for b in reader.key_groups() {
        reader
            .read_key_group(b.key_group, &mut |s, k, v| {
                got.insert((h.states[s].name.clone(), hex(k)), hex(v));
                Ok(())
            })
            .unwrap();
    }
    // The same logical state as the canonical savepoint; TTL timestamps are those of another run.
    let mut want = flink_entries("hashmap-canonical-savepoint");
    assert_eq!(got.len(), 752);
    for ((state, key), v) in got.iter_mut().chain(want.iter_mut()) {
        if state == "ttl-value" {
            v.replace_range(..16, "");
        }
        let _ = key;
    }
    assert_eq!(got, want);
    // Cuts and flips of the native files give errors or an import, never a panic.
    let sp =
        FlinkSavepoint::open(Path::new(&format!("{FIXTURES}/hashmap-native-savepoint"))).unwrap();
    let op = sp.operator("state-op").unwrap();
    let Some(KeyedHandle::KeyGroups {
        range,
        offsets,
        stream,
        ..
    }) = &op.subtasks[0].managed_keyed
    else {
        panic!()
    };
    let data = keyed_state_flink::location::open_stream(stream, sp.dir()).unwrap();
    let proxy = read_proxy(&data, "f", Some(offsets[0] as usize)).unwrap();
    let metas: Vec<_> = proxy
        .states
        .iter()
        .map(|s| s.to_meta("f").unwrap())
        .collect();
    let mut flipped = data.clone();
    for i in (offsets[0] as usize..data.len()).step_by(3) {
        flipped[i] ^= 0x41;
        for (j, off) in offsets.iter().enumerate() {
            let _ = keyed_state_flink::heap_native::read_native_key_group(
                &flipped[..flipped.len() - (i % 5)],
                *off as usize,
                range.start() + j as u16,
                128,
                &proxy.key_serializer.snapshot,
                &metas,
                "f",
                &mut |_, _, _| Ok(()),
            );
        }
        flipped[i] ^= 0x41;
    }
}

/// No Flink-written compressed HashMap native snapshot exists yet; this re-frames the fixture's as Flink
/// writes one with `execution.checkpointing.snapshot-compression` (the key group id plain, then Snappy
/// framed streams: Flink starts one per state, here the split points vary, which the reader must not care
/// about) and reads the same entries back; cuts and flips give errors.
#[test]
fn snappy_compressed_hashmap_native_key_groups_read_the_same_entries() {
    use keyed_state_flink::import::KeyedFile;
    use keyed_state_flink::location::StreamBytes;
    use keyed_state_flink::snappy::FramedWriter;
    let sp =
        FlinkSavepoint::open(Path::new(&format!("{FIXTURES}/hashmap-native-savepoint"))).unwrap();
    let op = sp.operator("state-op").unwrap();
    for st in &op.subtasks {
        let h = st.managed_keyed.as_ref().unwrap();
        let mut file = KeyedFile::open(&sp, "state-op", st.index, h, 128).unwrap();
        let read_all = |f: &KeyedFile| -> Result<Vec<(usize, Vec<u8>, Vec<u8>)>, FlinkError> {
            let mut out = Vec::new();
            for j in 0..f.offsets.len() {
                f.read_key_group(f.range.start() + j as u16, 128, &mut |s, k, v| {
                    out.push((s, k.to_vec(), v.to_vec()));
                    Ok(())
                })?;
            }
            Ok(out)
        };
        let want = read_all(&file).unwrap();
        assert_eq!(want.len(), 376);
        let data = file.data.to_vec();
        let header_end = file.offsets[0] as usize;
        let mut out = data[..header_end].to_vec();
        out[4] = 1; // usingKeyGroupCompression
        let mut offsets = Vec::new();
        for (j, off) in file.offsets.iter().enumerate() {
            let off = *off as usize;
            let next = file
                .offsets
                .get(j + 1)
                .map(|o| *o as usize)
                .unwrap_or(data.len());
            offsets.push(out.len() as i64);
            out.extend_from_slice(&data[off..off + 4]);
            let body = &data[off + 4..next];
            // Split the states' bytes into a few framed streams (j decides where).
            let cuts = [
                0,
                (body.len() * (j % 3)) / 4,
                body.len() / 2 + j % 5,
                body.len(),
            ];
            for w in cuts.windows(2) {
                let (a, b) = (w[0].min(body.len()), w[1].min(body.len()));
                if a >= b {
                    continue;
                }
                let mut fw = FramedWriter::new();
                fw.begin(&mut out);
                fw.write(&body[a..b], &mut out);
                fw.flush(&mut out);
            }
        }
        file.data = StreamBytes::Owned(out.clone());
        file.offsets = offsets.clone();
        file.proxy.compressed = true;
        assert_eq!(read_all(&file).unwrap(), want);
        // Cuts of the last key group's streams and flipped bytes: errors, never panics.
        let last = *offsets.last().unwrap() as usize;
        for cut in (last + 5..out.len()).step_by(3) {
            file.data = StreamBytes::Owned(out[..cut].to_vec());
            assert!(read_all(&file).is_err(), "cut {cut}");
        }
        for i in (header_end..out.len()).step_by(5) {
            let mut flipped = out.clone();
            flipped[i] ^= 0x20;
            file.data = StreamBytes::Owned(flipped);
            let _ = read_all(&file);
        }
    }
}
