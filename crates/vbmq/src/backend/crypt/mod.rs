//! `encrypt=aes-xts,key-file=PATH`: the disk's image holds only AES-256-XTS ciphertext.
//!
//! Every 512-byte sector is encrypted with the tweak of its number (IEEE 1619, as dm-crypt's
//! `aes-xts-plain64`), so a sector's ciphertext depends on where it lies. The 64-byte key
//! (two AES-256 keys) is read once at start from `key-file` (which may be a pipe: the key then
//! never rests on a disk) and lives only in vbmq's memory. Writes are encrypted into a staging
//! buffer (the guest's buffer is never changed); reads are read into one and decrypted into the
//! guest's buffer, on the queue's thread (the `aes` crate: AES-NI, or VAES where the CPU has
//! it; see `xts`).
//!
//! Write-zeroes writes the encryption of zero sectors (never a hole or zeros in the clear, which
//! would show which ranges are zero; `unmap` is ignored), so the range reads back as zeros.
//! Discard is offered but dropped, as dm-crypt does by default: a hole in the image would show
//! which ranges are unused, so a discarded range keeps its old ciphertext (and reads back its old
//! data). `encrypt-discard=on` passes discards down to the image instead: the image then shows
//! which ranges are unused, and a discarded range reads back as noise. Flush passes through.

mod engine;
mod export;
mod key_page;
mod sector;
mod wide;
mod xts;

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::held_files::{self, Held};
use crate::nbd::Export;

use self::engine::CryptStage;
use self::export::Decrypted;
use self::key_page::KeyPage;
use super::layer::{Layer, Layered, StagedEngine};
use super::{Disk, Engine, EngineOptions};

/// Bytes of an `encrypt=aes-xts` key: two AES-256 keys.
pub const KEY_LEN: usize = 64;

/// How long a passed key pipe may take to give its key and its end.
pub const KEY_WAIT: Duration = Duration::from_secs(10);

/// A disk whose image holds ciphertext only.
pub type EncryptedDisk = Layered<Crypt>;

/// The layer that encrypts what it writes below and decrypts what it reads.
pub struct Crypt {
    xts: Arc<KeyPage>,
    /// Discards reach the image (`encrypt-discard=on` and the image takes them).
    pass_discard: bool,
    /// The key file is in use: no snapshot is written into it (see [`held_files`]).
    _key_file: Held,
}

/// Reads exactly [`KEY_LEN`] bytes from `file` (a file or a pipe, read to its end), which is
/// closed then, into `key` (the locked page: no copy elsewhere). With `wait`, the file is read
/// without blocking and a pipe must give its key and its end within that time (a passed
/// descriptor: no client holds the process up).
fn read_key(mut file: File, wait: Option<Duration>, key: &mut [u8; KEY_LEN]) -> io::Result<()> {
    let deadline = wait.map(|wait| Instant::now() + wait);
    if deadline.is_some() {
        set_nonblocking(&file)?;
    }
    let mut got = 0;
    while got < KEY_LEN {
        match read_some(&mut file, &mut key[got..], deadline) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("a key file holds exactly {KEY_LEN} bytes: this one ended after {got}"),
                ));
            }
            Ok(n) => got += n,
            Err(e) => return Err(e),
        }
    }
    let mut more = [0u8; 1];
    if read_some(&mut file, &mut more, deadline)? != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a key file holds exactly {KEY_LEN} bytes: this one holds more"),
        ));
    }
    Ok(())
}

fn set_nonblocking(file: &File) -> io::Result<()> {
    // SAFETY: F_GETFL and F_SETFL on a descriptor `file` owns; no memory is passed.
    let ok = unsafe {
        let flags = libc::fcntl(file.as_raw_fd(), libc::F_GETFL);
        flags >= 0 && libc::fcntl(file.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) == 0
    };
    if ok {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// One `read`, waiting (until `deadline`, if any) while a non-blocking pipe is empty.
fn read_some(file: &mut File, buf: &mut [u8], deadline: Option<Instant>) -> io::Result<usize> {
    loop {
        match file.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let left = deadline.map_or(Duration::ZERO, |d| {
                    d.saturating_duration_since(Instant::now())
                });
                if left.is_zero() {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the key pipe gave no key and end in time",
                    ));
                }
                let mut fd = libc::pollfd {
                    fd: file.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                let timeout = libc::timespec {
                    tv_sec: libc::time_t::try_from(left.as_secs()).unwrap_or(libc::time_t::MAX),
                    tv_nsec: libc::c_long::from(left.subsec_nanos()),
                };
                // SAFETY: ppoll on one pollfd and a timespec, both local.
                unsafe { libc::ppoll(&mut fd, 1, &timeout, std::ptr::null()) };
            }
            other => return other,
        }
    }
}

impl Layered<Crypt> {
    /// Encrypts `inner` with the key read from `key_file`; `pass_discard`: discards reach
    /// `inner` (revealing which ranges are unused) instead of being dropped.
    pub fn open(inner: Arc<dyn Disk>, key_file: &Path, pass_discard: bool) -> io::Result<Self> {
        let file = File::open(key_file)?;
        let held = held_files::hold(&file)?;
        let key = KeyPage::load(|key| read_key(file, None, key))?;
        Self::with_key(inner, key, pass_discard, held)
    }

    /// As [`Self::open`], with the key read from `key`, an open key file or pipe (passed by
    /// `vbmq ctl add-disk`): exactly [`KEY_LEN`] bytes, then its end, within [`KEY_WAIT`].
    pub fn with_key_from(inner: Arc<dyn Disk>, key: File, pass_discard: bool) -> io::Result<Self> {
        let held = held_files::hold(&key)?;
        let key = KeyPage::load(|raw| read_key(key, Some(KEY_WAIT), raw))?;
        Self::with_key(inner, key, pass_discard, held)
    }

    fn with_key(
        inner: Arc<dyn Disk>,
        xts: KeyPage,
        pass_discard: bool,
        key_file: Held,
    ) -> io::Result<Self> {
        let pass_discard = pass_discard && inner.supports_discard();
        let crypt = Crypt {
            xts: Arc::new(xts),
            pass_discard,
            _key_file: key_file,
        };
        Ok(Layered::new(inner, crypt))
    }
}

impl Layer for Crypt {
    fn engine(&self, below: &dyn Disk, options: EngineOptions) -> io::Result<Box<dyn Engine>> {
        let stage = CryptStage::new(self.xts.clone(), self.pass_discard);
        Ok(Box::new(StagedEngine::new(stage, below.engine(options)?)))
    }

    /// Write-zeroes is written as ciphertext; discard is dropped or passed down.
    fn supports_discard(&self, _below: &dyn Disk) -> bool {
        true
    }

    /// The snapshot layer lies below the cipher: its blocks are ciphertext, decrypted here.
    fn export_view(&self, export: Arc<dyn Export>) -> Arc<dyn Export> {
        Arc::new(Decrypted::new(export, self.xts.clone()))
    }
}
