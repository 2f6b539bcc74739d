//! The host's best: a reference to bare metal is the best of the host's engines measured in the
//! same case, never one engine chosen in advance. Which engine wins depends on the storage: on
//! tmpfs and on the page cache `pread` (io_uring hands every such read to a kernel worker), on
//! an NVMe device io_uring. Goals, tables and charts all ask here.

use super::systems::System;

/// The host engines measured for the bare-metal reference `reference` belongs to: O_DIRECT
/// reads and writes, or page-cache ones, each through io_uring and through `pread`/`pwrite`.
/// `None` for a system that is not bare metal.
pub fn engines(reference: System) -> Option<[System; 2]> {
    match reference {
        System::BareMetal | System::BareMetalPsync => {
            Some([System::BareMetal, System::BareMetalPsync])
        }
        System::BareMetalPageCache | System::BareMetalPageCachePsync => {
            Some([System::BareMetalPageCache, System::BareMetalPageCachePsync])
        }
        _ => None,
    }
}

/// How a target names the reference: the best engine for bare metal, the system itself otherwise.
pub fn describe(reference: System) -> String {
    match engines(reference) {
        Some([System::BareMetalPageCache, _]) => "the best bare page-cache engine".into(),
        Some(_) => "the best bare engine".into(),
        None => reference.to_string(),
    }
}

/// The system `reference` stands for in one case: of its engines, the one whose figure
/// (`value_of`) is best, higher or lower as `higher_is_better` says; `reference` itself when
/// none was measured, or when it is not bare metal. A tie keeps the first (io_uring).
pub fn best(
    reference: System,
    higher_is_better: bool,
    value_of: impl Fn(System) -> Option<f64>,
) -> System {
    let Some(engines) = engines(reference) else {
        return reference;
    };
    engines
        .into_iter()
        .filter_map(|s| Some((s, value_of(s)?)))
        .reduce(|a, b| {
            let b_wins = if higher_is_better {
                b.1 > a.1
            } else {
                b.1 < a.1
            };
            if b_wins { b } else { a }
        })
        .map_or(reference, |(s, _)| s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::systems::WaitMode;

    fn figures(pairs: &[(System, f64)]) -> impl Fn(System) -> Option<f64> + '_ {
        move |s| pairs.iter().find(|(p, _)| *p == s).map(|(_, v)| *v)
    }

    #[test]
    fn the_faster_engine_is_the_reference_either_way() {
        let (uring, psync) = (System::BareMetalPageCache, System::BareMetalPageCachePsync);
        // Page-cache reads on this kernel: pread 1.1M IOPS and 0.8 us, io_uring 155K and 6.2 us.
        let iops = [(uring, 155e3), (psync, 1.1e6)];
        let p50 = [(uring, 6.2), (psync, 0.8)];
        assert_eq!(best(uring, true, figures(&iops)), psync);
        assert_eq!(best(uring, false, figures(&p50)), psync);
        // A device where io_uring wins.
        let (uring, psync) = (System::BareMetal, System::BareMetalPsync);
        assert_eq!(
            best(psync, true, figures(&[(uring, 9e5), (psync, 7e5)])),
            uring
        );
        assert_eq!(
            best(uring, false, figures(&[(uring, 2.0), (psync, 3.0)])),
            uring
        );
    }

    #[test]
    fn an_unmeasured_engine_is_not_the_reference() {
        let (uring, psync) = (System::BareMetal, System::BareMetalPsync);
        assert_eq!(best(uring, true, figures(&[(psync, 1.0)])), psync);
        assert_eq!(best(psync, true, figures(&[(uring, 1.0)])), uring);
        assert_eq!(best(uring, true, figures(&[])), uring);
        // A tie keeps io_uring.
        assert_eq!(
            best(uring, true, figures(&[(uring, 1.0), (psync, 1.0)])),
            uring
        );
    }

    #[test]
    fn other_systems_are_their_own_reference() {
        let poll = System::vbmq(WaitMode::Poll);
        let measured = [(System::BareMetal, 1e9), (System::BareMetalPsync, 1e9)];
        assert_eq!(best(poll, true, figures(&measured)), poll);
        assert_eq!(
            best(System::QsdVbdp, false, figures(&measured)),
            System::QsdVbdp
        );
        assert_eq!(engines(System::QsdPageCache), None);
        assert_eq!(describe(System::QsdVbdp), "VBDP (qsd iothread)");
        assert_eq!(describe(System::BareMetalPsync), "the best bare engine");
        assert_eq!(
            describe(System::BareMetalPageCache),
            "the best bare page-cache engine"
        );
    }
}
