//! The backing file every system reads and writes: raw, on tmpfs, filled with random data.
//!
//! A sparse file would read holes, which the kernel short-cuts (about 3x faster than data): not
//! what a disk does, so every byte is written first.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use super::error::{BenchError, Result};
use super::rng::Rng;

/// A file that exists for the duration of the benchmark and is removed on drop.
#[derive(Debug)]
pub struct BackingFile {
    path: PathBuf,
    size: u64,
}

impl BackingFile {
    /// Creates `path` with `size` bytes of random data (`size` a multiple of 1 MiB).
    pub fn create(path: &Path, size: u64) -> Result<Self> {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| BenchError::io(format!("creating {}", path.display()), e))?;
        // From here on the file exists: drop removes it even if filling fails.
        let backing = BackingFile {
            path: path.to_path_buf(),
            size,
        };
        fill_random(&mut file, size)
            .map_err(|e| BenchError::io(format!("filling {}", path.display()), e))?;
        Ok(backing)
    }

    /// Where the file is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }
}

impl Drop for BackingFile {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

fn fill_random(file: &mut File, size: u64) -> std::io::Result<()> {
    const CHUNK: usize = 4 << 20;
    let mut rng = Rng::new(0x5eed);
    let mut buf = vec![0u8; CHUNK];
    let mut left = size;
    while left > 0 {
        let n = left.min(CHUNK as u64) as usize;
        rng.fill(&mut buf[..n]);
        file.write_all(&buf[..n])?;
        left -= n as u64;
    }
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_random_file_and_removes_it() {
        let dir = std::env::temp_dir().join(format!("vbmq-disk-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("disk.raw");
        {
            let disk = BackingFile::create(&path, 5 << 20).unwrap();
            let data = fs::read(disk.path()).unwrap();
            assert_eq!(data.len() as u64, disk.size());
            // Random data: no 4 KiB block is all zeroes.
            assert!(data.chunks(4096).all(|b| b.iter().any(|&x| x != 0)));
            assert!(
                BackingFile::create(&path, 1 << 20).is_err(),
                "must not clobber"
            );
        }
        assert!(!path.exists());
        fs::remove_dir(&dir).unwrap();
    }
}
