// Copyright 2021 Amazon.com, Inc. or its affiliates. All Rights Reserved.
// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause

mod atomic_bitmap;
mod slice;

pub use atomic_bitmap::AtomicBitmap;
pub use slice::{ArcSlice, RefSlice};
