//! A hostile guest and a hostile frontend against a running `vbmq serve` (HOSTILE-GUEST.md).
//!
//! The frontend here is a test-only vhost-user driver that writes descriptor tables, rings and
//! virtio-blk headers itself. After every case: vbmq is alive, the attacked queue serves a good
//! request, a second disk driven by libblkio returns correct data, the disk file holds exactly
//! what the accepted requests wrote, and no guest byte outside device-writable buffers changed.

mod hostile {
    pub mod battery;
    pub mod chain;
    pub mod daemon;
    pub mod expect;
    pub mod frontend;
    pub mod memory;
    pub mod requests;
    pub mod rings;
    pub mod victim;
}

use hostile::battery::Battery;

fn report(name: &str, ran: usize, failures: &[String]) {
    eprintln!("{name}: {ran} cases, {} failed", failures.len());
    assert!(failures.is_empty(), "{} of {ran} cases failed:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn malformed_requests_and_rings() {
    let mut battery = Battery::start("requests");
    let cases: Vec<_> = hostile::requests::cases().into_iter().chain(hostile::rings::cases()).collect();
    assert!(cases.len() >= 200, "only {} cases", cases.len());
    for case in &cases {
        battery.run(case);
    }
    let ran = battery.ran;
    let failures = battery.finish();
    report("request battery", ran, &failures);
}
