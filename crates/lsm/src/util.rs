//! Small helpers the engine uses and keyed-state shares with it: none is about the LSM tree itself, and each
//! has this one public home.

pub use crate::fsutil::sync_dir;
pub use crate::io::copy_file_on;
pub use crate::prefetch::prefetch_read;

/// The message of a panic payload (`panic!` with a literal or a formatted string), empty otherwise: for
/// reporting a thread that panicked as an error.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::panic_message;

    #[test]
    fn a_panic_message_is_the_literal_or_the_formatted_string() {
        let literal = std::panic::catch_unwind(|| panic!("plain")).unwrap_err();
        assert_eq!(panic_message(&*literal), "plain");
        let n = 7;
        let formatted = std::panic::catch_unwind(|| panic!("n = {n}")).unwrap_err();
        assert_eq!(panic_message(&*formatted), "n = 7");
        let other = std::panic::catch_unwind(|| std::panic::panic_any(42u8)).unwrap_err();
        assert_eq!(panic_message(&*other), "");
    }
}
