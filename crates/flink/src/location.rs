//! Opening the bytes a [`StreamHandle`] points to: inline bytes, files relative to the directory of
//! `_metadata`, and absolute paths or URIs, which are re-rooted under that directory.

use std::path::{Component, Path, PathBuf};

use super::metadata::StreamHandle;
use super::FlinkError;

/// The path part of a `file:` URI or a plain path; `None` for other schemes' paths.
fn uri_path(uri: &str) -> (Option<&str>, &str) {
    if let Some(rest) = uri.strip_prefix("file:") {
        let rest = rest.trim_start_matches("//");
        let rest = if rest.starts_with('/') {
            rest
        } else {
            uri.trim_start_matches("file:")
        };
        return (Some("file"), rest);
    }
    if let Some(i) = uri.find("://") {
        let after = &uri[i + 3..];
        let path = after.find('/').map(|j| &after[j..]).unwrap_or("");
        return (Some(&uri[..i]), path);
    }
    (None, uri)
}

/// Where the file of an absolute path or URI lies now: the longest tail of its path that exists below the
/// directory of `_metadata` or one of its two parents (so a copied checkpoint directory with its `shared/`
/// beside it is found), else the original path if it is a local file.
pub fn reroot(uri: &str, base: &Path) -> Result<PathBuf, FlinkError> {
    let (scheme, path) = uri_path(uri);
    let parts: Vec<&str> = path
        .split('/')
        .filter(|s| !s.is_empty() && *s != ".")
        .collect();
    if parts.contains(&"..") {
        return Err(FlinkError::UnsupportedLocation {
            uri: uri.to_string(),
            detail: "path contains '..'".into(),
        });
    }
    let mut bases = vec![base.to_path_buf()];
    if let Some(p) = base.parent() {
        bases.push(p.to_path_buf());
        if let Some(pp) = p.parent() {
            bases.push(pp.to_path_buf());
        }
    }
    for start in 0..parts.len() {
        let tail: PathBuf = parts[start..].iter().collect();
        for b in &bases {
            let candidate = b.join(&tail);
            if candidate.is_file() {
                return Ok(candidate);
            }
        }
    }
    if matches!(scheme, None | Some("file")) && Path::new(path).is_file() {
        return Ok(PathBuf::from(path));
    }
    Err(FlinkError::UnsupportedLocation {
        uri: uri.to_string(),
        detail: format!(
            "no such file, and no tail of its path exists below {}",
            base.display()
        ),
    })
}

/// `path` below `base`; it must be a plain relative path (no `..`, not absolute).
pub(crate) fn relative(path: &str, base: &Path) -> Result<PathBuf, FlinkError> {
    let p = Path::new(path);
    if p.components().any(|c| !matches!(c, Component::Normal(_))) {
        return Err(FlinkError::UnsupportedLocation {
            uri: path.to_string(),
            detail: "a relative state file must lie inside the savepoint directory".into(),
        });
    }
    Ok(base.join(p))
}

fn read(path: &Path) -> Result<Vec<u8>, FlinkError> {
    std::fs::read(path).map_err(|e| FlinkError::io(path.display(), e))
}

/// A short name of the handle's bytes for messages (file name, or `inline:<name>`).
pub fn display_name(h: &StreamHandle) -> String {
    match h {
        StreamHandle::ByteStream { name, .. } => {
            format!("inline:{}", name.rsplit('/').next().unwrap_or(name))
        }
        StreamHandle::File { path, .. }
        | StreamHandle::Relative { path, .. }
        | StreamHandle::Segment { path, .. } => path.rsplit('/').next().unwrap_or(path).to_string(),
        StreamHandle::KeyGroups { inner, .. } => display_name(inner),
    }
}

/// The bytes of a stream handle, read into memory (files are read, never mapped: a file changed under the
/// reader gives an error, never a signal).
pub enum StreamBytes {
    /// Bytes held in memory (inline handles, segments, whole files).
    Owned(Vec<u8>),
}

impl std::ops::Deref for StreamBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            StreamBytes::Owned(v) => v,
        }
    }
}

impl std::fmt::Debug for StreamBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StreamBytes::Owned(v) => write!(f, "Owned({} bytes)", v.len()),
        }
    }
}

fn map(p: &Path) -> Result<StreamBytes, FlinkError> {
    // Read, not mapped: a file truncated or replaced while it is read gives the bytes read (which the
    // decoders check) or an error, never a signal that kills the process.
    Ok(StreamBytes::Owned(read(p)?))
}

/// The bytes of `h` with whole files read (relative and absolute file handles); `base` is the
/// directory of `_metadata`.
pub fn map_stream(h: &StreamHandle, base: &Path) -> Result<StreamBytes, FlinkError> {
    match h {
        StreamHandle::Relative { path, .. } => map(&relative(path, base)?),
        StreamHandle::File { path, .. } => map(&reroot(path, base)?),
        StreamHandle::KeyGroups { inner, .. } => map_stream(inner, base),
        _ => open_stream(h, base).map(StreamBytes::Owned),
    }
}

/// The bytes of `h`; `base` is the directory of `_metadata`.
pub fn open_stream(h: &StreamHandle, base: &Path) -> Result<Vec<u8>, FlinkError> {
    match h {
        StreamHandle::ByteStream { data, .. } => Ok(data.clone()),
        StreamHandle::Relative { path, .. } => read(&relative(path, base)?),
        StreamHandle::File { path, .. } => read(&reroot(path, base)?),
        StreamHandle::Segment { path, start, size } => {
            let p = if path.contains(':') || path.starts_with('/') {
                reroot(path, base)?
            } else {
                relative(path, base)?
            };
            let all = read(&p)?;
            let (s, n) = (*start, *size);
            if s < 0 || n < 0 || (s as u64).saturating_add(n as u64) > all.len() as u64 {
                return Err(FlinkError::UnsupportedLocation {
                    uri: path.clone(),
                    detail: format!("segment {s}+{n} outside the file of {} bytes", all.len()),
                });
            }
            Ok(all[s as usize..(s + n) as usize].to_vec())
        }
        StreamHandle::KeyGroups { inner, .. } => open_stream(inner, base),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uri_paths() {
        assert_eq!(uri_path("file:/tmp/x").1, "/tmp/x");
        assert_eq!(uri_path("file:///tmp/x").1, "/tmp/x");
        assert_eq!(uri_path("s3://bucket/a/b").1, "/a/b");
        assert_eq!(uri_path("/a/b"), (None, "/a/b"));
    }

    #[test]
    fn relative_paths_stay_inside() {
        let base = Path::new("/sp");
        assert!(relative("../x", base).is_err());
        assert!(relative("/etc/passwd", base).is_err());
        assert_eq!(relative("abc", base).unwrap(), PathBuf::from("/sp/abc"));
    }
}
