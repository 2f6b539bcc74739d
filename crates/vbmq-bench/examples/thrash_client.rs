//! The thrasher's libblkio load (scripts/thrash.py): one thread per vhost-user-blk disk writes
//! generation-stamped 4 KiB blocks in rounds, each round a few random blocks then a FLUSH, and
//! reads blocks back to check every acknowledged-and-flushed write is there, across the
//! restarts, resizes and faults the thrasher inflicts on vbmq.
//!
//! `thrash_client SEED NAME=SOCKET:BLOCKS...`; until its stdin closes, then each thread reads
//! every block back once more and prints `DONE NAME`. A line `SYNC N` on stdin comes back on
//! stdout after every line printed before it. A line `DROP NAME` makes NAME's thread close its
//! connection with its next round's writes in flight, as a frontend that goes away mid-I/O, then
//! connect again (`D NAME dropped`, then `C NAME`). Lines on stdout, one per fact:
//!
//! - `W NAME GEN B,B,...` before a round's writes are submitted;
//! - `F NAME GEN` once the round's FLUSH completed (those blocks now hold GEN or later);
//! - `E NAME GEN ERRNO` a write or flush failed (the round is not flushed, its blocks unknown);
//! - `D NAME WHY` the connection is gone (the socket file was replaced, or nothing completed for
//!   `HANG`): the thread connects again and reads every block back before writing on;
//! - `C NAME` connected and every block read back as expected;
//! - `V NAME BLOCK WHAT` a block that holds neither its last flushed generation nor a later one
//!   written since: an acknowledged-and-flushed write was lost. The thread stops.
//!
//! Block B of generation G holds (B, G) as two little-endian 64-bit words, repeated.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::mem::MaybeUninit;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use blkio::{Blkio, Blkioq, Completion, ReqFlags};

const BLOCK: usize = 4096;
/// Blocks written per round.
const ROUND: usize = 16;
/// Blocks read back after each round (a random sample; all of them after a reconnect).
const SAMPLE: usize = 16;
/// No completion for this long while the socket file stays the same: a hung disk.
const HANG: Duration = Duration::from_secs(60);
/// Pause between rounds: load that leaves the 2 shared cores to vbmq and the guest.
const PACE: Duration = Duration::from_millis(20);

type Out = Arc<Mutex<std::io::Stdout>>;

