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
mod wide;
mod xts;

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;
use std::sync::Arc;

use self::engine::CryptEngine;
use self::xts::Xts;
use super::{Disk, Engine, EngineOptions, Geometry};

/// Bytes of an `encrypt=aes-xts` key: two AES-256 keys.
pub const KEY_LEN: usize = 64;

/// A disk whose image holds ciphertext only.
pub struct EncryptedDisk {
    inner: Arc<dyn Disk>,
    xts: Arc<Xts>,
    /// Discards reach the image (`encrypt-discard=on` and the image takes them).
    pass_discard: bool,
}

/// Reads exactly [`KEY_LEN`] bytes from `path` (a file or a pipe).
fn read_key(path: &Path) -> io::Result<[u8; KEY_LEN]> {
    let mut key = [0u8; KEY_LEN];
    let mut file = File::open(path)?;
    file.read_exact(&mut key).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a key file holds {KEY_LEN} bytes: {e}"),
        )
    })?;
    let mut more = [0u8; 1];
    if file.read(&mut more)? != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a key file holds exactly {KEY_LEN} bytes"),
        ));
    }
    Ok(key)
}

impl EncryptedDisk {
    /// Encrypts `inner` with the key read from `key_file`; `pass_discard`: discards reach
    /// `inner` (revealing which ranges are unused) instead of being dropped.
    pub fn open(inner: Arc<dyn Disk>, key_file: &Path, pass_discard: bool) -> io::Result<Self> {
        let mut key = read_key(key_file)?;
        let xts = Xts::new(&key);
        key.fill(0);
        let xts =
            xts.ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "bad key length"))?;
        let pass_discard = pass_discard && inner.supports_discard();
        Ok(EncryptedDisk {
            inner,
            xts: Arc::new(xts),
            pass_discard,
        })
    }
}

impl Disk for EncryptedDisk {
    fn geometry(&self) -> Geometry {
        self.inner.geometry()
    }

    fn engine(&self, options: EngineOptions) -> io::Result<Box<dyn Engine>> {
        Ok(Box::new(CryptEngine::new(
            self.inner.engine(options)?,
            self.xts.clone(),
            self.pass_discard,
        )))
    }

    /// Write-zeroes is written as ciphertext; discard is dropped or passed down.
    fn supports_discard(&self) -> bool {
        true
    }

    fn stats(&self) -> Vec<(&'static str, u64)> {
        self.inner.stats()
    }

    fn resize(&self, bytes: u64, shrink: bool) -> io::Result<u64> {
        self.inner.resize(bytes, shrink)
    }

    fn on_resize(&self, listener: Box<dyn Fn(u64) + Send + Sync>) {
        self.inner.on_resize(listener);
    }

    fn close(&self) {
        self.inner.close();
    }

    fn writer_seat(&self) -> Option<Arc<super::WriterSeat>> {
        self.inner.writer_seat()
    }
}
