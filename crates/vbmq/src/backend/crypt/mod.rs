//! `encrypt=aes-xts,key-file=PATH`: the disk's image holds only AES-256-XTS ciphertext.
//!
//! Every 512-byte sector is encrypted with the tweak of its number (IEEE 1619, as dm-crypt's
//! `aes-xts-plain64`), so a sector's ciphertext depends on where it lies. The 64-byte key
//! (two AES-256 keys) is read once at start from `key-file` (which may be a pipe: the key then
//! never rests on a disk) and lives only in vbmq's memory. Writes are encrypted into a staging
//! buffer (the guest's buffer is never changed); reads are read into one and decrypted into the
//! guest's buffer, on the queue's thread (AES-NI where the CPU has it).
//!
//! Not offered on an encrypted disk: discard and write-zeroes (a discarded range would read back
//! as the decryption of zeros, and zeroing in the clear would show which ranges are zero).

mod engine;
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
    /// Encrypts `inner` with the key read from `key_file`.
    pub fn open(inner: Arc<dyn Disk>, key_file: &Path) -> io::Result<Self> {
        let mut key = read_key(key_file)?;
        let xts = Xts::new(&key);
        key.fill(0);
        let xts =
            xts.ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "bad key length"))?;
        Ok(EncryptedDisk {
            inner,
            xts: Arc::new(xts),
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
        )))
    }

    fn supports_discard(&self) -> bool {
        false
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

    fn changes(&self) -> Option<Arc<super::ChangeMap>> {
        self.inner.changes()
    }
}