fn say(out: &Out, line: String) {
    let mut out = out.lock().unwrap_or_else(|e| e.into_inner());
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// xorshift64*: the client's choices from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Why a round or a read-back stopped.
enum Failure {
    /// The connection is gone: connect again.
    Gone(String),
    /// A request completed with an error (a host fault): go on.
    Request(i32),
    /// Data lost: stop.
    Lost(String),
}

/// One connection: the driver, its queue and its buffers (`2 * ROUND` blocks).
struct Conn {
    _blkio: Blkio,
    queue: Blkioq,
    buffers: *mut u8,
    socket_file: (u64, i64, i64),
}

/// Which socket file `socket` is: its inode number alone is not enough, as the file of a
/// stopped vbmq is removed and the next one's may get the same number.
fn socket_file(socket: &Path) -> std::io::Result<(u64, i64, i64)> {
    let meta = std::fs::metadata(socket)?;
    Ok((meta.ino(), meta.ctime(), meta.ctime_nsec()))
}

impl Conn {
    fn open(socket: &Path) -> Result<Conn, String> {
        let file = socket_file(socket).map_err(|e| e.to_string())?;
        let path = socket.to_str().ok_or("socket path is not UTF-8")?;
        let mut blkio = Blkio::new("virtio-blk-vhost-user").map_err(|e| e.to_string())?;
        blkio.set_str("path", path).map_err(|e| e.to_string())?;
        blkio.connect().map_err(|e| e.to_string())?;
        blkio.set_i32("num-queues", 1).map_err(|e| e.to_string())?;
        let mut started = blkio.start().map_err(|e| e.to_string())?;
        let queue = started.queues.pop().ok_or("no queue")?;
        let align = blkio
            .get_u64("mem-region-alignment")
            .map_err(|e| e.to_string())? as usize;
        let len = (2 * ROUND * BLOCK).div_ceil(align.max(1)) * align.max(1);
        let region = blkio.alloc_mem_region(len).map_err(|e| e.to_string())?;
        blkio.map_mem_region(&region).map_err(|e| e.to_string())?;
        Ok(Conn {
            _blkio: blkio,
            queue,
            buffers: region.addr as *mut u8,
            socket_file: file,
        })
    }

    fn buffer(&mut self, slot: usize) -> &mut [u8] {
        // SAFETY: the region holds 2 * ROUND blocks and lives as long as `_blkio`; slot < 2 * ROUND.
        unsafe { std::slice::from_raw_parts_mut(self.buffers.add(slot * BLOCK), BLOCK) }
    }

    /// Waits for `count` completions; returns each slot's result.
    fn complete(&mut self, socket: &Path, count: usize) -> Result<Vec<(usize, i32)>, Failure> {
        let mut done = Vec::with_capacity(count);
        let mut completions: Vec<MaybeUninit<Completion>> =
            (0..count).map(|_| MaybeUninit::uninit()).collect();
        let mut idle = Instant::now();
        while done.len() < count {
            let mut timeout = Duration::from_millis(500);
            let n = self
                .queue
                .do_io(&mut completions, 1, Some(&mut timeout), None)
                .unwrap_or(0);
            for c in &completions[..n] {
                // SAFETY: do_io initialised the first `n` entries.
                let c = unsafe { c.assume_init_ref() };
                done.push((c.user_data, c.ret));
            }
            if n > 0 {
                idle = Instant::now();
                continue;
            }
            // Nothing completed: a restarted vbmq binds a new socket file.
            match socket_file(socket) {
                Ok(file) if file == self.socket_file => {}
                Ok(_) => return Err(Failure::Gone("socket replaced".into())),
                Err(_) => return Err(Failure::Gone("socket removed".into())),
            }
            if idle.elapsed() > HANG {
                return Err(Failure::Gone(format!("nothing completed for {HANG:?}")));
            }
        }
        Ok(done)
    }
}

struct Disk {
    name: String,
    socket: PathBuf,
    blocks: u64,
    /// Per block: the generation its last flushed write stamped, and the highest written since.
    flushed: Vec<u64>,
    written: Vec<u64>,
    generation: u64,
    rng: Rng,
    out: Out,
    /// Set by `DROP NAME`: close the connection with the next round's writes in flight.
    drop: Arc<AtomicBool>,
}

fn stamp(buf: &mut [u8], block: u64, generation: u64) {
    for pair in buf.chunks_exact_mut(16) {
        pair[..8].copy_from_slice(&block.to_le_bytes());
        pair[8..].copy_from_slice(&generation.to_le_bytes());
    }
}

impl Disk {
    /// Checks that `block` (read into `buf`) holds a generation between its last flushed
    /// write's and the last written's. A block never flushed may hold anything unstamped
    /// (zeros, a base's or an encrypted image's initial bytes); a block with a write
    /// outstanding may be torn.
    fn check(&self, block: u64, buf: &[u8]) -> Result<(), Failure> {
        let word = |at: usize| u64::from_le_bytes(buf[at..at + 8].try_into().unwrap_or([0; 8]));
        let (number, generation) = (word(0), word(8));
        let uniform = buf.chunks_exact(16).all(|p| p == &buf[..16]);
        let (low, high) = (self.flushed[block as usize], self.written[block as usize]);
        let stamped_here = uniform && number == block;
        if stamped_here && (low..=high).contains(&generation) {
            return Ok(());
        }
        if low == 0 && !(stamped_here && generation > high) {
            return Ok(());
        }
        if !uniform && low < high {
            return Ok(());
        }
        Err(Failure::Lost(format!(
            "{block} holds ({number}, {generation}){} where a generation in {low}..={high} was due",
            if uniform { "" } else { " torn" }
        )))
    }

    /// Reads `blocks` back, ROUND at a time, and checks each.
    fn read_back(&mut self, conn: &mut Conn, blocks: &[u64]) -> Result<(), Failure> {
        for chunk in blocks.chunks(ROUND) {
            for (slot, &block) in chunk.iter().enumerate() {
                let buf = conn.buffer(ROUND + slot).as_mut_ptr();
                conn.queue
                    .read(block * BLOCK as u64, buf, BLOCK, slot, ReqFlags::empty());
            }
            for (slot, ret) in conn.complete(&self.socket, chunk.len())? {
                if ret != 0 {
                    return Err(Failure::Request(ret));
                }
                let block = chunk.get(slot).copied().unwrap_or(0);
                let data = conn.buffer(ROUND + slot).to_vec();
                self.check(block, &data)?;
            }
        }
        Ok(())
    }

    /// One round: ROUND distinct random blocks stamped with the next generation, then FLUSH.
    fn round(&mut self, conn: &mut Conn) -> Result<(), Failure> {
        self.generation += 1;
        let generation = self.generation;
        let mut picked: Vec<u64> = Vec::with_capacity(ROUND);
        while picked.len() < ROUND.min(self.blocks as usize) {
            let block = self.rng.below(self.blocks);
            if !picked.contains(&block) {
                picked.push(block);
            }
        }
        let list: Vec<String> = picked.iter().map(u64::to_string).collect();
        say(
            &self.out,
            format!("W {} {generation} {}", self.name, list.join(",")),
        );
        for (slot, &block) in picked.iter().enumerate() {
            self.written[block as usize] = generation;
            stamp(conn.buffer(slot), block, generation);
            let buf = conn.buffer(slot).as_ptr();
            conn.queue
                .write(block * BLOCK as u64, buf, BLOCK, slot, ReqFlags::empty());
        }
        if self.drop.swap(false, Ordering::Relaxed) {
            // Submitted, not waited for: the backend sees them in flight as the socket closes.
            let mut no_wait = Duration::ZERO;
            conn.queue.do_io(&mut [], 0, Some(&mut no_wait), None).ok();
            return Err(Failure::Gone("dropped".into()));
        }
        let failed = conn
            .complete(&self.socket, picked.len())?
            .into_iter()
            .find(|&(_, ret)| ret != 0);
        if let Some((_, ret)) = failed {
            return Err(Failure::Request(ret));
        }
        conn.queue.flush(0, ReqFlags::empty());
        if let Some((_, ret)) = conn.complete(&self.socket, 1)?.first().copied()
            && ret != 0
        {
            return Err(Failure::Request(ret));
        }
        for &block in &picked {
            self.flushed[block as usize] = generation;
        }
        say(&self.out, format!("F {} {generation}", self.name));
        let sample: Vec<u64> = (0..SAMPLE).map(|_| self.rng.below(self.blocks)).collect();
        self.read_back(conn, &sample)
    }

    /// Connects (waiting for the socket) and reads every block back.
    fn connect(&mut self, stop: &AtomicBool) -> Option<Conn> {
        loop {
            if let Ok(mut conn) = Conn::open(&self.socket) {
                let all: Vec<u64> = (0..self.blocks).collect();
                match self.read_back(&mut conn, &all) {
                    Ok(()) => {
                        say(&self.out, format!("C {}", self.name));
                        return Some(conn);
                    }
                    Err(Failure::Lost(what)) => {
                        say(&self.out, format!("V {} {what}", self.name));
                        return None;
                    }
                    Err(Failure::Request(ret)) => {
                        say(&self.out, format!("E {} 0 {}", self.name, -ret));
                        std::thread::sleep(Duration::from_millis(200));
                    }
                    Err(Failure::Gone(_)) => {}
                }
            }
            if stop.load(Ordering::Relaxed) {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Rounds until `stop`, then a last read-back of every block; false on lost data.
    fn run(&mut self, stop: &AtomicBool) -> bool {
        let Some(mut conn) = self.connect(stop) else {
            return false;
        };
        while !stop.load(Ordering::Relaxed) {
            match self.round(&mut conn) {
                Ok(()) => std::thread::sleep(PACE),
                Err(Failure::Request(ret)) => {
                    say(
                        &self.out,
                        format!("E {} {} {}", self.name, self.generation, -ret),
                    );
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(Failure::Gone(why)) => {
                    say(&self.out, format!("D {} {why}", self.name));
                    drop(conn);
                    let Some(next) = self.connect(stop) else {
                        return false;
                    };
                    conn = next;
                }
                Err(Failure::Lost(what)) => {
                    say(&self.out, format!("V {} {what}", self.name));
                    return false;
                }
            }
        }
        let all: Vec<u64> = (0..self.blocks).collect();
        match self.read_back(&mut conn, &all) {
            Ok(()) => {
                say(&self.out, format!("DONE {}", self.name));
                true
            }
            Err(Failure::Lost(what)) => {
                say(&self.out, format!("V {} {what}", self.name));
                false
            }
            Err(Failure::Request(ret)) => {
                say(&self.out, format!("E {} final {}", self.name, -ret));
                false
            }
            Err(Failure::Gone(why)) => {
                say(&self.out, format!("D {} {why}", self.name));
                false
            }
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(seed) = args.first().and_then(|s| s.parse::<u64>().ok()) else {
        eprintln!("usage: thrash_client SEED NAME=SOCKET:BLOCKS...");
        std::process::exit(2);
    };
    let out: Out = Arc::new(Mutex::new(std::io::stdout()));
    let stop = Arc::new(AtomicBool::new(false));
    let mut disks = Vec::new();
    let mut drops = HashMap::new();
    for (index, arg) in args[1..].iter().enumerate() {
        let parsed = arg.split_once('=').and_then(|(name, rest)| {
            let (socket, blocks) = rest.rsplit_once(':')?;
            Some((name, socket, blocks.parse::<u64>().ok()?))
        });
        let Some((name, socket, blocks)) = parsed else {
            eprintln!("thrash_client: {arg}: expected NAME=SOCKET:BLOCKS");
            std::process::exit(2);
        };
        let drop = Arc::new(AtomicBool::new(false));
        drops.insert(name.to_string(), drop.clone());
        disks.push(Disk {
            name: name.to_string(),
            socket: PathBuf::from(socket),
            blocks,
            flushed: vec![0; blocks as usize],
            written: vec![0; blocks as usize],
            generation: 0,
            rng: Rng(seed.wrapping_mul(31).wrapping_add(index as u64 + 1) | 1),
            out: out.clone(),
            drop,
        });
    }
    let threads: Vec<_> = disks
        .into_iter()
        .map(|mut disk| {
            let stop = stop.clone();
            std::thread::spawn(move || disk.run(&stop))
        })
        .collect();
    // `SYNC N` on stdin is echoed once every line printed before it is out; stdin closing is
    // the signal to finish.
    for line in std::io::stdin().lock().lines() {
        match line {
            Ok(line) if line.starts_with("SYNC ") => say(&out, line),
            Ok(line) => {
                if let Some(flag) = line.strip_prefix("DROP ").and_then(|name| drops.get(name)) {
                    flag.store(true, Ordering::Relaxed);
                }
            }
            Err(_) => break,
        }
    }
    stop.store(true, Ordering::Relaxed);
    let results: Vec<bool> = threads
        .into_iter()
        .map(|t| t.join().unwrap_or(false))
        .collect();
    let all_ok = results.iter().all(|&ok| ok);
    std::process::exit(if all_ok { 0 } else { 1 });
}
