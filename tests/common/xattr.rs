//! A host file's extended attributes, as the share tests set and compare them (`l*` calls: a
//! link's own attributes, never its target's).

use std::ffi::CString;
use std::path::Path;

fn c_path(path: &Path) -> CString {
    CString::new(path.as_os_str().as_encoded_bytes()).unwrap()
}

/// Sets xattr `name` of `path` to `value`.
pub fn set_xattr(path: &Path, name: &str, value: &[u8]) -> std::io::Result<()> {
    let (path, name) = (c_path(path), CString::new(name).unwrap());
    let (p, n, v) = (path.as_ptr(), name.as_ptr(), value.as_ptr().cast());
    // SAFETY: NUL-terminated strings and a buffer of the length given.
    if unsafe { libc::lsetxattr(p, n, v, value.len(), 0) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// An xattr's value on the host, `None` when absent.
pub fn get_xattr(path: &Path, name: &str) -> Option<Vec<u8>> {
    let name = CString::new(name).unwrap();
    get_c_xattr(&c_path(path), &name)
}

fn get_c_xattr(path: &CString, name: &CString) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; 4096];
    let (p, n, b) = (path.as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast());
    // SAFETY: NUL-terminated strings and a buffer of the length given.
    let len = unsafe { libc::lgetxattr(p, n, b, buf.len()) };
    let len = usize::try_from(len).ok()?;
    buf.truncate(len);
    Some(buf)
}

/// The names of `path`'s xattrs as `llistxattr` gives them (each ends in NUL).
pub fn xattr_names(path: &Path) -> Vec<u8> {
    let path = c_path(path);
    let mut buf = vec![0u8; 65536];
    // SAFETY: a NUL-terminated string and a buffer of the length given.
    let len = unsafe { libc::llistxattr(path.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    buf.truncate(usize::try_from(len).unwrap_or(0));
    buf
}

/// The names and values of `path`'s xattrs, as one byte string (`name=value` NUL ...).
pub fn xattrs(path: &Path) -> Vec<u8> {
    let c_path = c_path(path);
    let mut out = Vec::new();
    for name in xattr_names(path)
        .split(|&b| b == 0)
        .filter(|n| !n.is_empty())
    {
        let c_name = CString::new(name).unwrap();
        out.extend(name);
        out.push(b'=');
        out.extend(get_c_xattr(&c_path, &c_name).unwrap_or_default());
        out.push(0);
    }
    out
}
