//! The part of librados' and librbd's C API the RBD engine calls (`<rados/librados.h>`,
//! `<rbd/librbd.h>` of Ceph 16), loaded with `dlopen` when the first RBD disk is opened: a
//! vbmq that serves no RBD disk neither needs the Ceph libraries installed nor maps them.
//!
//! Each signature below is copied from those headers; the handles are opaque pointers.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::io;
use std::sync::OnceLock;

/// `rados_t`.
pub type Rados = *mut c_void;
/// `rados_ioctx_t`.
pub type IoCtx = *mut c_void;
/// `rbd_image_t`.
pub type Image = *mut c_void;
/// `rbd_completion_t`.
pub type Completion = *mut c_void;
/// `rbd_callback_t`: called on a librbd thread when an operation completes.
pub type Callback = unsafe extern "C" fn(c: Completion, arg: *mut c_void);
/// `rbd_update_callback_t`: called on a librbd thread when the image header changes.
pub type UpdateCallback = unsafe extern "C" fn(arg: *mut c_void);

/// The library file `dlopen` loads; librados comes with it as a dependency.
const LIBRBD: &CStr = c"librbd.so.1";

macro_rules! api {
    ($($name:ident: fn($($arg:ident: $ty:ty),*) $(-> $ret:ty)?;)*) => {
        /// Entry points, resolved once.
        #[allow(missing_docs)]
        pub struct Api {
            $(pub $name: unsafe extern "C" fn($($arg: $ty),*) $(-> $ret)?,)*
        }

        impl Api {
            fn resolve(lib: *mut c_void) -> io::Result<Api> {
                Ok(Api {
                    $($name: {
                        let name = concat!(stringify!($name), "\0");
                        // SAFETY: `lib` is a handle from dlopen and `name` is NUL-terminated.
                        let sym = unsafe { libc::dlsym(lib, name.as_ptr().cast()) };
                        if sym.is_null() {
                            return Err(io::Error::other(format!(
                                "{}: no symbol {}", LIBRBD.to_string_lossy(), stringify!($name)
                            )));
                        }
                        // SAFETY: the symbol is the C function of that name, whose signature
                        // the field's type copies from the Ceph headers.
                        unsafe {
                            std::mem::transmute::<
                                *mut c_void,
                                unsafe extern "C" fn($($ty),*) $(-> $ret)?,
                            >(sym)
                        }
                    },)*
                })
            }
        }
    };
}

api! {
    rados_create2: fn(cluster: *mut Rados, cluster_name: *const c_char, name: *const c_char, flags: u64) -> c_int;
    rados_conf_read_file: fn(cluster: Rados, path: *const c_char) -> c_int;
    rados_conf_get: fn(cluster: Rados, option: *const c_char, buf: *mut c_char, len: usize) -> c_int;
    rados_conf_set: fn(cluster: Rados, option: *const c_char, value: *const c_char) -> c_int;
    rados_connect: fn(cluster: Rados) -> c_int;
    rados_shutdown: fn(cluster: Rados);
    rados_ioctx_create: fn(cluster: Rados, pool: *const c_char, ioctx: *mut IoCtx) -> c_int;
    rados_ioctx_destroy: fn(ioctx: IoCtx);
    rados_ioctx_set_namespace: fn(ioctx: IoCtx, nspace: *const c_char);
    rbd_open: fn(ioctx: IoCtx, name: *const c_char, image: *mut Image, snap: *const c_char) -> c_int;
    rbd_open_read_only: fn(ioctx: IoCtx, name: *const c_char, image: *mut Image, snap: *const c_char) -> c_int;
    rbd_close: fn(image: Image) -> c_int;
    rbd_get_size: fn(image: Image, size: *mut u64) -> c_int;
    rbd_update_watch: fn(image: Image, handle: *mut u64, cb: UpdateCallback, arg: *mut c_void) -> c_int;
    rbd_update_unwatch: fn(image: Image, handle: u64) -> c_int;
    rbd_aio_create_completion: fn(arg: *mut c_void, cb: Callback, c: *mut Completion) -> c_int;
    rbd_aio_get_return_value: fn(c: Completion) -> isize;
    rbd_aio_release: fn(c: Completion);
    rbd_aio_readv: fn(image: Image, iov: *const libc::iovec, iovcnt: c_int, off: u64, c: Completion) -> c_int;
    rbd_aio_writev: fn(image: Image, iov: *const libc::iovec, iovcnt: c_int, off: u64, c: Completion) -> c_int;
    rbd_aio_flush: fn(image: Image, c: Completion) -> c_int;
    rbd_aio_write_zeroes: fn(image: Image, off: u64, len: usize, c: Completion, zero_flags: c_int, op_flags: c_int) -> c_int;
}

/// The Ceph API, loaded on first use. An error says which library or symbol is missing.
pub fn api() -> io::Result<&'static Api> {
    static API: OnceLock<Result<Api, String>> = OnceLock::new();
    API.get_or_init(|| {
        // SAFETY: dlopen with a NUL-terminated name; the handle is never closed, so the
        // resolved functions stay valid for the process's life.
        let lib = unsafe { libc::dlopen(LIBRBD.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if lib.is_null() {
            // SAFETY: dlerror returns a NUL-terminated message or null.
            let why = unsafe { libc::dlerror() };
            let why = if why.is_null() {
                "unknown error".into()
            } else {
                // SAFETY: non-null, NUL-terminated, valid until the next dl* call.
                unsafe { CStr::from_ptr(why) }
                    .to_string_lossy()
                    .into_owned()
            };
            return Err(format!(
                "cannot load {} (Debian package librbd1): {why}",
                LIBRBD.to_string_lossy()
            ));
        }
        Api::resolve(lib).map_err(|e| e.to_string())
    })
    .as_ref()
    .map_err(|e| io::Error::other(e.clone()))
}

/// `-errno` from a Ceph call as an `io::Error`.
pub fn check(ret: c_int) -> io::Result<c_int> {
    if ret < 0 {
        Err(io::Error::from_raw_os_error(-ret))
    } else {
        Ok(ret)
    }
}
