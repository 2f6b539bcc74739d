//! Compressed clusters: a descriptor in the L2 entry names where the compressed bytes lie; they
//! inflate to one whole cluster (raw deflate, QEMU's default, or zstd with
//! `compression_type=zstd`).

use std::io::{self, Read};

use miniz_oxide::inflate::{TINFLStatus, decompress_slice_iter_to_slice};

use super::header::Compression;

/// Where a compressed cluster's bytes lie in the image file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Compressed {
    pub host: u64,
    pub len: u64,
}

impl Compressed {
    /// Decodes the descriptor of an L2 entry (bits below 62) for clusters of `cluster_bits`.
    pub fn from_entry(entry: u64, cluster_bits: u32) -> Self {
        let shift = 62 - (cluster_bits - 8);
        let offset_mask = (1u64 << shift) - 1;
        let sectors_mask = (1u64 << (cluster_bits - 8)) - 1;
        let host = entry & offset_mask;
        let sectors = ((entry >> shift) & sectors_mask) + 1;
        Compressed {
            host,
            len: sectors * 512 - (host & 511),
        }
    }
}

fn corrupt(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("compressed cluster: {what}"),
    )
}

/// Inflates `input` into `out` (one cluster). Bytes after the end of the stream are the
/// sector's padding; a stream shorter than the cluster leaves zeros.
pub fn decompress(kind: Compression, input: &[u8], out: &mut [u8]) -> io::Result<()> {
    out.fill(0);
    match kind {
        Compression::Zlib => {
            match decompress_slice_iter_to_slice(out, std::iter::once(input), false, true) {
                Ok(_) | Err(TINFLStatus::HasMoreOutput) => Ok(()),
                Err(e) => Err(corrupt(&format!("deflate: {e:?}"))),
            }
        }
        Compression::Zstd => {
            let mut decoder = ruzstd::decoding::StreamingDecoder::new(input)
                .map_err(|e| corrupt(&format!("zstd: {e}")))?;
            let mut done = 0;
            while done < out.len() {
                match decoder.read(&mut out[done..]) {
                    Ok(0) => break,
                    Ok(n) => done += n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(corrupt(&format!("zstd: {e}"))),
                }
            }
            Ok(())
        }
    }
}
