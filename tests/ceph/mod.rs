//! The throwaway single-node Ceph cluster the tests start: the benchmark's own
//! (`vbmq_bench::ceph_cluster`), shared so that there is one harness.
#![allow(unused_imports)]

pub use vbmq_bench::ceph_cluster::*;
