//! A minimal writer of the "newc" cpio format the kernel unpacks into its initramfs.
//!
//! The kernel accepts several archives concatenated, later ones adding files, so a test's script
//! is appended to the prebuilt base initramfs without rebuilding it.

/// Appends the newc header of one entry and its name, padded to 4 bytes.
fn header(out: &mut Vec<u8>, ino: u32, mode: u32, size: usize, name: &str) {
    let name_size = name.len() + 1;
    let size = u32::try_from(size).expect("cpio entries are below 4 GiB");
    let fields = [ino, mode, 0, 0, 1, 0, size, 0, 0, 0, 0, name_size as u32, 0];
    out.extend_from_slice(b"070701");
    for field in fields {
        out.extend_from_slice(format!("{field:08x}").as_bytes());
    }
    out.extend_from_slice(name.as_bytes());
    out.push(0);
    pad(out);
}

fn pad(out: &mut Vec<u8>) {
    while !out.len().is_multiple_of(4) {
        out.push(0);
    }
}

/// A newc archive holding regular files `(path without leading '/', mode bits, content)`.
pub fn archive(files: &[(&str, u32, &[u8])]) -> Vec<u8> {
    const REGULAR: u32 = 0o100000;
    let mut out = Vec::new();
    for (ino, (name, mode, data)) in (1..).zip(files) {
        header(&mut out, ino, REGULAR | mode, data.len(), name);
        out.extend_from_slice(data);
        pad(&mut out);
    }
    header(&mut out, 0, 0, 0, "TRAILER!!!");
    out
}

#[cfg(test)]
mod tests {
    use super::archive;

    #[test]
    fn entries_are_aligned_and_terminated() {
        let out = archive(&[("test.sh", 0o755, b"echo hi\n")]);
        assert_eq!(out.len() % 4, 0);
        assert!(out.starts_with(b"070701"));
        // 110-byte header + "test.sh\0" = 118, padded to 120; 8 bytes of data.
        assert_eq!(&out[120..128], b"echo hi\n");
        let trailer = &out[128..];
        assert!(trailer.starts_with(b"070701"));
        assert_eq!(&trailer[110..120], b"TRAILER!!!");
    }
}
