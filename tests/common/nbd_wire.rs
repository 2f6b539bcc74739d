//! The NBD handshake as the raw-socket tests speak it.

use std::io::Read;

/// Client flags: fixed newstyle, no zeroes.
pub const FIXED_NEWSTYLE_NO_ZEROES: u32 = 3;

/// Reads the server's newstyle greeting (18 bytes) and checks its magic.
pub fn read_greeting(stream: &mut impl Read) -> std::io::Result<()> {
    let mut hello = [0; 18];
    stream.read_exact(&mut hello)?;
    assert_eq!(&hello[..16], b"NBDMAGICIHAVEOPT");
    Ok(())
}
