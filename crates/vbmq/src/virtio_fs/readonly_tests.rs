use super::*;

/// The names of the methods a trait declares, read from its source.
fn trait_methods(source: &str, header: &str) -> Vec<String> {
    let body = source.split(header).nth(1).unwrap_or_default();
    let body = body.split("\n}\n").next().unwrap_or_default();
    body.lines()
        .filter_map(|line| line.strip_prefix("    fn "))
        .filter_map(|rest| rest.split(['(', '<']).next())
        .map(str::to_string)
        .collect()
}

/// Fails unless the impl after `header` in `source` writes out every method of fuse-backend-rs's
/// `FileSystem` (`id_map_fs.rs`'s test calls it too).
pub(in crate::virtio_fs) fn assert_every_method_written(source: &str, header: &str, what: &str) {
    let trait_source =
        include_str!("../../../../vendor/fuse-backend-rs/src/api/filesystem/sync_io.rs");
    let methods = trait_methods(trait_source, "pub trait FileSystem {");
    assert!(methods.len() > 40, "the trait was not found: {methods:?}");
    let ours = trait_methods(source, header);
    for method in &methods {
        assert!(ours.contains(method), "{what} `{method}`");
    }
}

#[test]
fn every_trait_method_is_decided() {
    assert_every_method_written(
        include_str!("readonly.rs"),
        "for ReadOnlyFs<F> {",
        "ReadOnlyFs does not decide (forward it or refuse it)",
    );
}

#[test]
fn opens_that_could_change_the_file_are_told_apart() {
    let flags = |f: i32| f.cast_unsigned();
    assert!(!opens_for_writing(flags(libc::O_RDONLY)));
    assert!(!opens_for_writing(flags(
        libc::O_RDONLY | libc::O_DIRECTORY
    )));
    assert!(!opens_for_writing(flags(libc::O_RDONLY | libc::O_NOFOLLOW)));
    for writing in [
        libc::O_WRONLY,
        libc::O_RDWR,
        libc::O_ACCMODE,
        libc::O_RDONLY | libc::O_TRUNC,
        libc::O_RDWR | libc::O_TRUNC,
    ] {
        assert!(opens_for_writing(flags(writing)), "{writing:#o}");
    }
}
