//! vbmq: a multi-queue vhost-user-blk backend (VBMq).

pub mod confine;
